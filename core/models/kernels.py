"""Choices between code paths, made by timing them on this machine at start-up, never by a constant.

The processor under this project changes: an Intel Xeon with AMX (native bf16 matrix units) on some days, an AMD
EPYC with AVX2 only on others. What is fast on one can be several times slower on the other, so each choice here
times its candidates now, on synthetic tensors of the model's own shapes, alternating which goes first and keeping
each one's best time (a warm-up round included).

- `head_choice` (and `head_kernel`, its first half): the LM-head product as linear()'s h @ W^T, as W @ h^T
  (torch.mv for one row), or through oneDNN's linear primitive, and whether one row is cheap enough for a tree
  verify to compute rows on demand. Same values up to summation order, so the choice cannot change a token
  beyond the rounding that already differs between row counts. The target's head (TargetModel.logits) and the
  drafters' reduced heads (core/drafters/eagle.py, core/drafters/medusa.py) each time their own shape and multiply through
  `head_product`.
- `body_choice` and `OneDNNLinear`: at which row counts the target's forward runs faster with its linear layers
  routed through oneDNN's linear primitive than through linear()'s default BLAS call (MKL in torch's CPU builds),
  which on some processors runs the few rows of a tree verify at about half oneDNN's speed. The route is a torch
  function mode entered around the target's forward (and the draft head's): the modeling code, its classes and its
  modules stay as they are.
- `PackedWeights`: copies of a model's weights in oneDNN's own blocked layout, made once at load. linear() and
  oneDNN on a plain weight re-lay the whole matrix out on every call; for the few rows of a decode step that is
  most of the cost, and the packed copy gives bitwise-equal results. The `onednn` head kernel and the
  `OneDNNLinear` route read a packed copy wherever one exists, so the start-up timings compare the packed product
  against the others.
- `fastest_cpu_dtype`: bf16 or fp32 for a CPU model loaded without an explicit dtype. fp32 is the exact reference,
  so it is chosen whenever it is at least as fast; bf16 only where the processor makes it faster.
- `bf16_matmul_is_faster`: whether head training on CPU runs under bf16 autocast or in plain fp32 (without bf16
  units, bf16 products run several times slower than fp32).

The measurements that shaped each choice: docs/perf.md, "CPU kernels".
"""
from __future__ import annotations

import contextlib
import functools
import time
from typing import Callable

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

ROWS = (1, 16)  # a one-token step and a default tree verify (16 nodes)
HEAD_SLICE = 32768  # LM-head rows timed; the cost is scaled to the full vocabulary


def fastest(candidates: dict[object, Callable[[], object]], rounds: int = 5) -> dict[object, float]:
    """Best seconds of each zero-argument callable over `rounds` timed rounds after one warm-up round, the order
    rotated per round."""
    keys = list(candidates)
    best = {k: float("inf") for k in keys}
    for r in range(rounds + 1):
        for k in keys[r % len(keys):] + keys[: r % len(keys)]:
            t0 = time.perf_counter()
            candidates[k]()
            if r:
                best[k] = min(best[k], time.perf_counter() - t0)
    return best


HEAD_KERNELS = ("linear", "vocab_major", "onednn")  # equal values, summed in different orders


def _onednn_linear(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """(M, H) x (V, H) (+ b (V,)) -> (M, V) through oneDNN's linear primitive on the plain (unpacked) weight, no
    copy."""
    return torch.ops.mkldnn._linear_pointwise(h.contiguous(), w, b, "none", [], "")


@functools.lru_cache(maxsize=None)
def onednn_head_works(dtype: torch.dtype) -> bool:
    """Whether this torch build runs `_onednn_linear` for `dtype` on CPU and agrees with linear(); a build without
    the op (or a future torch that renames it) simply drops the candidate."""
    try:
        gen = torch.Generator().manual_seed(0)
        h, w = torch.randn(3, 16, generator=gen).to(dtype), torch.randn(40, 16, generator=gen).to(dtype)
        with torch.inference_mode():
            got, ref = _onednn_linear(h, w).float(), F.linear(h, w).float()
        return got.shape == ref.shape and torch.allclose(got, ref, rtol=2e-2, atol=2e-2)
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


PACK_ROWS = 16  # the row count oneDNN lays a packed weight out for; any row count reads it correctly
# The dtypes a weight is packed in: the two the start-up timing chooses between. fp16 stays plain on every processor
# (oneDNN packs it where the CPU has fp16 units, e.g. AMX Xeons, but no timing here ever picked fp16 on a CPU).
PACKABLE = (torch.bfloat16, torch.float32)


def _reorder(w: torch.Tensor) -> torch.Tensor:
    """(V, H) plain weight -> oneDNN's packed layout of it, laid out for PACK_ROWS rows."""
    return torch.ops.mkldnn._reorder_linear_weight(w, PACK_ROWS)


@functools.lru_cache(maxsize=None)
def packing_works(dtype: torch.dtype) -> bool:
    """Whether this torch build packs a `dtype` CPU weight for oneDNN (`_reorder_linear_weight`) and the packed
    product, bias included, agrees with linear(); a build without the ops simply keeps plain weights. Only the
    PACKABLE dtypes are asked at all, so the answer for fp16 is False whatever the processor offers."""
    if dtype not in PACKABLE or not onednn_head_works(dtype):
        return False
    try:
        gen = torch.Generator().manual_seed(0)
        h, w, b = (torch.randn(*s, generator=gen).to(dtype) for s in ((3, 16), (40, 16), (40,)))
        with torch.inference_mode():
            got = _onednn_linear(h, _reorder(w), b).float()
            ref = F.linear(h, w, b).float()
        return got.shape == ref.shape and torch.allclose(got, ref, rtol=2e-2, atol=2e-2)
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


def tensor_version(t: torch.Tensor) -> tuple[int, int | None]:
    """(storage address, in-place version counter) of a tensor: what changes when its values may have changed
    (an optimizer step, `.to()`, a load into it). The counter is None for an inference tensor, which has none and
    cannot be changed in place outside inference mode."""
    return t.data_ptr(), (None if t.is_inference() else t._version)


def linear_weights(module: torch.nn.Module) -> list[torch.Tensor]:
    """The weight of every nn.Linear inside `module`, in module order: what an owner packs."""
    return [m.weight for m in module.modules() if isinstance(m, torch.nn.Linear)]


def spare_memory_bytes() -> int | None:
    """Memory the system could still give this process (Linux MemAvailable), or None where it cannot be read. A
    packed copy costs its weight's size, so owners pack only what fits in half of it (`PackedWeights.add_within`)."""
    try:
        for line in open("/proc/meminfo", encoding="utf-8"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class PackedWeights:
    """oneDNN-packed copies of 2-D CPU weights (bf16 or fp32), looked up by the weight tensor itself.

    Each owner (a target, a drafter) holds its own, made once when it is built and read by `head_product` and
    `OneDNNLinear`; the modules keep their plain weights, so nothing else changes. A copy is only handed out while
    its weight is unchanged since packing (`tensor_version`); after that the plain weight is used. A copy costs the
    weight's size in memory, so owners drop the ones their timing did not pick (`discard`)."""

    def __init__(self) -> None:
        # id(weight) -> (weight, packed copy, the weight's tensor_version when packed)
        self._by_id: dict[int, tuple[torch.Tensor, torch.Tensor, tuple]] = {}

    def add(self, w: torch.Tensor) -> bool:
        """Pack `w` (no-op off CPU, for other dtypes, or where packing does not work); True when it is packed."""
        if self.get(w) is None and w.dim() == 2 and w.device.type == "cpu" and packing_works(w.dtype):
            with torch.inference_mode():
                packed = _reorder(w.detach())
            self._by_id[id(w)] = (w, packed, tensor_version(w))
        return self.get(w) is not None

    def add_within(self, groups: list[list[torch.Tensor]], spare: int | None = None) -> list[bool]:
        """Pack each group of weights, in order, while the copies so far fit in half of `spare` bytes (default:
        `spare_memory_bytes()`; no limit where it is unknown); a group that would not fit stays plain, whole.
        Returns, per group, whether it was packed. A model near the machine's memory keeps plain weights rather
        than doubling them."""
        spare = spare_memory_bytes() if spare is None else spare
        room = float("inf") if spare is None else spare / 2
        done = []
        for group in groups:
            size = sum(w.numel() * w.element_size() for w in group)
            fits = size <= room
            if fits:
                room -= size
            done.append(fits and all([self.add(w) for w in group]))  # every weight tried; off CPU none packs
        return done

    def get(self, w: torch.Tensor) -> torch.Tensor | None:
        """w's packed copy, or None (never packed, or changed since: the same tensor, not a reused id)."""
        entry = self._by_id.get(id(w))
        return entry[1] if entry is not None and entry[0] is w and entry[2] == tensor_version(w) else None

    def discard(self, keep=lambda w: False) -> None:
        """Drop every packed copy whose weight `keep` rejects (all of them by default)."""
        self._by_id = {k: e for k, e in self._by_id.items() if keep(e[0])}

    def __len__(self) -> int:
        return len(self._by_id)


def head_candidates(w: torch.Tensor) -> tuple[str, ...]:
    """The kernels `head_product` may run for this head: linear() anywhere; the others for bf16/fp32 CPU heads."""
    if w.dtype not in (torch.bfloat16, torch.float32) or w.device.type != "cpu":
        return ("linear",)
    return HEAD_KERNELS if onednn_head_works(w.dtype) else HEAD_KERNELS[:2]


def head_product(w: torch.Tensor, h: torch.Tensor, kernel: str = "linear",
                 packed: PackedWeights | None = None) -> torch.Tensor:
    """h (..., H) through a bias-free head w (V, H) -> logits (..., V), with one of HEAD_KERNELS.

    linear: F.linear's h @ W^T. vocab_major: the vocabulary as the GEMM's row dimension, torch.mv for one row and
    W @ h^T for several (a transposed, strided view comes back). onednn: oneDNN's linear primitive, on w's packed
    copy when `packed` holds one, else on w itself. Same values up to the order the sums run in; `head_choice`
    times them for a head on this machine.
    """
    if kernel == "linear":
        return F.linear(h, w)
    flat = h.reshape(-1, h.shape[-1])  # (M, H)
    if kernel == "vocab_major" and flat.shape[0] == 1:  # one row as (H,), (1, H) or (1, 1, H): the timed torch.mv
        return torch.mv(w, flat[0]).reshape(*h.shape[:-1], w.shape[0])
    if kernel == "vocab_major":
        out = (w @ flat.T).T  # (M, V)
    else:
        p = packed.get(w) if packed is not None else None
        out = _onednn_linear(flat, w if p is None else p)  # (M, V)
    return out.reshape(*h.shape[:-1], w.shape[0])


def time_head_kernels(w: torch.Tensor, rounds: int = 5,
                      packed: PackedWeights | None = None) -> dict[str, dict[int, float]]:
    """{kernel: {rows: best seconds}} for every `head_candidates` kernel of a (V, H) head over 1 and 8 rows (a
    one-token step; a draft level or a small verify); `onednn` reads w's packed copy where `packed` has one."""
    names = head_candidates(w)
    out: dict[str, dict[int, float]] = {k: {} for k in names}
    gen = torch.Generator().manual_seed(0)  # the caller's global random stream stays untouched
    with torch.inference_mode():
        for m in (1, 8):
            h = torch.randn(m, w.shape[1], generator=gen).to(w.dtype)
            for k, t in fastest({k: (lambda k=k: head_product(w, h[0] if m == 1 else h, k, packed)) for k in names},
                                rounds).items():
                out[k][m] = t
    return out


def head_choice(w: torch.Tensor, bias: torch.Tensor | None = None, rounds: int = 5,
                packed: PackedWeights | None = None) -> tuple[str, bool]:
    """(kernel, rows cheap) for a (V, H) head on this machine: the fastest of `head_candidates`, one decision for 1
    and 8 rows together, and `rows_are_cheap` for that kernel; ("linear", False) for a head with a bias or off CPU.
    Which kernel wins depends on the head's shape as well as the processor (docs/perf.md, "LM-head kernel").
    """
    if bias is not None or len(head_candidates(w)) == 1:
        return "linear", False
    times = time_head_kernels(w, rounds, packed)
    kernel = min(times, key=lambda k: sum(times[k].values()))
    return kernel, rows_are_cheap(times[kernel])


def head_kernel(w: torch.Tensor, bias: torch.Tensor | None = None, rounds: int = 5,
                packed: PackedWeights | None = None) -> str:
    """The kernel of `head_choice`: what a drafter's head needs (it never computes rows on demand)."""
    return head_choice(w, bias, rounds, packed)[0]


def rows_are_cheap(times: dict[int, float]) -> bool:
    """Whether one LM-head row costs under half of 8 rows with this kernel: then a tree verify computes only the
    rows its acceptance walk visits (core/engine/tree_logits.py). With cost a + b*m for m rows, the root's row plus half
    of a 16-node tree beats all 16 rows when t(1) < (8/15) t(8); the rule asks for a little more (1/2), since the
    accepted child's subtree can hold more than half the nodes (then the walk pays one extra fixed cost a, and
    gains whenever the root's own row rejects every draft). Measured, not assumed: docs/results-history.md,
    "LM-head kernels"."""
    return 2 * times[1] < times[8]


BODY_ROWS = (1, 2, 4, 16, 64)  # a one-token step, small trees, the default tree, a large tree or a prompt


class OneDNNLinear(TorchFunctionMode):
    """While active, every F.linear on CPU whose input and weight share a dtype runs through oneDNN's linear
    primitive (`_onednn_linear`, bias added there), on the weight's packed copy when `packed` holds one; any other
    call passes through unchanged. A function mode sees every torch call, so it costs a few microseconds on each
    (milliseconds over a whole forward; docs/perf.md); `body_choice` therefore times whole forwards, not products."""

    def __init__(self, packed: PackedWeights | None = None):
        super().__init__()
        self.packed = packed

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            x, w = args[0], args[1]
            b = args[2] if len(args) > 2 else kwargs.get("bias")
            if x.device.type == "cpu" and x.dtype == w.dtype and w.dim() == 2 and (b is None or b.dtype == w.dtype):
                p = self.packed.get(w) if self.packed is not None else None
                flat = x.reshape(-1, x.shape[-1])  # (M, in)
                return _onednn_linear(flat, w if p is None else p, b).reshape(*x.shape[:-1], w.shape[0])
        return func(*args, **kwargs)


def body_choice(forward: Callable[[int, bool], object], sizes: tuple[int, ...] = BODY_ROWS,
                rounds: int = 2) -> frozenset[int]:
    """The row counts in `sizes` at which `forward(rows, routed)` (one target forward of that many new tokens, inside
    `OneDNNLinear` when routed) ran faster routed; `routes_onednn` maps any row count onto them. Timed per row
    count because the mode's own cost can lose at one row what the products win at sixteen (docs/perf.md, "The
    body's products through oneDNN")."""
    won = set()
    for m in sizes:
        t = fastest({False: lambda: forward(m, False), True: lambda: forward(m, True)}, rounds)
        if t[True] < t[False]:
            won.add(m)
    return frozenset(won)


def routes_onednn(rows: int, won: frozenset[int], sizes: tuple[int, ...] = BODY_ROWS) -> bool:
    """Whether a forward of `rows` rows takes the oneDNN route: the largest timed size not above `rows` won."""
    below = [m for m in sizes if m <= rows]
    return bool(below) and below[-1] in won


def linear_route(rows: int, won: frozenset[int], packed: PackedWeights | None = None,
                 sizes: tuple[int, ...] = BODY_ROWS):
    """The context a forward of `rows` rows runs its linear layers in: `OneDNNLinear` (reading `packed`) where
    `routes_onednn` over the timed `sizes`, else a no-op."""
    return routed(packed, routes_onednn(rows, won, sizes))


def routed(packed: PackedWeights | None, on: bool):
    """The context a forward runs in: the packed oneDNN route when `on`, else nothing (start-up timing runs each
    row count both ways through this)."""
    return OneDNNLinear(packed) if on else contextlib.nullcontext()


def _step_seconds(dtype: torch.dtype, hidden: int, intermediate: int, vocab: int, body_params: int,
                  rounds: int) -> float:
    """Estimated seconds of one 1-row step plus one 16-row verify in `dtype`: an MLP-shaped product scaled to the
    body's parameter count, and an LM-head slice (its faster orientation) scaled to the vocabulary."""
    gen = torch.Generator().manual_seed(0)
    w_mlp = torch.randn(intermediate, hidden, generator=gen).to(dtype)  # (I, H)
    w_head = torch.randn(min(vocab, HEAD_SLICE), hidden, generator=gen).to(dtype)  # (V', H)
    total = 0.0
    for m in ROWS:
        h = torch.randn(m, hidden, generator=gen).to(dtype)
        mlp = fastest({0: lambda: F.linear(h, w_mlp)}, rounds)[0]
        head = min(fastest({k: (lambda k=k: head_product(w_head, h, k)) for k in head_candidates(w_head)},
                           rounds).values())
        total += mlp * body_params / w_mlp.numel() + head * vocab / len(w_head)
    return total


def fastest_cpu_dtype(config, rounds: int = 3) -> tuple[torch.dtype, dict[str, float]]:
    """(bf16 or fp32, estimated ms per 1-row step + 16-row verify for each) for a text config on this CPU.

    fp32 wins ties: it is the exact reference, and it is what a processor without bf16 units runs fastest.
    """
    hidden, vocab = config.hidden_size, config.vocab_size
    intermediate = getattr(config, "intermediate_size", None) or 4 * hidden
    heads = getattr(config, "num_attention_heads", 1)
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    per_layer = hidden * head_dim * (2 * heads + 2 * kv) + 3 * hidden * intermediate  # q, o, k, v + gated MLP
    body = per_layer * config.num_hidden_layers
    ms = {name: 1e3 * _step_seconds(dt, hidden, intermediate, vocab, body, rounds)
          for name, dt in (("bf16", torch.bfloat16), ("fp32", torch.float32))}
    return (torch.bfloat16 if ms["bf16"] < ms["fp32"] else torch.float32), ms


def bf16_matmul_is_faster(hidden: int, rows: int = 1024, cols: int = 8192, rounds: int = 2) -> bool:
    """True when a training-shaped product, (rows, hidden) x (hidden, cols), runs faster in bf16 than in fp32
    here: whether bf16 autocast speeds training up on this CPU (AMX) or slows it down (AVX2 only)."""
    gen = torch.Generator().manual_seed(0)
    a, w = torch.randn(rows, hidden, generator=gen), torch.randn(cols, hidden, generator=gen)
    a16, w16 = a.to(torch.bfloat16), w.to(torch.bfloat16)
    best = fastest({"bf16": lambda: F.linear(a16, w16), "fp32": lambda: F.linear(a, w)}, rounds)
    return best["bf16"] < best["fp32"]


def cpu_description() -> str:
    """'AMD EPYC · avx2' style: the processor's model name and its widest bf16-relevant feature (Linux; else '')."""
    try:
        text = open("/proc/cpuinfo", encoding="utf-8").read()
    except OSError:
        return ""
    name = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "")
    flags = set(next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), []))
    feature = next((f for f in ("amx_bf16", "avx512_bf16", "avx512f", "avx2") if f in flags), "")
    return " · ".join(x for x in (name, feature) if x)
