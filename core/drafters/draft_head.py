"""EAGLE-1/2 draft head: fc(concat(token embedding, feature)) + one Llama-style decoder layer (more with
--add-layers), no final norm.

arXiv 2401.15077 §3.1. The pair at sequence position i is (embedding of t_{i+1}, feature f_i); the output is the
predicted feature f_{i+1}, which the TARGET's LM head (shared, frozen, no norm in between) turns into the
distribution of t_{i+2}. Layer 0 has no input_layernorm (the residual is the fc output).

Optional reduced draft vocabulary: `vocab_ids` (sorted target ids) selects rows of the target LM head, so drafting
over Gemma's 262k vocabulary stays cheap; saved as EAGLE-3's `d2t` offsets (target = draft + d2t[draft]) and `t2d`.

Optional inference vocabulary: an EAGLE-1/2 head folder may also hold draft_vocab.json (`ids`: target ids, a subset
of the head's own draft vocabulary, the most frequent in its training data), which this playground drafts over
instead. The weights stay as trained and the file is JSON, not safetensors (vLLM reads every *.safetensors file of a
folder and refuses unknown names), so engines load the folder as before. Scoring a feature against 49,152 LM-head
rows can cost more than the head's layers; a frequent subset (FR-Spec, arXiv 2502.14856) keeps the drafts nearly as
good for less. save_head removes a stale one: new weights, new counts.

Checkpoint layout = the official EAGLE-1/2 one (config.json Llama-style + model.safetensors with `fc.weight`,
`fc.bias`, `layers.0.self_attn.*`, `layers.0.mlp.*`, `layers.0.post_attention_layernorm.weight`).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from core.models.kernels import linear_weights, tensor_version
from core.engine.kv_cache import MIN_CAPACITY

DRAFT_VOCAB_FILE = "draft_vocab.json"  # a folder's optional inference vocabulary (see the module docstring)


@dataclass(frozen=True)
class HeadConfig:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int  # target vocabulary
    head_dim: int = 0  # 0 = hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    bias: bool = True  # fc.bias (official default when the key is absent)
    qkv_bias: bool = False
    draft_vocab_size: int = 0  # 0 = full target vocabulary
    max_position_embeddings: int = 32768
    num_layers: int = 1  # decoder layers (the official heads have one; --add-layers grows a trained head)
    extra: dict = field(default_factory=dict, compare=False)  # training card fields carried into config.json

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @classmethod
    def for_target(cls, hidden: int, vocab: int, draft_vocab: int = 0) -> "HeadConfig":
        """Own standard geometry (head_dim 64) rather than mirroring the target's layers (docs/ARCHITECTURE.md §2)."""
        heads = max(1, hidden // 64)
        return cls(hidden_size=hidden, intermediate_size=hidden * 3, num_attention_heads=heads,
                   num_key_value_heads=heads, head_dim=64, vocab_size=vocab, draft_vocab_size=draft_vocab)

    def to_json(self) -> dict:
        """Llama-style config.json as SGLang/vLLM read EAGLE heads."""
        d = {"architectures": ["LlamaForCausalLM"], **llama_layer_json(self), "bias": self.bias,
             "qkv_bias": self.qkv_bias}
        if self.draft_vocab_size:
            d["draft_vocab_size"] = self.draft_vocab_size
        d.update(self.extra)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "HeadConfig":
        return cls(**llama_layer_fields(d), bias=bool(d.get("bias", True)), qkv_bias=bool(d.get("qkv_bias", False)),
                   draft_vocab_size=int(d.get("draft_vocab_size") or 0))


def llama_layer_json(c) -> dict:
    """The one-Llama-layer keys every head config.json carries (EAGLE-1/2 and EAGLE-3 alike)."""
    return {
        "model_type": "llama", "hidden_act": "silu", "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size, "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads, "head_dim": c.hd,
        "num_hidden_layers": getattr(c, "num_layers", 1),
        "rms_norm_eps": c.rms_norm_eps, "rope_theta": c.rope_theta,
        "max_position_embeddings": c.max_position_embeddings, "vocab_size": c.vocab_size,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }


def llama_layer_fields(d: dict) -> dict:
    """Constructor arguments for the layer geometry shared by HeadConfig and Eagle3Config, read from config.json
    with the defaults official checkpoints rely on when a key is absent."""
    heads = d["num_attention_heads"]
    return dict(
        hidden_size=d["hidden_size"], intermediate_size=d["intermediate_size"], num_attention_heads=heads,
        num_key_value_heads=d.get("num_key_value_heads") or heads, vocab_size=d["vocab_size"],
        head_dim=d.get("head_dim") or d["hidden_size"] // heads, rms_norm_eps=d.get("rms_norm_eps", 1e-6),
        rope_theta=float(d.get("rope_theta") or 10000.0),
        max_position_embeddings=int(d.get("max_position_embeddings") or 32768),
    )


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rope_tables(pos: torch.Tensor, d: int, theta: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each (T, d), for rotate-half RoPE at any positions `pos` (T,) (no fixed-size table); computed
    once per head forward and shared by every layer's queries and keys."""
    inv = 1.0 / theta ** (torch.arange(0, d, 2, device=pos.device, dtype=torch.float32) / d)
    ang = pos.float()[:, None] * inv[None, :]  # (T, d/2)
    ang = torch.cat([ang, ang], -1)  # (T, d)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x: torch.Tensor, tables: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """x (B, h, T, d) rotated by `rope_tables` (cos, sin) (T, d)."""
    cos, sin = tables
    d = x.shape[-1]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class KVWindow:
    """Where one head forward writes its new keys and values inside a draft cache kept in place: buffers
    (1, heads, capacity, d) and the first slot to write. Attention writes its t new entries at [start, start + t)
    and attends over views of [0, start + t), so a draft pass copies only its own entries (concatenating a cache
    copies all of it, for every draft level). Made by DraftKV.window; `layer` narrows it to one layer's heads."""

    def __init__(self, k: torch.Tensor, v: torch.Tensor, start: int):
        self.k, self.v, self.start = k, v, start

    def layer(self, i: int, heads: int) -> "KVWindow":
        return KVWindow(self.k[:, i * heads:(i + 1) * heads], self.v[:, i * heads:(i + 1) * heads], self.start)

    def put(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v (1, h, t, d) -> all keys and values up to them, (1, h, start + t, d) views of the buffers."""
        end = self.start + k.shape[2]
        self.k[:, :, self.start:end] = k
        self.v[:, :, self.start:end] = v
        return self.k[:, :, :end], self.v[:, :, :end]


class DraftKV:
    """A draft head's keys and values for one decode call, in place (EAGLE-1/2 heads with several layers stack
    them along the head axis): (1, heads, capacity, d) buffers that double when full. The drafter asks for a
    window at the slot it writes next: after the committed entries for a commit, after the step's earlier levels
    for a tree expansion (those are overwritten by the next commit)."""

    def __init__(self, heads: int, d: int, dtype: torch.dtype, device: torch.device | str):
        self.heads, self.d, self.dtype, self.device = heads, d, dtype, device
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def window(self, start: int, t: int) -> KVWindow:
        """Room for t entries at `start` (entries before it kept), as a KVWindow."""
        cap = 0 if self.k is None else self.k.shape[2]
        if start + t > cap:
            grown = max(2 * cap, start + t, MIN_CAPACITY)  # the target cache's growth rule (core/engine/kv_cache.py)
            k = torch.empty(1, self.heads, grown, self.d, dtype=self.dtype, device=self.device)
            v = torch.empty_like(k)
            if self.k is not None:
                k[:, :, :start], v[:, :, :start] = self.k[:, :, :start], self.v[:, :, :start]
            self.k, self.v = k, v
        return KVWindow(self.k, self.v, start)


class Fused:
    """One inference-time weight made of several row blocks (q/k/v, gate/up), so a draft step runs one product
    where the checkpoint layout has several. It is a copy: valid while the source weights are the ones it was made
    from (same tensors, dtype, device and version counter; an optimizer step or `.to()` makes it stale and the
    module falls back to its own projections), and never used while autograd records."""

    def __init__(self, linears: list[nn.Linear]):
        self.linears = linears
        self.sizes = [m.out_features for m in linears]
        self.stamp = self._stamp()
        with torch.no_grad():
            self.weight = torch.cat([m.weight for m in linears]).detach()  # (sum out, in)
            biases = [m.bias for m in linears]
            self.bias = torch.cat(biases).detach() if all(b is not None for b in biases) else None

    def _stamp(self) -> tuple:
        return tuple((tensor_version(w), w.dtype, w.device) for w in (m.weight for m in self.linears))

    def usable(self) -> bool:
        return not torch.is_grad_enabled() and self.stamp == self._stamp()

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x (..., in) -> one output per source block, split from a single product."""
        return F.linear(x, self.weight, self.bias).split(self.sizes, dim=-1)


class Attention(nn.Module):
    """Llama attention with RoPE and an explicit mask; `in_features` is 2H for EAGLE-3's concatenated input."""

    def __init__(self, c: HeadConfig, in_features: int = 0):
        super().__init__()
        self.c = c
        d_in = in_features or c.hidden_size
        self.q_proj = nn.Linear(d_in, c.num_attention_heads * c.hd, bias=c.qkv_bias)
        self.k_proj = nn.Linear(d_in, c.num_key_value_heads * c.hd, bias=c.qkv_bias)
        self.v_proj = nn.Linear(d_in, c.num_key_value_heads * c.hd, bias=c.qkv_bias)
        self.o_proj = nn.Linear(c.num_attention_heads * c.hd, c.hidden_size, bias=False)
        self.fused: Fused | None = None  # q/k/v as one product at inference (`fuse`)

    def fuse(self) -> list[torch.Tensor]:
        """Make the fused q/k/v weight; returns the 2-D weights an inference forward now multiplies."""
        self.fused = Fused([self.q_proj, self.k_proj, self.v_proj])
        return [self.fused.weight, self.o_proj.weight]

    def forward(self, x, pos, past_kv, mask, tables=None):
        """x (B, T, H); past_kv: (k, v) each (B, kvh, L, d), a KVWindow (B = 1: the new entries go into its buffer
        at L = its start) or None; mask (B|1, 1, T, L+T) bool or None=causal; tables: the forward's `rope_tables`
        (made here when not given)."""
        b, t, _ = x.shape
        c = self.c
        if self.fused is not None and self.fused.usable():
            q, k, v = self.fused(x)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.view(b, t, c.num_attention_heads, c.hd).transpose(1, 2)
        k = k.view(b, t, c.num_key_value_heads, c.hd).transpose(1, 2)
        v = v.view(b, t, c.num_key_value_heads, c.hd).transpose(1, 2)
        tables = tables if tables is not None else rope_tables(pos, c.hd, c.rope_theta, q.dtype)
        q, k = apply_rope(q, tables), apply_rope(k, tables)
        new_kv = (k, v)
        if isinstance(past_kv, KVWindow):
            k, v = past_kv.put(k, v)
        elif past_kv is not None:
            k, v = torch.cat([past_kv[0], k], 2), torch.cat([past_kv[1], v], 2)
        rep = c.num_attention_heads // c.num_key_value_heads
        if rep > 1:
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        if mask is None:
            mask = torch.ones(t, k.shape[2], dtype=torch.bool, device=x.device).tril_(k.shape[2] - t)[None, None]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1)), new_kv


class MLP(nn.Module):
    def __init__(self, c: HeadConfig):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)
        self.fused: Fused | None = None  # gate/up as one product at inference (`fuse`)

    def fuse(self) -> list[torch.Tensor]:
        """Make the fused gate/up weight; returns the 2-D weights an inference forward now multiplies."""
        self.fused = Fused([self.gate_proj, self.up_proj])
        return [self.fused.weight, self.down_proj.weight]

    def forward(self, x):
        if self.fused is not None and self.fused.usable():
            gate, up = self.fused(x)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(F.silu(gate) * up)


class Layer(nn.Module):
    """Llama decoder layer; layer 0 has no input_layernorm (its residual is the fc output), later layers have one
    (the official EAGLE layout for index > 0)."""

    def __init__(self, c: HeadConfig, index: int = 0):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        if index:
            self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, x, pos, past_kv, mask, tables=None):
        h = self.input_layernorm(x) if hasattr(self, "input_layernorm") else x
        a, kv = self.self_attn(h, pos, past_kv, mask, tables)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), kv


class DraftVocab:
    """The draft vocabulary's two maps, from a head's `vocab_ids` ((Vd,) sorted target ids) and `config.vocab_size`:
    `d2t` (draft id -> target id offsets, EAGLE-3's layout) and `t2d()` (which target ids are drafted)."""

    @property
    def d2t(self) -> torch.Tensor:
        return self.vocab_ids - torch.arange(len(self.vocab_ids), device=self.vocab_ids.device)

    def t2d(self) -> torch.Tensor:
        m = torch.zeros(self.config.vocab_size, dtype=torch.bool, device=self.vocab_ids.device)
        m[self.vocab_ids] = True
        return m


class EagleHead(DraftVocab, nn.Module):
    """The draft network. No I/O in __init__; see load_head/save_head."""

    def __init__(self, c: HeadConfig, vocab_ids: torch.Tensor | None = None):
        super().__init__()
        self.config = c
        self.fc = nn.Linear(2 * c.hidden_size, c.hidden_size, bias=c.bias)
        self.layers = nn.ModuleList([Layer(c, i) for i in range(c.num_layers)])
        ids = vocab_ids if vocab_ids is not None else torch.arange(c.draft_vocab_size or c.vocab_size)
        self.register_buffer("vocab_ids", ids.long().sort().values, persistent=False)  # (Vd,) sorted target ids
        self.trained = False  # set by load_head; an untrained head is still lossless, just slow
        self.inference_vocab: torch.Tensor | None = None  # set by load_head from the folder's draft_vocab.json

    def forward(self, embeds, features, pos, past_kv=None, mask=None):
        """embeds, features: (B, T, H) -> predicted features (B, T, H) and this call's (k, v) for the cache.

        With several layers the cache stacks them along the head axis, (B, layers * kvh, L, d), so callers keep
        one (k, v) pair and concatenate along positions whatever the depth, or pass a KVWindow of a DraftKV laid
        out the same way (drafting: the new entries are written in place, and None is returned for them)."""
        x = self.fc(torch.cat([embeds, features], dim=-1))  # embedding FIRST (official order)
        c = self.config
        tables = rope_tables(pos, c.hd, c.rope_theta, x.dtype)  # one table for every layer's q and k
        windowed = isinstance(past_kv, KVWindow)
        kvh, ks, vs = c.num_key_value_heads, [], []
        for i, layer in enumerate(self.layers):
            if windowed:
                past = past_kv.layer(i, kvh)
            else:
                past = None if past_kv is None else (past_kv[0][:, i * kvh:(i + 1) * kvh],
                                                     past_kv[1][:, i * kvh:(i + 1) * kvh])
            x, (k, v) = layer(x, pos, past, mask, tables)
            ks.append(k)
            vs.append(v)
        if windowed:
            return x, None  # already in the window's buffers: nothing to stack
        return x, ((ks[0], vs[0]) if len(ks) == 1 else (torch.cat(ks, 1), torch.cat(vs, 1)))



def fuse_projections(head: nn.Module) -> list[torch.Tensor]:
    """Fuse q/k/v and gate/up in every layer of `head` (EAGLE-1/2 or EAGLE-3) for drafting, and return the 2-D
    weights its inference forward then multiplies: what a drafter packs (core/models/kernels.py). The checkpoint layout,
    the training path and the values stay as they are (each output row is the same dot product)."""
    weights: list[torch.Tensor] = []
    covered: set[int] = set()  # the projections fused away and the weights already listed (o_proj, down_proj)
    for m in head.modules():
        if isinstance(m, (Attention, MLP)):
            weights += m.fuse()
            covered |= {id(lin.weight) for lin in m.fused.linears} | {id(w) for w in weights}
    return [w for w in linear_weights(head) if id(w) not in covered] + weights


ENGINES = ("sglang", "vllm")


def vllm_blockers(fc_bias: bool, reduced_vocab: bool) -> list[str]:
    """What vLLM's EAGLE-1/2 drafter cannot read, one line each with the training flag that avoids it: an fc bias
    (its fc has none and its loader raises on unknown names) and a reduced draft vocabulary (it has no d2t)."""
    out = []
    if fc_bias:
        out.append("fc.bias: vLLM builds the EAGLE fc without a bias (train with --no-fc-bias)")
    if reduced_vocab:
        out.append("d2t/t2d: vLLM's EAGLE-1/2 drafter drafts over the full vocabulary (train with --draft-vocab 0)")
    return out


def save_head(head: EagleHead, out_dir: str | Path, dtype: torch.dtype = torch.bfloat16,
              engine: str | None = None) -> None:
    """Write config.json + model.safetensors in the official EAGLE-1/2 layout (+ d2t/t2d for a reduced vocab).

    The serving engines disagree on fc's bias, so `engine` adapts the file without changing what the head computes:
    "sglang" always writes fc.bias (its EAGLE fc has a bias parameter and keeps a random initial one when the file
    has none: zeros are written for a head without bias); "vllm" refuses a head that has one (vLLM's fc has no bias
    and its loader raises on unknown names), as it refuses a reduced vocabulary (its EAGLE-1/2 drafter has no d2t).
    """
    from safetensors.torch import save_file

    if engine not in (None, *ENGINES):
        raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    c = head.config
    blockers = vllm_blockers(c.bias, bool(c.draft_vocab_size))
    if engine == "vllm" and blockers:
        raise ValueError("vLLM cannot read this head: " + "; ".join(blockers))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().to(dtype).contiguous().cpu() for k, v in head.state_dict().items()}
    cfg = c.to_json()
    if engine == "sglang" and not c.bias:
        sd["fc.bias"] = torch.zeros(c.hidden_size, dtype=dtype)
        cfg["bias"] = True
    if head.config.draft_vocab_size:
        sd["d2t"] = head.d2t.cpu().contiguous()
        sd["t2d"] = head.t2d().cpu().contiguous()
    save_file({k: v.cpu() for k, v in sd.items()}, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out / DRAFT_VOCAB_FILE).unlink(missing_ok=True)  # chosen for the weights this replaces


def write_draft_vocab(out_dir: str | Path, ids: torch.Tensor, record: dict | None = None) -> None:
    """Write the folder's inference vocabulary (`ids`: target ids, stored sorted) beside its weights; `record`
    (how it was chosen) is kept beside the ids for people."""
    body = {**(record or {}), "ids": ids.long().cpu().sort().values.tolist()}
    (Path(out_dir) / DRAFT_VOCAB_FILE).write_text(json.dumps(body, separators=(",", ":")) + "\n")


def read_draft_vocab(folder: str | Path, own: torch.Tensor) -> torch.Tensor | None:
    """The folder's inference vocabulary (sorted (N,) target ids), or None when it has none. ValueError unless it
    is a non-empty list of distinct integer ids inside the head's own draft vocabulary `own`."""
    path = Path(folder) / DRAFT_VOCAB_FILE
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text()).get("ids")
    except (json.JSONDecodeError, AttributeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a JSON object with 'ids' ({type(e).__name__})") from None
    if not isinstance(raw, list) or not raw or not all(type(i) is int for i in raw):
        raise ValueError(f"{path}: 'ids' must be a non-empty list of integer token ids")
    ids = torch.tensor(raw, dtype=torch.long).sort().values
    if bool((ids[1:] == ids[:-1]).any()):
        raise ValueError(f"{path}: token ids repeat")
    if not bool(torch.isin(ids, own.cpu()).all()):
        raise ValueError(f"{path}: ids outside the head's own draft vocabulary ({len(own):,} tokens)")
    return ids


def layer_count(names) -> int:
    """Decoder layers named in an EAGLE-1/2 state dict's keys (`layers.N.*`, N from 0); 0 when none."""
    return 1 + max((int(k.split(".")[1]) for k in names if k.startswith("layers.")), default=-1)


def load_head(path: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
              inference_vocab: bool = True) -> EagleHead:
    """Read a head folder: model.safetensors preferred, pytorch_model.bin via torch.load(weights_only=True), and its
    draft_vocab.json unless `inference_vocab` is False (the head as trained, e.g. to compare with another engine)."""
    p = Path(path)
    if not (p / "config.json").exists():
        raise ValueError(f"head folder {str(p)!r} has no config.json")
    raw = json.loads((p / "config.json").read_text())
    if (p / "model.safetensors").exists():
        from safetensors.torch import load_file

        sd = load_file(str(p / "model.safetensors"))
    elif (p / "pytorch_model.bin").exists():
        sd = torch.load(str(p / "pytorch_model.bin"), map_location="cpu", weights_only=True)
    else:
        raise ValueError(f"head folder {str(p)!r} has neither model.safetensors nor pytorch_model.bin")
    sd = {k.removeprefix("model."): v for k, v in sd.items()}
    if any(k.startswith("midlayer.") for k in sd):
        raise ValueError(f"{p} is an EAGLE-3 head (midlayer.* keys); this loader reads EAGLE-1/2 heads")
    c = HeadConfig.from_json(raw)
    if "fc.bias" in sd and not c.bias:  # EAGLE #100: config says no bias but the file has one; trust the file
        c = HeadConfig(**{**asdict(c), "bias": True})
    if "fc.bias" not in sd and c.bias:
        c = HeadConfig(**{**asdict(c), "bias": False})
    c = replace(c, num_layers=max(layer_count(sd), 1))  # the weights say how many layers, whatever config.json claims
    vocab_ids = None
    if "d2t" in sd:
        d2t = sd.pop("d2t").long()
        vocab_ids = d2t + torch.arange(len(d2t))
        if len(vocab_ids) and (int(vocab_ids.min()) < 0 or int(vocab_ids.max()) >= c.vocab_size):
            # a negative or too-large id would index the target's LM head out of range (a device assert on CUDA)
            raise ValueError(f"head {p}: d2t maps draft ids outside the target vocabulary of {c.vocab_size} "
                             f"(ids {int(vocab_ids.min())}..{int(vocab_ids.max())})")
        c = HeadConfig(**{**asdict(c), "draft_vocab_size": len(d2t)})
    sd.pop("t2d", None)
    sd.pop("embed_tokens.weight", None)  # the target's embedding is used (same matrix in released heads)
    sd.pop("lm_head.weight", None)
    head = EagleHead(c, vocab_ids)
    missing, unexpected = head.load_state_dict(sd, strict=False)
    missing = [k for k in missing if k != "vocab_ids"]
    if missing or unexpected:
        raise ValueError(f"head {p}: missing keys {missing[:5]}, unexpected keys {unexpected[:5]}")
    head.trained = True
    head.inference_vocab = read_draft_vocab(p, head.vocab_ids) if inference_vocab else None
    return head.to(device=device, dtype=dtype).eval()


def finish_loaded(head: nn.Module, sd: dict, what: str, vocab_size: int) -> nn.Module:
    """Load `sd` into a freshly built head (EAGLE-3, Medusa), refusing missing or unknown keys and a draft
    vocabulary (d2t) that maps outside the target's; marks the head trained. `what` names it in the messages."""
    missing, unexpected = head.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise ValueError(f"{what}: missing keys {missing[:5]}, unexpected keys {unexpected[:5]}")
    ids = head.vocab_ids
    if len(ids) and (int(ids.max()) >= vocab_size or int(ids.min()) < 0):
        raise ValueError(f"{what}: d2t maps outside the target vocabulary of {vocab_size}")
    head.trained = True
    return head


def widen_mlp(head: EagleHead, intermediate: int, seed: int = 0) -> EagleHead:
    """`head` with its MLP grown to `intermediate` units, computing exactly the same function (Net2Net-style).

    The old units keep their weights; the new units get random gate/up rows and ZERO down_proj columns, so they add
    nothing until training moves them. A fine-tune from a trained head can then test whether the head's size, not
    its data, is what limits it, starting from the trained head's own acceptance rather than from scratch.
    """
    old = head.config.intermediate_size
    if intermediate <= old:
        raise ValueError(f"--widen-mlp {intermediate} must exceed the head's intermediate size {old}")
    g = torch.Generator().manual_seed(seed)
    grown = EagleHead(replace(head.config, intermediate_size=intermediate), head.vocab_ids)
    grown.trained = head.trained
    sd = head.state_dict()
    new = grown.state_dict()
    with torch.no_grad():
        for name, w in sd.items():
            if name.endswith(("mlp.gate_proj.weight", "mlp.up_proj.weight")):  # (I, H): rows are units
                fresh = torch.randn(intermediate - old, w.shape[1], generator=g) / math.sqrt(w.shape[1])
                new[name] = torch.cat([w, fresh.to(w.dtype)], 0)
            elif name.endswith("mlp.down_proj.weight"):  # (H, I): columns are units
                new[name] = torch.cat([w, w.new_zeros(w.shape[0], intermediate - old)], 1)
            else:
                new[name] = w
    grown.load_state_dict(new)
    return grown.to(next(head.parameters()).dtype).eval()


def add_layers(head: EagleHead, n: int, seed: int = 0) -> EagleHead:
    """`head` with `n` decoder layers appended that start as the identity: random attention and MLP inputs, ZERO
    o_proj and down_proj, so each new layer adds nothing to its residual until training moves it. Like widen_mlp,
    a fine-tune from a trained head then tests depth without giving up what the head already drafts."""
    if n < 1:
        raise ValueError(f"--add-layers must be >= 1, got {n}")
    c = replace(head.config, num_layers=head.config.num_layers + n)
    grown = init_head(c, head.vocab_ids, seed=seed).to(next(head.parameters()).dtype)
    sd = grown.state_dict()
    sd.update(head.state_dict())
    with torch.no_grad():
        for i in range(head.config.num_layers, c.num_layers):
            sd[f"layers.{i}.self_attn.o_proj.weight"].zero_()
            sd[f"layers.{i}.mlp.down_proj.weight"].zero_()
    grown.load_state_dict(sd)
    grown.trained = head.trained
    return grown.eval()


def init_head(c: HeadConfig, vocab_ids: torch.Tensor | None = None, seed: int = 0) -> EagleHead:
    """A freshly initialised head of the right shape (decodes losslessly; drafts badly)."""
    g = torch.Generator().manual_seed(seed)
    head = EagleHead(c, vocab_ids)
    with torch.no_grad():
        for name, p in head.named_parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / math.sqrt(p.shape[1])))
            elif name.endswith("bias"):
                p.zero_()
    return head.eval()
