"""Draft-head checkpoints in the official EAGLE-1/2 layout, and the drafter's refusal of a head for another target."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import PROMPT, run, tiny_head, tiny_target
from core.engine.config import DecodeConfig, TreeConfig
from core.drafters.draft_head import EagleHead, HeadConfig, init_head, load_head, save_head
from core.drafters.eagle import EagleDrafter
from core.engine.eagle import Eagle2Decoder

OFFICIAL_KEYS = {
    "fc.weight", "fc.bias",
    "layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight", "layers.0.self_attn.v_proj.weight",
    "layers.0.self_attn.o_proj.weight",
    "layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight", "layers.0.mlp.down_proj.weight",
    "layers.0.post_attention_layernorm.weight",
}


def head_for(hidden: int = 64, vocab: int = 128, **kw) -> EagleHead:
    c = HeadConfig(hidden_size=hidden, intermediate_size=96, num_attention_heads=2, num_key_value_heads=1,
                   head_dim=32, vocab_size=vocab, **kw)
    head = init_head(c, seed=4)
    with torch.no_grad():
        head.fc.bias.normal_() if head.fc.bias is not None else None
        head.layers[0].post_attention_layernorm.weight.normal_()
    return head


def assert_same_weights(a: EagleHead, b: EagleHead, atol: float = 0.0) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert set(sa) == set(sb)
    for k in sa:
        torch.testing.assert_close(sa[k].float(), sb[k].float(), rtol=0, atol=atol)


def test_save_load_round_trip_official_layout(tmp_path):
    head = head_for()
    save_head(head, tmp_path, dtype=torch.float32)
    assert set(load_file(str(tmp_path / "model.safetensors"))) == OFFICIAL_KEYS
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["num_hidden_layers"] == 1
    assert (cfg["hidden_size"], cfg["vocab_size"], cfg["head_dim"], cfg["bias"]) == (64, 128, 32, True)
    loaded = load_head(tmp_path)
    assert loaded.config == head.config and loaded.trained and not head.trained
    assert_same_weights(head, loaded)
    assert torch.equal(loaded.vocab_ids, torch.arange(128))


def test_default_save_is_bf16(tmp_path):
    head = head_for()
    save_head(head, tmp_path)
    assert all(t.dtype == torch.bfloat16 for t in load_file(str(tmp_path / "model.safetensors")).values())
    loaded = load_head(tmp_path)
    assert next(loaded.parameters()).dtype == torch.float32
    for k, v in head.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[k], v.to(torch.bfloat16).float())


def test_pytorch_model_bin_with_model_prefix(tmp_path):
    """Older releases ship pytorch_model.bin (read with weights_only=True), some with a `model.` prefix and the
    embedding / lm_head copies, which are ignored (the target's are used)."""
    head = head_for()
    save_head(head, tmp_path, dtype=torch.float32)
    (tmp_path / "model.safetensors").unlink()
    sd = {f"model.{k}": v for k, v in head.state_dict().items()}
    sd["embed_tokens.weight"] = torch.zeros(128, 64)
    torch.save(sd, tmp_path / "pytorch_model.bin")
    assert_same_weights(head, load_head(tmp_path))


def test_no_bias_config_round_trip(tmp_path):
    head = head_for(bias=False)
    assert head.fc.bias is None
    save_head(head, tmp_path, dtype=torch.float32)
    assert set(load_file(str(tmp_path / "model.safetensors"))) == OFFICIAL_KEYS - {"fc.bias"}
    assert json.loads((tmp_path / "config.json").read_text())["bias"] is False
    loaded = load_head(tmp_path)
    assert loaded.fc.bias is None and not loaded.config.bias
    assert_same_weights(head, loaded)


def test_config_says_no_bias_but_file_has_one(tmp_path):
    """EAGLE #100: the file wins."""
    head = head_for()
    save_head(head, tmp_path, dtype=torch.float32)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["bias"] = False
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    loaded = load_head(tmp_path)
    assert loaded.config.bias and loaded.fc.bias is not None
    assert_same_weights(head, loaded)


def test_reduced_vocab_d2t_round_trip(tmp_path):
    ids = torch.tensor([0, 3, 4, 10, 77, 127])
    head = init_head(HeadConfig.for_target(64, 128, draft_vocab=len(ids)), ids[torch.randperm(len(ids))], seed=1)
    assert torch.equal(head.vocab_ids, ids)  # kept sorted
    save_head(head, tmp_path, dtype=torch.float32)
    sd = load_file(str(tmp_path / "model.safetensors"))
    assert torch.equal(sd["d2t"], ids - torch.arange(len(ids)))  # EAGLE-3 convention: target = draft + d2t[draft]
    assert sd["t2d"].dtype == torch.bool and sd["t2d"].sum() == len(ids) and sd["t2d"][ids].all()
    assert json.loads((tmp_path / "config.json").read_text())["draft_vocab_size"] == len(ids)
    loaded = load_head(tmp_path)
    assert torch.equal(loaded.vocab_ids, ids) and loaded.config.draft_vocab_size == len(ids)
    assert_same_weights(head, loaded)


def test_loaded_head_drafts_like_the_original(tmp_path):
    """Same weights (fp32 file) -> the same draft trees, step for step."""
    tgt = tiny_target("llama")
    head = tiny_head(tgt, vocab_ids=torch.arange(0, 128, 2), seed=5)
    save_head(head, tmp_path, dtype=torch.float32)
    cfg = DecodeConfig(max_new_tokens=30, tree=TreeConfig(10, 3, 3))
    a = run(Eagle2Decoder(tgt, EagleDrafter(head, tgt)), PROMPT, cfg)[1]
    dec = Eagle2Decoder(tgt, EagleDrafter(load_head(tmp_path), tgt))
    b = run(dec, PROMPT, cfg)[1]
    assert [e.tree for e in a] == [e.tree for e in b]
    assert dec.note == "" and a[0].note  # only an untrained head is flagged


@pytest.mark.parametrize("problem", ["no_config", "no_weights", "eagle3", "missing_key", "wrong_shape"])
def test_load_head_refuses_bad_folders(tmp_path, problem):
    save_head(head_for(), tmp_path, dtype=torch.float32)
    sd = load_file(str(tmp_path / "model.safetensors"))
    if problem == "no_config":
        (tmp_path / "config.json").unlink()
    elif problem == "no_weights":
        (tmp_path / "model.safetensors").unlink()
    elif problem == "eagle3":
        sd = {k.replace("layers.0.", "midlayer."): v for k, v in sd.items()}
    elif problem == "missing_key":
        del sd["layers.0.mlp.up_proj.weight"]
    elif problem == "wrong_shape":
        sd["fc.weight"] = torch.zeros(64, 64)
    if problem in ("eagle3", "missing_key", "wrong_shape"):
        save_file(sd, str(tmp_path / "model.safetensors"))
    with pytest.raises((ValueError, RuntimeError)):
        load_head(tmp_path)


def test_load_head_missing_folder_is_value_error(tmp_path):
    with pytest.raises(ValueError, match="config.json"):
        load_head(tmp_path / "nowhere")


def test_drafter_refuses_mismatched_head():
    tgt = tiny_target("llama")  # hidden 64, vocab 128
    with pytest.raises(ValueError, match="hidden size"):
        EagleDrafter(init_head(HeadConfig.for_target(32, 128)), tgt)
    with pytest.raises(ValueError, match="vocabulary"):
        EagleDrafter(init_head(HeadConfig.for_target(64, 256)), tgt)
    with pytest.raises(ValueError, match="outside the target vocabulary"):
        EagleDrafter(init_head(HeadConfig.for_target(64, 128, 3), torch.tensor([1, 5, 400])), tgt)
    EagleDrafter(init_head(HeadConfig.for_target(64, 128)), tgt)  # the right shape is accepted


def test_head_config_json_round_trip():
    c = HeadConfig.for_target(640, 262144, draft_vocab=32000)
    assert (c.num_attention_heads, c.hd, c.intermediate_size) == (10, 64, 1920)
    assert HeadConfig.from_json(c.to_json()) == c


def test_a_two_layer_head_round_trips_caches_by_position_and_decodes_losslessly(tmp_path):
    """Layers stack in one (k, v) cache along the head axis: a split prefix + suffix pass equals one full pass, the
    file has layer 1's official keys (with its input_layernorm) and a tree decode equals the baseline."""
    from core.engine.baseline import BaselineDecoder
    from core.train.grow import add_layers

    tgt = tiny_target("llama")
    one = tiny_head(tgt, vocab_ids=torch.arange(0, 128, 2), seed=5)
    same = add_layers(one, 1, seed=6)
    e, f, pos = torch.randn(1, 6, tgt.hidden_size), torch.randn(1, 6, tgt.hidden_size), torch.arange(6)
    assert torch.equal(one(e, f, pos)[0], same(e, f, pos)[0])  # the new layer starts as the identity
    head = init_head(replace(same.config, num_layers=2), same.vocab_ids, seed=7)  # a second layer that computes
    full, kv = head(e, f, pos)
    kvh = head.config.num_key_value_heads
    assert kv[0].shape[1] == 2 * kvh
    _, kv_a = head(e[:, :4], f[:, :4], pos[:4])
    tail, _ = head(e[:, 4:], f[:, 4:], pos[4:], kv_a)
    torch.testing.assert_close(tail, full[:, 4:], rtol=1e-5, atol=1e-5)
    save_head(head, tmp_path, dtype=torch.float32)
    keys = set(load_file(str(tmp_path / "model.safetensors")))
    assert "layers.1.input_layernorm.weight" in keys and "layers.0.input_layernorm.weight" not in keys
    assert json.loads((tmp_path / "config.json").read_text())["num_hidden_layers"] == 2
    loaded = load_head(tmp_path)
    assert loaded.config.num_layers == 2
    assert_same_weights(head, loaded)
    cfg = DecodeConfig(max_new_tokens=40, tree=TreeConfig(10, 4, 3))
    assert run(Eagle2Decoder(tgt, EagleDrafter(loaded, tgt)), PROMPT, cfg)[0] == run(BaselineDecoder(tgt), PROMPT, cfg)[0]
    with pytest.raises(ValueError, match="add-layers"):
        add_layers(one, 0)


def test_keep_layers_cuts_a_deep_head_to_its_first_layers_and_it_still_decodes_losslessly():
    """The shallower arm of a depth A/B: every kept weight as it was, nothing of the cut layers left, the embedding
    projection and norms shared; a decode with the cut head still equals the baseline."""
    from core.engine.baseline import BaselineDecoder
    from core.train.grow import keep_layers

    tgt = tiny_target("llama")
    one = tiny_head(tgt, vocab_ids=torch.arange(0, 128, 2), seed=5)
    deep = init_head(replace(one.config, num_layers=3), one.vocab_ids, seed=8)
    cut = keep_layers(deep, 1)
    assert cut.config.num_layers == 1 and torch.equal(cut.vocab_ids, deep.vocab_ids)
    kept, whole = cut.state_dict(), deep.state_dict()
    assert not any(k.startswith(("layers.1.", "layers.2.")) for k in kept)
    assert set(whole) - set(kept) == {k for k in whole if k.startswith(("layers.1.", "layers.2."))}
    assert all(torch.equal(w, whole[k]) for k, w in kept.items())
    cfg = DecodeConfig(max_new_tokens=40, tree=TreeConfig(10, 4, 3))
    assert run(Eagle2Decoder(tgt, EagleDrafter(cut, tgt)), PROMPT, cfg)[0] == run(BaselineDecoder(tgt), PROMPT, cfg)[0]
    for bad in (0, 3):
        with pytest.raises(ValueError, match="keep-layers"):
            keep_layers(deep, bad)


def test_describe_head_and_the_apps_info_line(tmp_path):
    """The line above the race names the head the EAGLE-2 lane drafts with: kind, depth, own parameters, vocabulary."""
    from types import SimpleNamespace

    from app.startup import info_line
    from core.drafters.layers import layer_count
    from core.train.grow import add_layers
    from core.drafters.heads import describe_head

    head = head_for(draft_vocab_size=64)
    own = sum(p.numel() for p in head.parameters())
    assert describe_head(head) == f"EAGLE-1/2, 1 layer, {own / 1e6:.1f}M parameters, draft vocabulary 64, untrained (lossless, slow)"
    save_head(head, tmp_path, dtype=torch.float32)
    loaded = load_head(tmp_path)  # load_head marks a head read from disk as trained
    deep = add_layers(loaded, 2)
    assert describe_head(deep).startswith("EAGLE-1/2, 3 layers, ") and "untrained" not in describe_head(deep)
    assert layer_count(deep.state_dict()) == 3 and layer_count(["fc.weight"]) == 0
    target = SimpleNamespace(name="tiny", device=torch.device("cpu"), dtype=torch.float32, dtype_timing=None)
    line = info_line(target, SimpleNamespace(drafter=SimpleNamespace(head=deep)), "runs/deep/head")
    assert line == f"Target **tiny** · cpu · fp32 · head: {describe_head(deep)} (`runs/deep/head`)"
    assert info_line(target, SimpleNamespace(drafter=SimpleNamespace())) == "Target **tiny** · cpu · fp32"  # no head: lookup


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_fused_projections_compute_the_same_head_and_never_go_stale(kind):
    """Drafting fuses q/k/v and gate/up into one product each: the head's outputs and cache are the same as
    unfused; the fused copy is not used while autograd records (gradients reach the checkpoint's own weights) and
    not after the weights change in place (an optimizer step), so a fused head never drafts with old weights."""
    from core.drafters.layers import MLP, Attention, fuse_projections
    from core.drafters.eagle3_head import Eagle3Config, init_eagle3_head

    h = 64
    if kind == "eagle":
        head = init_head(HeadConfig.for_target(h, 128), seed=3)
    else:
        head = init_eagle3_head(Eagle3Config(hidden_size=h, intermediate_size=3 * h, num_attention_heads=4,
                                             num_key_value_heads=2, vocab_size=128, draft_vocab_size=128), seed=3)
    gen = torch.Generator().manual_seed(0)
    emb, feat = torch.randn(1, 5, h, generator=gen), torch.randn(1, 5, h, generator=gen)
    pos = torch.arange(5)
    with torch.inference_mode():
        ref_out, ref_kv = head(emb, feat, pos)
    weights = fuse_projections(head)
    fused = [m.fused for m in head.modules() if isinstance(m, (Attention, MLP))]
    assert fused and all(f is not None for f in fused)
    assert all(any(w is f.weight for w in weights) for f in fused)  # what a drafter packs: the fused weights...
    assert not any(w is m.weight for f in fused for m in f.linears for w in weights)  # ...not the fused-away ones
    with torch.inference_mode():
        assert all(f.usable() for f in fused)
        out, kv = head(emb, feat, pos)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(kv[0], ref_kv[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(kv[1], ref_kv[1], rtol=1e-5, atol=1e-5)
    assert not any(f.usable() for f in fused)  # autograd on: the module's own projections
    out, _ = head(emb, feat, pos)
    out.sum().backward()
    attn = next(m for m in head.modules() if isinstance(m, Attention))
    assert attn.q_proj.weight.grad is not None and attn.q_proj.weight.grad.abs().sum() > 0
    with torch.no_grad():
        attn.q_proj.weight.mul_(2.0)  # an optimizer step: the fused copy is stale now
        want, _ = head(emb, feat, pos)
    with torch.inference_mode():
        assert not attn.fused.usable()
        got, _ = head(emb, feat, pos)
    torch.testing.assert_close(got, want)


def test_a_draft_cache_kept_in_place_gives_the_head_the_same_keys_as_concatenation():
    """DraftKV (drafting): entries written in place, the buffers doubling when full with every earlier entry kept,
    give a two-layer head the same outputs as the concatenated (k, v) cache; a tree level written after the
    committed slots is overwritten by the next commit, as the drafter expects."""
    from core.drafters.layers import DraftKV

    c = replace(HeadConfig.for_target(64, 128), num_layers=2)
    head = init_head(c, seed=4)
    gen = torch.Generator().manual_seed(0)
    emb, feat = torch.randn(1, 360, 64, generator=gen), torch.randn(1, 360, 64, generator=gen)
    kv = DraftKV(2 * c.num_key_value_heads, c.hd, torch.float32, "cpu")
    with torch.inference_mode():
        out_a, (k_a, v_a) = head(emb[:, :200], feat[:, :200], torch.arange(200))
        out_b, _ = head(emb[:, :200], feat[:, :200], torch.arange(200), kv.window(0, 200))
        torch.testing.assert_close(out_b, out_a)
        assert kv.k.shape[2] == 256
        head(emb[:, 200:203], feat[:, 200:203], torch.arange(200, 203), kv.window(200, 3))  # a tree level: discarded
        ref, (k_r, v_r) = head(emb[:, 200:350], feat[:, 200:350], torch.arange(200, 350), (k_a, v_a))
        got, _ = head(emb[:, 200:350], feat[:, 200:350], torch.arange(200, 350), kv.window(200, 150))
        assert kv.k.shape[2] == 512  # grown, the first 200 entries carried over
        torch.testing.assert_close(got, ref)
        torch.testing.assert_close(kv.k[:, :, :350], torch.cat([k_a, k_r], 2))
        torch.testing.assert_close(kv.v[:, :, :350], torch.cat([v_a, v_r], 2))
