"""Start-up timing choices (core/models/kernels.py): the faster candidate wins, fp32 wins a tie, and load_target loads
the model in the dtype the timing chose (and records why), while an explicit dtype is never overridden."""
from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F

from conftest import tiny_model
from core.models import kernels, target as models


class FakeClock:
    """kernels' perf_counter replaced by a clock that moves only when a timed candidate says what it costs, so
    the choice logic is tested without sleeping and without reading real times."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def spend(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(kernels, "time", types.SimpleNamespace(perf_counter=c))
    return c


def test_fastest_ranks_a_slow_candidate_last(clock):
    calls = []
    best = kernels.fastest({"quick": lambda: calls.append("q"), "slow": lambda: (calls.append("s"), clock.spend(0.004))},
                           rounds=3)
    assert best == {"quick": 0.0, "slow": pytest.approx(0.004)}
    assert calls.count("q") == calls.count("s") == 4  # one warm-up round (not counted) and 3 timed rounds


@pytest.mark.parametrize("ms,expected", [({"bf16": 5.0, "fp32": 9.0}, torch.bfloat16),
                                         ({"bf16": 9.0, "fp32": 5.0}, torch.float32),
                                         ({"bf16": 5.0, "fp32": 5.0}, torch.float32)])  # a tie: the exact one
def test_fastest_cpu_dtype_takes_the_faster(monkeypatch, ms, expected):
    monkeypatch.setattr(kernels, "_step_seconds", lambda dt, *a: ms[{torch.bfloat16: "bf16"}.get(dt, "fp32")] / 1e3)
    dt, timing = kernels.fastest_cpu_dtype(tiny_model("llama").config)
    assert dt == expected and timing == pytest.approx(ms)


def test_fastest_cpu_dtype_times_real_products():
    """Unpatched: both dtypes get a positive estimate for a model's shapes and the smaller one is chosen."""
    dt, timing = kernels.fastest_cpu_dtype(tiny_model("gemma3").config, rounds=1)
    assert set(timing) == {"bf16", "fp32"} and min(timing.values()) > 0
    assert dt == (torch.bfloat16 if timing["bf16"] < timing["fp32"] else torch.float32)


@pytest.mark.parametrize("fast", ["bf16", "fp32"])
def test_load_target_loads_the_timed_dtype(tmp_path, monkeypatch, fast):
    from test_generate_cli import word_tokenizer

    tiny_model("llama").save_pretrained(tmp_path / "m")
    word_tokenizer().save_pretrained(tmp_path / "m")
    ms = {"bf16": 3.0, "fp32": 7.0} if fast == "bf16" else {"bf16": 7.0, "fp32": 3.0}
    monkeypatch.setattr(kernels, "_step_seconds", lambda dt, *a: ms[{torch.bfloat16: "bf16"}.get(dt, "fp32")] / 1e3)
    target, _ = models.load_target(str(tmp_path / "m"), device="cpu")
    assert target.dtype == {"bf16": torch.bfloat16, "fp32": torch.float32}[fast]
    assert target.dtype_timing == pytest.approx(ms)
    explicit, _ = models.load_target(str(tmp_path / "m"), device="cpu", dtype="bf16" if fast == "fp32" else "fp32")
    assert explicit.dtype != target.dtype and explicit.dtype_timing is None  # a named dtype is never timed


def test_cpu_description_names_the_processor():
    desc = kernels.cpu_description()
    assert isinstance(desc, str)
    if desc:  # Linux: "<model name> · <widest bf16-relevant feature>"
        assert desc.split(" · ")[-1] in ("amx_bf16", "avx512_bf16", "avx512f", "avx2") or "·" not in desc


def test_the_app_says_which_dtype_was_timed():
    from types import SimpleNamespace

    from app.startup import dtype_note

    timed = SimpleNamespace(dtype=torch.float32, dtype_timing={"bf16": 837.3, "fp32": 290.9})
    assert dtype_note(timed) == "fp32; timed here: bf16 837 ms, fp32 291 ms per step + verify"
    assert dtype_note(timed, short=True) == "fp32 (timed faster here)"
    assert dtype_note(SimpleNamespace(dtype=torch.bfloat16, dtype_timing=None)) == "bf16"  # named: no timing
    timed.head_kernel = "onednn"  # the LM-head product start-up timing chose, when not linear()
    assert dtype_note(timed) == "fp32; timed here: bf16 837 ms, fp32 291 ms per step + verify; LM head: onednn"
    assert dtype_note(timed, short=True) == "fp32 (timed faster here)"
    timed.packed = [object()] * 127  # the weights start-up packed for oneDNN and kept
    assert dtype_note(timed).endswith("; LM head: onednn; 127 weights packed")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_head_kernel_computes_linear(dtype):
    """Each LM-head product the timing may pick is h @ W^T for one row, several rows and a (1, T, H) batch, up to
    the summation order; a build or processor without oneDNN for the dtype simply lacks that candidate."""
    gen = torch.Generator().manual_seed(0)
    w, h = torch.randn(300, 24, generator=gen).to(dtype), torch.randn(2, 5, 24, generator=gen).to(dtype)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    names = kernels.head_candidates(w)
    assert names[:2] == ("linear", "vocab_major") and ("onednn" in names) == kernels.onednn_head_works(dtype)
    if dtype == torch.float32:
        assert "onednn" in names  # the pinned CPU torch ships oneDNN's fp32 inner product
    for name in names:
        for x in (h[0, 0], h[0, :1], h[:1, :1], h[0], h):  # (H,), one row as (1, H) and (1, 1, H), (T, H), (B, T, H)
            got = kernels.head_product(w, x, name)
            assert got.shape == (*x.shape[:-1], 300)
            torch.testing.assert_close(got.float(), F.linear(x, w).float(), **tol)


def test_timing_the_head_leaves_the_global_random_stream_alone():
    """A seeded run (the bench seeds before loading) draws the same numbers whether or not a head was timed."""
    torch.manual_seed(5)
    expected = torch.rand(4)
    torch.manual_seed(5)
    kernels.time_head_kernels(torch.randn(64, 8, generator=torch.Generator().manual_seed(1)), rounds=1)
    assert torch.equal(torch.rand(4), expected)


def test_a_head_with_bias_or_an_unusual_dtype_keeps_linear():
    w = torch.randn(64, 8)
    assert kernels.head_kernel(w, bias=torch.zeros(64)) == "linear"
    assert kernels.head_candidates(w.half()) == ("linear",)
    assert kernels.head_kernel(w.half()) == "linear"
    assert kernels.head_kernel(w, rounds=1) in kernels.head_candidates(w)  # unpatched: a real timing


@pytest.mark.timed  # tests start-up timing: no pinned path (tests/conftest.py)
@pytest.mark.parametrize("kind", ["eagle", "eagle3", "medusa"])
def test_drafters_time_their_own_head_and_draft_the_same_with_any_kernel(monkeypatch, kind):
    """A reduced draft vocabulary is its own (Vd, H) product, so each drafter times it as the target times its
    head; the full vocabulary reuses the target's choice. The kernel changes speed, never the drafted tokens."""
    from conftest import tiny_drafter, tiny_target
    from core.engine.config import TreeConfig

    tgt = tiny_target("llama")
    ids = torch.arange(0, tgt.vocab_size, 2)
    monkeypatch.setattr(kernels, "fastest",
                        lambda cands, rounds=5: {k: 1.0 if k == "vocab_major" else 2.0 for k in cands})
    dr = tiny_drafter(kind, tgt, ids).accelerate()  # the acceleration step (a fake skips it unless asked)
    assert dr.head_kernel == "vocab_major"
    if kind == "eagle":
        tgt.head_kernel = "onednn"
        assert tiny_drafter(kind, tgt).head_kernel == "onednn"  # the target's own head: its timing is reused
    feats = torch.randn(1, 6, tgt.hidden_size, generator=torch.Generator().manual_seed(1))
    next_ids = torch.tensor([[5, 9, 2, 33, 7, 1]])
    pools = []
    for name in kernels.head_candidates(dr.w_draft):
        dr.head_kernel = name
        st = dr.start()
        dr.commit(st, feats, next_ids)
        pool = dr.propose(st, 1, TreeConfig(total_tokens=12, depth=4, top_k=3, lookup=0))
        pools.append((pool.tokens, pool.parents))
    assert len(pools) >= 2 and all(p == pools[0] for p in pools)


def test_onednn_linear_mode_computes_linear_and_touches_nothing_else():
    """Inside the mode F.linear (3-D input, with and without bias) runs through oneDNN and equals linear(); other
    functions pass through; outside the mode nothing changes."""
    if not kernels.onednn_head_works(torch.float32):
        pytest.fail("this torch build cannot run oneDNN's fp32 linear: the body route would never be taken")
    gen = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(1, 5, 24, generator=gen), torch.randn(40, 24, generator=gen), torch.randn(40, generator=gen)
    calls = []
    real = kernels._onednn_linear

    def spy(h, weight, bias=None):
        calls.append(tuple(h.shape))
        return real(h, weight, bias)

    kernels._onednn_linear = spy
    try:
        with torch.inference_mode(), kernels.OneDNNLinear():
            got, got_b = F.linear(x, w), torch.nn.functional.linear(x, w, b)
            soft = torch.softmax(x, -1)  # not a linear: untouched
        assert calls == [(5, 24), (5, 24)]
        torch.testing.assert_close(got, F.linear(x, w))
        torch.testing.assert_close(got_b, F.linear(x, w, b))
        torch.testing.assert_close(soft, torch.softmax(x, -1))
        F.linear(x, w)
        assert len(calls) == 2  # the mode has ended
    finally:
        kernels._onednn_linear = real


def test_body_choice_keeps_the_sizes_where_the_routed_forward_was_faster(clock):
    """A stand-in forward whose routed call costs 4 ms more below 16 rows and 4 ms less from 16 on (a function
    mode's fixed cost against cheaper products), on a fake clock: the choice is exactly {16, 64}."""
    calls = []

    def forward(m: int, routed: bool) -> None:
        calls.append((m, routed))
        clock.spend(0.004 if routed != (m >= 16) else 0.0)

    assert kernels.body_choice(forward, rounds=2) == frozenset({16, 64})
    assert {m for m, _ in calls} == set(kernels.BODY_ROWS) and len(calls) == 2 * 3 * len(kernels.BODY_ROWS)


@pytest.mark.timed  # tests start-up timing: no pinned path (tests/conftest.py)
def test_a_real_targets_body_timing_picks_timed_sizes():
    tgt = models.TargetModel(tiny_model("llama"), name="tiny").accelerate()
    assert tgt.onednn_rows <= set(kernels.BODY_ROWS)


def test_a_row_count_follows_the_largest_timed_size_below_it():
    won = frozenset({4, 16})
    assert [kernels.routes_onednn(r, won) for r in (1, 2, 3, 4, 15, 16, 63, 64, 500)] == \
        [False, False, False, True, True, True, True, False, False]
    assert kernels.routes_onednn(3, frozenset({2})) and not kernels.routes_onednn(1, frozenset({2}))
    assert not kernels.routes_onednn(0, won) and not kernels.routes_onednn(16, frozenset())


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
@pytest.mark.parametrize("won", [frozenset(), frozenset(kernels.BODY_ROWS)])
def test_the_body_route_keeps_eagle_equal_to_the_baseline(kind, won):
    """fp32: EAGLE-2 equals the baseline with every forward (prefill, step, tree verify) routed through oneDNN and
    with none routed: the route changes summation order only, and both decoders share it."""
    from conftest import PROMPT, run, tiny_drafter, tiny_target
    from core.engine.baseline import BaselineDecoder
    from core.engine.config import DecodeConfig, TreeConfig
    from core.engine.eagle import Eagle2Decoder

    cfg = DecodeConfig(max_new_tokens=40, tree=TreeConfig(total_tokens=12, depth=4, top_k=4, lookup=4))
    tgt = tiny_target(kind)
    tgt.onednn_rows = won
    ref, _ = run(BaselineDecoder(tgt), PROMPT, cfg)
    got, events = run(Eagle2Decoder(tgt, tiny_drafter("eagle", tgt)), PROMPT, cfg)
    assert got == ref and any(len(e.tree) > 1 for e in events)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_packed_weight_computes_linear_and_belongs_to_its_tensor(dtype):
    """A packed copy gives linear()'s values (bias included, any row count, through head_product and the function
    mode); it is found for its own tensor only, never for an equal one, and never once the tensor changed in place;
    fp16 and tensors that are not 2-D stay plain; discard keeps what it is told to."""
    gen = torch.Generator().manual_seed(0)
    w, b = torch.randn(300, 24, generator=gen).to(dtype), torch.randn(300, generator=gen).to(dtype)
    if not kernels.packing_works(dtype):  # e.g. bf16 on an AVX2-only processor: nothing is packed, weights stay plain
        packed = kernels.PackedWeights()
        assert not packed.add(w) and len(packed) == 0 and packed.get(w) is None
        assert packed.add_within([[w, b]], spare=None) == [False]
        return
    other = w.clone()
    packed = kernels.PackedWeights()
    assert packed.add(w) and len(packed) == 1 and packed.get(w).is_mkldnn
    assert packed.get(other) is None and not packed.add(w.half()) and not packed.add(b)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    with torch.inference_mode():
        for shape in ((24,), (1, 24), (7, 24), (2, 5, 24)):
            h = torch.randn(*shape, generator=gen).to(dtype)
            torch.testing.assert_close(kernels.head_product(w, h, "onednn", packed), F.linear(h, w), **tol)
            with kernels.OneDNNLinear(packed):
                got = F.linear(h, w, b)
            torch.testing.assert_close(got, F.linear(h, w, b), **tol)
    with torch.no_grad():
        w.mul_(2)  # changed since packing: the stale copy is never handed out
    assert packed.get(w) is None and packed.add(w) and packed.get(w) is not None  # packed again
    with torch.inference_mode():
        torch.testing.assert_close(kernels.head_product(w, h, "onednn", packed), F.linear(h, w), **tol)
    packed.add(other)
    packed.discard(keep=lambda t: t is other)
    assert packed.get(w) is None and packed.get(other) is not None and len(packed) == 1
    packed.discard()
    assert len(packed) == 0


def test_the_function_mode_reads_the_packed_copy():
    """Inside OneDNNLinear(packed) a packed weight's product runs on its packed copy and any other weight on itself."""
    gen = torch.Generator().manual_seed(0)
    x, w, plain = torch.randn(3, 8, generator=gen), torch.randn(16, 8, generator=gen), torch.randn(4, 8, generator=gen)
    packed = kernels.PackedWeights()
    packed.add(w)
    seen = []
    real = kernels._onednn_linear

    def spy(h, weight, bias=None):
        seen.append(weight.is_mkldnn)
        return real(h, weight, bias)

    kernels._onednn_linear = spy
    try:
        with torch.inference_mode(), kernels.OneDNNLinear(packed):
            F.linear(x, w), F.linear(x, plain)
    finally:
        kernels._onednn_linear = real
    assert seen == [True, False]


@pytest.mark.timed  # tests start-up timing: no pinned path (tests/conftest.py)
@pytest.mark.parametrize("head_wins,body_wins", [(True, True), (False, False), (True, False)])
def test_a_target_keeps_only_the_packed_copies_its_timing_picked(monkeypatch, head_wins, body_wins):
    """The LM head's packed copy stays only where the oneDNN product was timed fastest, the body's only where some
    forward ran faster routed: a copy costs its weight's memory."""
    monkeypatch.setattr(kernels, "time_head_kernels", lambda w, rounds=5, packed=None: {
        k: {1: 1.0, 8: 1.5} if (k == "onednn") == head_wins else {1: 5.0, 8: 9.0} for k in kernels.head_candidates(w)})
    monkeypatch.setattr(kernels, "body_choice", lambda forward, sizes=kernels.BODY_ROWS, rounds=2:
                        frozenset(sizes) if body_wins else frozenset())
    tgt = models.TargetModel(tiny_model("llama"), name="tiny").accelerate()
    assert (tgt.head_kernel == "onednn") is head_wins
    assert (tgt.packed.get(tgt.lm_head_weight) is not None) is head_wins
    body = kernels.linear_weights(tgt.decoder)
    assert body and all((tgt.packed.get(w) is not None) is body_wins for w in body)


@pytest.mark.timed  # tests start-up timing: no pinned path (tests/conftest.py)
@pytest.mark.parametrize("kind", ["llama", "gemma3"])
@pytest.mark.parametrize("drafter_kind", ["eagle", "eagle3", "medusa"])
def test_packed_weights_keep_eagle_equal_to_the_baseline(monkeypatch, kind, drafter_kind):
    """fp32: with every product on packed weights (the target's body and LM head, the drafter's layers and rows)
    EAGLE-2 still equals the baseline token for token, and the drafter holds packed copies of its own."""
    from conftest import PROMPT, run, tiny_drafter, tiny_target
    from core.engine.baseline import BaselineDecoder
    from core.engine.config import DecodeConfig, TreeConfig
    from core.engine.eagle import Eagle2Decoder

    monkeypatch.setattr(kernels, "time_head_kernels", lambda w, rounds=5, packed=None: {
        k: {1: 1.0, 8: 1.5} if k == "onednn" else {1: 5.0, 8: 9.0} for k in kernels.head_candidates(w)})
    monkeypatch.setattr(kernels, "body_choice", lambda forward, sizes=kernels.BODY_ROWS, rounds=2: frozenset(sizes))
    cfg = DecodeConfig(max_new_tokens=40, tree=TreeConfig(total_tokens=12, depth=4, top_k=4, lookup=4))
    tgt = tiny_target(kind).accelerate()
    dr = tiny_drafter(drafter_kind, tgt, torch.arange(0, tgt.vocab_size, 2)).accelerate()
    assert tgt.head_kernel == dr.head_kernel == "onednn" and len(tgt.packed) > 1
    assert dr.packed.get(dr.w_draft) is not None
    if drafter_kind != "medusa":
        assert dr.onednn_rows and len(dr.packed) > 1  # its layers too
    ref, _ = run(BaselineDecoder(tgt), PROMPT, cfg)
    got, events = run(Eagle2Decoder(tgt, dr), PROMPT, cfg)
    assert got == ref and any(len(e.tree) > 1 for e in events)


def test_fp16_stays_plain_on_a_processor_whose_onednn_packs_it(monkeypatch):
    """On an AMX Xeon oneDNN runs and packs fp16 weights (the suite failed there: `packed.add(w.half())` was True).
    Here that processor is stood in for by oneDNN ops that take every dtype; packing still asks for bf16 or fp32
    only, so an fp16 weight stays plain whatever the CPU offers, and bf16/fp32 still pack through the same ops."""
    monkeypatch.setattr(kernels, "_onednn_linear", lambda h, w, b=None: F.linear(h, w, b))
    monkeypatch.setattr(kernels, "_reorder", lambda w: w.clone())
    kernels.onednn_head_works.cache_clear()
    kernels.packing_works.cache_clear()
    try:
        assert kernels.onednn_head_works(torch.float16)  # the stand-in runs fp16 as AMX's oneDNN does
        assert not kernels.packing_works(torch.float16)
        assert kernels.packing_works(torch.float32)
        w = torch.randn(40, 16)
        packed = kernels.PackedWeights()
        assert not packed.add(w.half()) and len(packed) == 0
        assert packed.add_within([[w.half()]], spare=10**9) == [False]
        assert packed.add(w) and len(packed) == 1
    finally:
        kernels.onednn_head_works.cache_clear()  # the real answers for the tests after this one
        kernels.packing_works.cache_clear()


def test_packing_stops_where_the_copies_would_not_fit_in_half_the_spare_memory(monkeypatch):
    """Groups are packed in order while their copies fit in half the spare memory; a group that would not fit
    stays plain as a whole. A target near the machine's memory packs its LM head, or nothing, rather than doubling
    its body; the spare memory is read from the system where it can be."""
    gen = torch.Generator().manual_seed(0)
    head, a, b = (torch.randn(*s, generator=gen) for s in ((64, 8), (16, 8), (16, 8)))  # 2048, 512, 512 bytes
    packed = kernels.PackedWeights()
    assert packed.add_within([[head], [a, b]], spare=2 * 2048 + 100) == [True, False]
    assert packed.get(head) is not None and packed.get(a) is None and packed.get(b) is None
    assert kernels.PackedWeights().add_within([[head], [a, b]], spare=2 * 3072) == [True, True]
    assert kernels.PackedWeights().add_within([[head]], spare=100) == [False]
    assert kernels.PackedWeights().add_within([[head.half()]], spare=10**9) == [False]  # fits, but fp16 never packs
    spare = kernels.spare_memory_bytes()
    assert spare is None or spare > 0
    monkeypatch.setattr(kernels, "spare_memory_bytes", lambda: 0)  # no room at all: every product on plain weights
    tgt = models.TargetModel(tiny_model("llama"), name="tiny").accelerate()
    assert len(tgt.packed) == 0 and tgt.kernel_choices()["packed_weights"] == 0


@pytest.mark.timed  # tests start-up timing: no pinned path (tests/conftest.py)
def test_acceleration_is_an_explicit_step_the_product_runs(monkeypatch):
    """Constructors time and pack nothing (fakes and other devices stay plain); accelerate() does, once; a pinned
    record (a bench's kernel_choices) is applied without timing; decoder_for accelerates a drafter only when its
    target was."""
    from conftest import tiny_drafter, tiny_target
    from core.pipeline import decoder_for

    tgt = models.TargetModel(tiny_model("llama"), name="tiny")
    assert not tgt.accelerated and len(tgt.packed) == 0
    assert tgt.kernel_choices() == {"lm_head": "linear", "lazy_rows": False, "body_onednn_rows": [], "packed_weights": 0}
    monkeypatch.setattr(kernels, "time_head_kernels", lambda w, rounds=5, packed=None: {
        k: {1: 1.0, 8: 1.5} if k == "vocab_major" else {1: 5.0, 8: 9.0} for k in kernels.head_candidates(w)})
    monkeypatch.setattr(kernels, "body_choice", lambda forward, sizes=kernels.BODY_ROWS, rounds=2: frozenset({16}))
    assert tgt.accelerate() is tgt and tgt.accelerated
    assert tgt.head_kernel == "vocab_major" and tgt.onednn_rows == frozenset({16})
    pinned = {"lm_head": "linear", "lazy_rows": True, "body_onednn_rows": [1, 4], "packed_weights": 9}
    other = models.TargetModel(tiny_model("llama"), name="tiny").accelerate(pinned)
    assert (other.head_kernel, other.lazy_rows, other.onednn_rows) == ("linear", True, frozenset({1, 4}))
    ids = torch.arange(0, tgt.vocab_size, 2)
    head = tiny_drafter("eagle", tgt, ids).head
    assert decoder_for(head, tgt).drafter.head_kernel == "vocab_major"  # timed: its target was accelerated
    assert decoder_for(head, tiny_target("llama")).drafter.head_kernel == "linear"  # a fake target: plain
