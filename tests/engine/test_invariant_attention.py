"""The row-invariant attention (core/engine/attention.py) and the exact mode built on it: a tree verify's logits equal
the one-token steps' logits bit for bit in bf16, on tiny models with real head geometry (head_dim 64, grouped
key-value heads, Gemma 3's sliding window inside the tree), for every tree size up to the rows the start-up probe
(core/models/invariance.py) found invariant here; the attention really is ours (SDPA never runs in a verify or a
step); the probe names a kernel that is not invariant and the target falls back to SDPA; the run summary says
bit_exact.

No expectation assumes the processor: each test asks the probe and asserts the behaviour for its answer.
"""
from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

from conftest import run, tiny_head
from core.drafters.eagle import EagleDrafter
from core.engine import attention, kv_cache, tree
from core.engine.autotree import exact_sizes
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, TreeConfig
from core.engine.contract import bit_exact, chain_room
from core.engine.eagle import Eagle2Decoder
from core.engine.events import StepEvent, run_bit_exact, summarize
from core.models import choices, invariance, pinned
from core.models.target import TargetModel

FAMILIES = ("qwen2", "llama", "gemma3")
WINDOW = 24  # Gemma 3's sliding window: shorter than the prefix plus the tree's depth
SHAPE = dict(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
             max_position_embeddings=4096, vocab_size=512, bos_token_id=None, eos_token_id=None, pad_token_id=None)


def real_shaped(kind: str, seed: int = 0) -> torch.nn.Module:
    """A 2-layer (Gemma 3: 3-layer, sliding-full-sliding) bf16 model with head_dim 64 and grouped K/V heads; norms and
    init scaled up so the logits are varied (tests/conftest.py explains why)."""
    torch.manual_seed(seed)
    if kind == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**SHAPE, num_hidden_layers=2, initializer_range=0.2))
    elif kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(**SHAPE, num_hidden_layers=2, initializer_range=0.2))
    else:
        model = Gemma3ForCausalLM(Gemma3TextConfig(
            **dict(SHAPE, num_key_value_heads=1), num_hidden_layers=3, sliding_window=WINDOW,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"], query_pre_attn_scalar=64,
            final_logit_softcapping=30.0, initializer_range=0.2))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(0.0 if kind == "gemma3" else 1.0, 0.3)
    model.generation_config.eos_token_id = None
    return model.to(torch.bfloat16).eval()


def exact_target(kind: str) -> TargetModel:
    tgt = TargetModel(real_shaped(kind), name=f"real-shaped-{kind}")
    tgt.eos_ids = frozenset()
    return tgt.use_attention("invariant")


def random_tree(n: int, seed: int) -> list[int]:
    rnd = random.Random(seed)
    return [-1] + [rnd.randrange(max(0, i - 4), i) for i in range(1, n)]  # deep and bushy


def path_to(parents: list[int], node: int) -> list[int]:
    out = [node]
    while parents[out[-1]] != -1:
        out.append(parents[out[-1]])
    return out[::-1]


def tree_and_steps(tgt: TargetModel, prefix: list[int], parents: list[int], tokens: list[int]):
    """(tree verify logits (N, V), {node: one-token step logits (V,)}) after the same prefix cache."""
    cache = tgt.new_cache()
    tgt.forward(torch.tensor([prefix]), cache)
    hidden, _ = tgt.forward(torch.tensor([tokens]), cache, parents, tree.depths(parents), tree.ancestor_mask(parents))
    verify = tgt.logits(hidden[0])  # (N, V)
    steps = {}
    leaves = [i for i, kids in enumerate(tree.children(parents)) if not kids]
    for leaf in leaves:
        kv_cache.crop(cache, len(prefix))
        for node in path_to(parents, leaf):
            h, _ = tgt.forward(torch.tensor([[tokens[node]]]), cache)
            steps.setdefault(node, tgt.logits(h[0, -1]))
    kv_cache.free(cache)
    return verify, steps


@pytest.mark.parametrize("kind", FAMILIES)
def test_tree_verify_logits_equal_one_token_steps_bitwise_in_bf16(kind):
    tgt = exact_target(kind)
    if tgt.exact_rows < 2:  # the probe found a kernel that is not row-invariant here: today's SDPA, said so
        assert tgt.attention == "sdpa" and tgt.model.config._attn_implementation == "sdpa"
        assert "not row-invariant" in tgt.attention_note
        return  # the fallback is the behaviour asserted for this processor's answer
    assert tgt.attention == "invariant" and tgt.model.config._attn_implementation == attention.NAME
    gen = torch.Generator().manual_seed(7)
    prefix = torch.randint(0, 512, (40,), generator=gen).tolist()  # longer than Gemma's window
    sizes = sorted({1, 2, 3, 5, 8, 13, 16, 24, 32, 48, tgt.exact_rows} & set(range(1, tgt.exact_rows + 1)))
    for n in sizes:
        parents = random_tree(n, seed=n)
        tokens = torch.randint(0, 512, (n,), generator=gen).tolist()
        verify, steps = tree_and_steps(tgt, prefix, parents, tokens)
        for node in range(n):
            assert torch.equal(verify[node], steps[node]), f"{kind}: node {node} of a {n}-node tree"


def test_an_sdpa_target_claims_no_exactness_and_limits_nothing():
    tgt = TargetModel(real_shaped("qwen2")).use_attention("sdpa")
    assert tgt.exact_rows == 0 and tgt.attention == "sdpa"
    assert bit_exact(tgt, 1) is False and chain_room(tgt, 16) is None


class NoSDPA(TorchFunctionMode):
    """Fails any scaled_dot_product_attention call made while active."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is F.scaled_dot_product_attention:
            raise AssertionError("SDPA ran")
        return func(*args, **(kwargs or {}))


def test_steps_and_verifies_never_run_sdpa_with_the_invariant_attention():
    """Fails if the attention is swapped back to SDPA: a one-token step and a tree verify run with SDPA forbidden;
    the same forwards on an SDPA target trip the guard (so the guard works)."""
    parents = random_tree(12, seed=3)
    tokens = list(range(12))
    for mode, trips in (("invariant", False), ("sdpa", True)):
        tgt = TargetModel(real_shaped("qwen2")).use_attention(mode)
        if mode == "invariant" and tgt.attention != "invariant":
            assert "not row-invariant" in tgt.attention_note
            continue
        cache = tgt.new_cache()
        tgt.forward(torch.tensor([list(range(30))]), cache)
        try:
            with NoSDPA():
                tgt.forward(torch.tensor([[5]]), cache)
                tgt.forward(torch.tensor([tokens]), cache, parents, tree.depths(parents), tree.ancestor_mask(parents))
            tripped = False
        except AssertionError:
            tripped = True
        assert tripped is trips, mode


def test_greedy_eagle_equals_baseline_and_says_bit_exact_in_bf16():
    tgt = exact_target("qwen2")
    drafter = EagleDrafter(tiny_head(tgt).to(torch.bfloat16), tgt)
    cfg = DecodeConfig(max_new_tokens=40, tree=TreeConfig(total_tokens=min(12, max(tgt.exact_rows, 1)), depth=4,
                                                          top_k=4, lookup=8))
    prompt = list(range(3, 40, 2))
    base, base_ev = run(BaselineDecoder(tgt), prompt, cfg)
    eagle, eagle_ev = run(Eagle2Decoder(tgt, drafter), prompt, cfg)
    exact = tgt.exact_rows >= 2
    assert summarize(base_ev).bit_exact is exact and summarize(eagle_ev).bit_exact is exact
    if exact:  # within the probed rows: the same tokens, and no verify wider than the probed rows (lookup clamped)
        assert eagle == base
        assert all(len(e.tree) <= tgt.exact_rows for e in eagle_ev)


def test_row_plan_groups_rows_by_padded_key_count_in_sequence_order():
    vis = torch.tensor([[1, 1, 0, 1, 0], [1, 1, 1, 1, 1], [0, 1, 0, 0, 1]], dtype=torch.bool)
    plan = attention.row_plan(vis)
    assert len(plan) == 1  # 3, 5 and 2 keys all pad to one ALIGN block
    rows, idx, pad = plan[0]
    assert rows.tolist() == [0, 1, 2] and idx.shape == (3, attention.ALIGN)
    assert idx[0, :3].tolist() == [0, 1, 3] and idx[1, :5].tolist() == [0, 1, 2, 3, 4] and idx[2, :2].tolist() == [1, 4]
    assert pad.sum(-1).tolist() == [attention.ALIGN - 3, attention.ALIGN - 5, attention.ALIGN - 2]
    assert (idx[pad] == 0).all()
    causal = attention.visible_keys(None, 2, 4, torch.device("cpu"))
    assert causal.tolist() == [[True, True, True, False], [True, True, True, True]]


def test_the_row_grouping_belongs_to_the_forward_that_made_it():
    """Layers of one forward share one plan per mask through the forward's own dict; the module keeps nothing
    between forwards (caches belong to the call); with or without the dict the output is the same."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 3, 64), torch.randn(1, 2, 9, 64), torch.randn(1, 2, 9, 64)
    vis = torch.ones(3, 9, dtype=torch.bool).tril_(diagonal=6)
    vis[2, 7] = False  # a tree row that does not see its sibling
    mask = torch.zeros(1, 1, 3, 9).masked_fill_(~vis, torch.finfo(torch.float32).min)
    plans: dict = {}
    first, _ = attention.invariant_attention(None, q, k, v, mask, **{attention.PLANS_KWARG: plans})
    second, _ = attention.invariant_attention(None, q, k, v, mask, **{attention.PLANS_KWARG: plans})
    alone, _ = attention.invariant_attention(None, q, k, v, mask)
    assert len(plans) == 1 and torch.equal(first, second) and torch.equal(first, alone)
    state = {name: value for name, value in vars(attention).items()
             if not name.startswith("__") and isinstance(value, (list, dict, set))}
    assert state == {}


def test_probe_names_a_kernel_that_is_not_row_invariant_and_the_target_falls_back(monkeypatch):
    """A linear kernel that changes its result from 5 rows on: the probe answers 4 rows and names it; every body
    layer is then pinned (core/models/pinned.py) but the LM head's product drifts too, so "invariant" keeps 4
    exact rows, "auto" (which needs the default tree's 16) runs SDPA and says why; from 2 rows on both fall back."""
    for broken_from, rows in ((5, 4), (2, 1)):
        class Drifts(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if func is F.linear and args[0].dim() == 2 and args[0].shape[0] >= broken_from:
                    out = out + 1.0
                return out

        monkeypatch.setattr("core.models.kernels.linear_route", lambda *a, **k: Drifts())
        tgt = TargetModel(real_shaped("llama"))
        found = invariance.probe_linears(tgt)
        assert found.rows == rows and f"at {broken_from} rows" in found.broken and "proj" in found.broken
        tgt.use_attention("invariant")  # the body's layers get pinned; the LM head (never pinned) still drifts
        assert (tgt.attention, tgt.exact_rows) == (("invariant", rows) if rows >= 2 else ("sdpa", 0))
        tgt.use_attention("auto")
        assert (tgt.attention, tgt.exact_rows) == ("sdpa", 0) and tgt.model.config._attn_implementation == "sdpa"
        assert f"past {rows} rows" in tgt.attention_note and "LM head" in tgt.attention_note
        assert pinned.pinned_names(tgt.decoder) == []  # a fallback to SDPA computes as before


def test_unsupported_family_and_pinned_rows():
    from conftest import tiny_model

    with pytest.raises(ValueError, match="not supported"):
        TargetModel(tiny_model("mistral")).use_attention("invariant")
    auto = TargetModel(tiny_model("mistral")).use_attention("auto")
    assert auto.attention == "sdpa" and "not available" in auto.attention_note
    pinned = TargetModel(real_shaped("llama")).use_attention("invariant", pinned_rows=16)
    assert (pinned.attention, pinned.exact_rows) == ("invariant", 16)  # a pinned answer runs no probe
    d = choices.describe(pinned)
    assert d["attention"] == "invariant" and d["invariant_rows"] == 16
    assert "bit-exact up to 16 rows" in choices.short(d)


def test_auto_tree_sizes_stay_within_the_exact_rows():
    class T:
        exact_rows = 32

    assert exact_sizes(T(), (1, 2, 4, 8, 16, 24, 32, 48, 64), lookup=10) == (1, 2, 4, 8, 16)
    assert exact_sizes(T(), (1, 2, 64), lookup=40) == (1,)
    T.exact_rows = 0
    assert exact_sizes(T(), (1, 2, 64), lookup=10) == (1, 2, 64)
    assert chain_room(type("W", (), {"exact_rows": 32})(), 24) == 8


def test_run_bit_exact_needs_every_step():
    ev = lambda flag: StepEvent(0, "x", (1,), bit_exact=flag)  # noqa: E731
    assert run_bit_exact([ev(True), ev(True)]) is True
    assert run_bit_exact([ev(True), ev(False)]) is False
    assert run_bit_exact([ev(True), ev(None)]) is None and run_bit_exact([]) is None


def test_a_choices_file_pins_the_attention(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"attention": "invariant", "invariant_rows": 24}')
    assert choices.read(path) == {"attention": "invariant", "invariant_rows": 24}
    path.write_text('{"attention": "flash"}')
    with pytest.raises(ValueError, match="attention"):
        choices.read(path)
    path.write_text('{"invariant_rows": -1}')
    with pytest.raises(ValueError, match="invariant_rows"):
        choices.read(path)


def test_a_pinned_layer_rounds_every_row_as_in_one_fixed_product():
    """PinnedLinear (core/models/pinned.py): each of up to `rows` rows equals that row computed alone at the pinned
    width, wherever it sits and whatever sits beside it; wider calls are plain linear(); the swap keeps the
    Parameters and the state_dict, and unpin puts the original module back."""
    torch.manual_seed(0)
    model = real_shaped("qwen2")
    decoder = model.model
    before = {k: v.data_ptr() for k, v in decoder.state_dict().items()}
    names = pinned.pin(decoder, ["mlp.down_proj"], rows=8)
    assert names == ["layers.0.mlp.down_proj", "layers.1.mlp.down_proj"]
    assert {k: v.data_ptr() for k, v in decoder.state_dict().items()} == before
    layer = decoder.layers[0].mlp.down_proj
    assert isinstance(layer, pinned.PinnedLinear) and pinned.pinned_names(decoder) == ["mlp.down_proj"]
    x = torch.randn(12, layer.in_features).to(torch.bfloat16)
    alone = [layer(x[r:r + 1])[0] for r in range(12)]
    for m in (1, 2, 5, 8):
        out = layer(x[:m][None])  # (1, m, out): the batch dimension is kept
        assert out.shape == (1, m, layer.out_features)
        assert all(torch.equal(out[0, r], alone[r]) for r in range(m))
    assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))  # 12 > 8 rows: as before
    assert pinned.unpin(decoder) == 2 and type(decoder.layers[0].mlp.down_proj) is torch.nn.Linear
    assert pinned.pinned_names(decoder) == []
    pinned.pin(decoder, ["self_attn.q_proj"], rows=8)  # Qwen2's q_proj has a bias: added inside the one product
    q = decoder.layers[1].self_attn.q_proj
    assert q.bias is not None and pinned.pinned_names(decoder) == ["self_attn.q_proj"]
    xq = torch.randn(8, q.in_features).to(torch.bfloat16)
    assert all(torch.equal(q(xq[:m])[r], q(xq[r:r + 1])[0]) for m in (2, 8) for r in range(m))
    with pytest.raises(ValueError, match="no such linear layer"):
        pinned.pin(decoder, ["mlp.down_proj", "mlp.no_such_proj"])
    assert pinned.pinned_names(decoder) == []  # a refused pin leaves nothing half-pinned
    assert pinned.layer_suffix("language_model.layers.12.mlp.down_proj") == "mlp.down_proj"


class DownProjDrifts(TorchFunctionMode):
    """A linear kernel like the default model's down_proj on an AVX-512 EPYC: through F.linear, a product over the
    MLP's width rounds differently when it computes more than one row."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is F.linear and args[1].shape[1] == SHAPE["intermediate_size"] and args[0].reshape(
                -1, args[0].shape[-1]).shape[0] > 1:
            out = out + 0.25
        return out


def test_a_layer_that_is_not_row_invariant_is_pinned_and_verifies_stay_bit_exact(monkeypatch):
    """The probe finds the drifting down_proj, the target pins it, and a tree verify's logits equal the one-token
    steps' bit for bit with the drift in force; with the pin taken away the same verify differs (so the pin, not
    luck, makes it exact). The choices record names the pinned layer."""
    monkeypatch.setattr("core.models.kernels.linear_route", lambda *a, **k: DownProjDrifts())
    tgt = TargetModel(real_shaped("qwen2"), name="drifting")
    assert invariance.variant_layers(tgt, pinned.PIN_ROWS) == {"mlp.down_proj": 2}
    tgt.use_attention("invariant")
    if tgt.attention != "invariant":  # another kernel of this processor is not invariant either: said so
        assert "not row-invariant" in tgt.attention_note and pinned.pinned_names(tgt.decoder) == []
        return
    assert pinned.pinned_names(tgt.decoder) == ["mlp.down_proj"] and tgt.exact_rows >= 2
    assert "mlp.down_proj pinned" in tgt.attention_note
    d = choices.describe(tgt)
    assert d["pinned_layers"] == ["mlp.down_proj"] and "mlp.down_proj at fixed rows" in choices.short(d)
    gen = torch.Generator().manual_seed(3)
    prefix = torch.randint(0, 512, (30,), generator=gen).tolist()
    n = min(12, tgt.exact_rows)
    parents = random_tree(n, seed=1)
    tokens = torch.randint(0, 512, (n,), generator=gen).tolist()
    verify, steps = tree_and_steps(tgt, prefix, parents, tokens)
    assert all(torch.equal(verify[i], steps[i]) for i in range(n))
    pinned.unpin(tgt.decoder)
    verify, steps = tree_and_steps(tgt, prefix, parents, tokens)
    assert not all(torch.equal(verify[i], steps[i]) for i in range(n))


def test_a_choices_file_pins_the_pinned_layers(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"attention": "invariant", "invariant_rows": 24, "pinned_layers": ["mlp.down_proj"]}')
    assert choices.read(path)["pinned_layers"] == ["mlp.down_proj"]
    path.write_text('{"pinned_layers": "mlp.down_proj"}')
    with pytest.raises(ValueError, match="pinned_layers"):
        choices.read(path)
    tgt = TargetModel(real_shaped("llama")).use_attention("invariant", pinned_rows=16, pinned_layers=["mlp.down_proj"])
    assert pinned.pinned_names(tgt.decoder) == ["mlp.down_proj"] and tgt.exact_rows == 16  # no probe ran
    tgt.use_attention("sdpa")
    assert pinned.pinned_names(tgt.decoder) == []  # SDPA computes as before: nothing pinned


class SquareDrifts(TorchFunctionMode):
    """A kernel that drifts on every hidden x hidden product (Llama's q_proj and o_proj share that shape)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is F.linear and tuple(args[1].shape) == (SHAPE["hidden_size"], SHAPE["hidden_size"]) and args[
                0].reshape(-1, args[0].shape[-1]).shape[0] > 1:
            out = out + 0.25
        return out


def test_every_layer_of_a_drifting_shape_is_pinned_and_trees_up_to_the_pinned_width_stay_exact(monkeypatch):
    """Layers that share a drifting shape (q_proj and o_proj) are all pinned, not only the first the probe met;
    exactness is claimed up to the pinned width and holds for a tree that wide."""
    monkeypatch.setattr("core.models.kernels.linear_route", lambda *a, **k: SquareDrifts())
    tgt = TargetModel(real_shaped("llama"), name="square-drift")
    assert set(invariance.variant_layers(tgt, pinned.PIN_ROWS)) == {"self_attn.q_proj", "self_attn.o_proj"}
    tgt.use_attention("invariant")
    if tgt.attention != "invariant":
        assert "not row-invariant" in tgt.attention_note
        return
    assert set(pinned.pinned_names(tgt.decoder)) == {"self_attn.q_proj", "self_attn.o_proj"}
    assert 2 <= tgt.exact_rows <= pinned.PIN_ROWS
    gen = torch.Generator().manual_seed(5)
    prefix = torch.randint(0, 512, (20,), generator=gen).tolist()
    n = tgt.exact_rows
    parents = random_tree(n, seed=n)
    tokens = torch.randint(0, 512, (n,), generator=gen).tolist()
    verify, steps = tree_and_steps(tgt, prefix, parents, tokens)
    assert all(torch.equal(verify[i], steps[i]) for i in range(n))


def test_pinned_rows_without_pinned_layers_still_finds_the_layers_to_pin(monkeypatch):
    """A choices file that pins invariant_rows but predates pinned_layers: the drifting layers are still found and
    pinned (pinning is what makes the pinned rows true)."""
    monkeypatch.setattr("core.models.kernels.linear_route", lambda *a, **k: DownProjDrifts())
    tgt = TargetModel(real_shaped("qwen2")).use_attention("invariant", pinned_rows=16)
    assert pinned.pinned_names(tgt.decoder) == ["mlp.down_proj"] and tgt.exact_rows == 16
    with pytest.raises(ValueError, match="no such linear layer"):
        TargetModel(real_shaped("qwen2")).use_attention("invariant", pinned_rows=16, pinned_layers=["mlp.c_proj"])
