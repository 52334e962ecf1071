"""The data pipeline and EAGLE-3 training on tiny random models.

Guards: features kept during generation are the ones a teacher-forced forward computes for the same tokens (left
padding, EOS and taps included), so the faster pipeline trains on the right pairs; batches group similar lengths and
mix on-policy and prefill-only sources by the flag; `--head-type eagle3` trains on fused layer taps, exports the
official EAGLE-3 layout (midlayer.*, fc, norm, lm_head, d2t, t2d), reloads as an EAGLE-3 head and decodes losslessly;
`--reprefill` computes EAGLE-3 taps for an earlier run's sequences.
"""
from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from conftest import PROMPT, run, tiny_model, tiny_target
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, TreeConfig
from core.drafters.eagle import EagleDrafter
from core.engine.eagle import Eagle2Decoder
from core.drafters.eagle3_head import Eagle3Head
from core.drafters.heads import load_any_head
from core.models.target import TargetModel
from core.train.__main__ import main
from core.train.data import plan_batches
from core.train.generation import features, generate_batch, padded_chunks
from core.train.shards import load_shards
from test_generate_cli import word_tokenizer
from test_train import args, setup  # noqa: F401  (the module fixture: tiny model, prompts, text, questions)


@pytest.mark.parametrize("kind,lengths,new", [("llama", (5, 9, 12, 9), 10), ("gemma3", (5, 9, 12, 9), 10),
                                              ("gemma3", (4, 30, 2, 30), 24), ("mistral", (3, 28, 28, 7), 20),
                                              ("qwen3", (6, 6, 11), 8), ("llama", (5, 7), 1)])
@pytest.mark.parametrize("sample", [False, True])
def test_generation_keeps_the_teacher_forced_features(sample, kind, lengths, new):
    """Rows of several lengths (some equal: prefilled together), left padding in the decode, and for the
    sliding-window models prompt + continuation past the window (the decode masks then cut old slots)."""
    target = tiny_target(kind)
    g = torch.Generator().manual_seed(1)
    enc = [torch.randint(3, 120, (n,), generator=g).tolist() for n in lengths]
    taps = Eagle3Head.tap_layers(target.num_layers)
    seqs = generate_batch(target, enc, new, sample, 0, taps, tokens_per_forward=40)  # several prefill chunks
    for (ids, feat, tp), e in zip(seqs, enc):
        assert ids[: len(e)] == e and len(ids) == len(e) + new - 1  # the last sampled token was never fed
        (ref_ids, ref_feat, ref_taps), = features(target, [ids], taps)
        assert feat.shape == (len(ids), target.hidden_size) and tp.shape == (len(ids), 3 * target.hidden_size)
        torch.testing.assert_close(feat.float(), ref_feat.float(), atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(tp.float(), ref_taps.float(), atol=2e-2, rtol=2e-2)
    if not sample and new > 1:  # greedy continuations are the target's own greedy tokens
        for (ids, _, _), e in zip(seqs, enc):
            base, _ = run(BaselineDecoder(target), e, DecodeConfig(new - 1))
            assert ids[len(e):] == base


@pytest.mark.parametrize("kind", ["llama", "mistral"])
def test_prefill_features_keep_row_order_and_equal_one_row_forwards(kind):
    """Rows go in right-padded chunks of at most 10 padded tokens (so some go alone); each row's features are
    those of its own forward, in the order given, and past the sliding window too."""
    target = tiny_target(kind)
    g = torch.Generator().manual_seed(2)
    seqs = [torch.randint(3, 120, (n,), generator=g).tolist() for n in (5, 9, 5, 12, 5, 20)]
    rows = features(target, seqs, tokens_per_forward=10)
    for s, (ids, feat, _) in zip(seqs, rows):
        (_, ref, _), = features(target, [s])
        assert ids == s and feat.shape == (len(s), target.hidden_size)
        torch.testing.assert_close(feat.float(), ref.float(), atol=2e-2, rtol=2e-2)
        h, _ = target.forward(torch.tensor([s]), target.new_cache())
        torch.testing.assert_close(feat.float(), h[0].float(), atol=2e-2, rtol=2e-2)


def test_padded_chunks_stay_within_the_budget_in_order():
    lens = [3, 9, 2, 2, 12, 4]
    assert padded_chunks(lens, range(6), 10) == [[0], [1], [2, 3], [4], [5]]  # 9 x 2 > 10; 12 alone over budget
    assert padded_chunks(lens, [2, 3, 0, 5, 1, 4], 12) == [[2, 3, 0], [5], [1], [4]]  # sorted: 3 x 3 <= 12 < 4 x 4


def test_generation_stops_a_row_after_its_eos():
    target = tiny_target("llama")
    enc = [PROMPT[:6], PROMPT[:8]]
    free = generate_batch(target, enc, 12, False, 0)
    eos = free[0][0][len(enc[0]) + 3]  # make the 4th continuation token of row 0 an EOS
    target.eos_ids = frozenset({eos})
    seqs = generate_batch(target, enc, 12, False, 0)
    cont = seqs[0][0][len(enc[0]):]
    assert cont == free[0][0][len(enc[0]): len(enc[0]) + cont.index(eos) + 1] and cont[-1] == eos
    assert len(seqs[0][1]) == len(seqs[0][0])  # EOS was fed, so its feature is there


def test_batches_group_similar_lengths_and_mix_sources_by_the_flag():
    tok = word_tokenizer()
    rows = [{"kind": "prompt", "id": str(i), "body": " ".join(["w5"] * (3 + i % 17))} for i in range(60)]
    rows += [{"kind": "text", "id": "t", "body": "w7 w8 w9 w10"}, {"kind": "ids", "id": "x", "ids": [1, 2, 3, 4]}]
    plan = plan_batches(rows, tok, 8, 64, 64, 0.0, 0)
    gen = [b for b in plan if b["kind"] == "generate"]
    assert sum(len(b["enc"]) for b in gen) == 60 and sum(len(b["enc"]) for b in plan) == 62
    spans = [max(map(len, b["enc"])) - min(map(len, b["enc"])) for b in gen]
    assert max(spans) <= 3  # sorted by length: little padding in any batch
    mixed = plan_batches(rows, tok, 8, 64, 64, 0.5, 0)
    n_pre = sum(len(b["enc"]) for b in mixed if b["kind"] == "prefill")
    assert 15 <= n_pre - 2 <= 45  # about half of the prompts are prefilled instead of generated
    assert all(b["kind"] == "prefill" for b in plan_batches(rows, tok, 8, 64, 64, 1.0, 0))


def test_eagle3_training_exports_the_official_layout_and_decodes_losslessly(setup, tmp_path):  # noqa: F811
    out = tmp_path / "e3"
    assert main(args(setup, out, 2) + ["--head-type", "eagle3", "--ttt-steps", "5", "--prefill-share", "0.25"]) == 0
    card = json.loads((out / "head" / "training.json").read_text())
    assert card["head_type"] == "eagle3" and card["training"]["ttt_steps"] == 5
    assert card["training"]["final"]["loss"] < card["training"]["first"]["loss"]
    assert card["training"]["first"]["vloss"] == [0.0] * 5  # no feature-regression loss
    assert card["data"]["stored"]["generated"] > 0 and card["data"]["stored"]["tokens"] > card["data"]["stored"][
        "generated"]
    with safe_open(str(out / "head" / "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
    assert {"fc.weight", "midlayer.self_attn.q_proj.weight", "midlayer.hidden_norm.weight", "norm.weight",
            "lm_head.weight", "d2t", "t2d"} <= keys
    assert json.loads((out / "head" / "config.json").read_text())["architectures"] == ["LlamaForCausalLMEagle3"]
    head = load_any_head(out / "head")
    assert isinstance(head, Eagle3Head) and head.config.draft_vocab_size == 96
    target = TargetModel(tiny_model("llama").eval())
    cfg = DecodeConfig(50, tree=TreeConfig(8, 4, 3))
    assert run(Eagle2Decoder(target, EagleDrafter(head, target)), PROMPT, cfg)[0] == run(
        BaselineDecoder(target), PROMPT, cfg)[0]
    shards = load_shards(out / "shards", taps=True)
    assert all(t.shape == (len(i), 3 * target.hidden_size) for i, _, t, _ in shards)


def test_eagle3_needs_five_unrolled_steps(setup, tmp_path, capsys):  # noqa: F811
    assert main(args(setup, tmp_path / "x", 1) + ["--head-type", "eagle3", "--ttt-steps", "3"]) == 2
    assert "--ttt-steps must be >= 5" in capsys.readouterr().err


def test_reprefill_gives_eagle3_taps_for_an_earlier_runs_sequences(setup, tmp_path):  # noqa: F811
    first = tmp_path / "first"
    assert main(args(setup, first, 1) + ["--data-only"]) == 0
    with pytest.raises(ValueError, match="no EAGLE-3 layer taps"):
        load_shards(first / "shards", taps=True)
    second = tmp_path / "second"
    assert main(args(setup, second, 1) + ["--data-only", "--head-type", "eagle3", "--ttt-steps", "5", "--n-prompts",
                                          "1", "--n-text", "0", "--reprefill", str(first / "shards")]) == 0
    old = {tuple(i.tolist()) for i, *_ in load_shards(first / "shards")}
    new = {tuple(i.tolist()) for i, *_ in load_shards(second / "shards")}
    assert old <= new  # every earlier sequence, now with features computed afresh
    assert main(args(setup, second, 1) + ["--head-type", "eagle3", "--ttt-steps", "5", "--skip-data",
                                          "--eval-per-category", "0"]) == 0


def test_sampled_picks_follow_the_softmax():
    from core.train.generation import _pick

    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, 3.0]]).expand(20000, -1).contiguous()
    picks = _pick(logits, True, torch.Generator().manual_seed(0))
    freq = torch.bincount(picks, minlength=5).float() / len(picks)
    p = torch.softmax(logits[0], -1)
    assert torch.all((freq - p).abs() < 4 * torch.sqrt(p * (1 - p) / len(picks)) + 1e-3)
    assert torch.equal(_pick(logits[:3], False, torch.Generator()), torch.tensor([4, 4, 4]))


def test_the_generation_lm_head_gives_linears_logits_in_either_orientation(monkeypatch):
    """generate_batch's LM head (core/train/generation.batch_lm_head): whichever orientation timing picks,
    contiguous (B, V) logits equal to linear()'s up to summation order."""
    from core.train import generation

    gen = torch.Generator().manual_seed(0)
    w, h = torch.randn(300, 16, generator=gen), torch.randn(5, 16, generator=gen)
    for major in (True, False):
        monkeypatch.setattr(generation, "_vocab_major_batch", lambda *a, m=major: m)
        out = generation.batch_lm_head(w, 5)(h)
        assert out.shape == (5, 300) and out.is_contiguous()
        torch.testing.assert_close(out, torch.nn.functional.linear(h, w))
    monkeypatch.undo()
    assert generation._vocab_major_batch(300, 16, torch.float32, 5) in (True, False)  # the real timing runs
