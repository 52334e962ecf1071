"""`python -m core.train` end to end on a tiny random Llama: data, vocabulary, training, resume, export, reload.

Guards: the loss falls; the exported head (official layout + training.json) reloads and decodes losslessly; a rerun
resumes from the checkpoint instead of starting over; evaluation files are refused as training data; the reduced
vocabulary maps draft <-> target ids consistently.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import PROMPT, load_script, run, tiny_model
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, TreeConfig
from core.drafters.draft_head import HeadConfig, init_head, load_head
from core.drafters.eagle import EagleDrafter
from core.engine.eagle import Eagle2Decoder
from core.models.target import TargetModel
from core.train.__main__ import main
from core.train.data import read_pool
from core.train.shards import stored_prompts
from test_generate_cli import word_tokenizer


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict[str, Path]:
    return training_files(tmp_path_factory.mktemp("train"))


def training_files(root: Path) -> dict[str, Path]:
    """A tiny model with its word tokenizer, prompts, text and evaluation questions under root (tests/system/test_cuda.py
    trains on them too)."""
    root.mkdir(parents=True, exist_ok=True)
    tiny_model("llama").save_pretrained(root / "model")
    word_tokenizer().save_pretrained(root / "model")
    words = [f"w{i}" for i in range(3, 128)]
    g = torch.Generator().manual_seed(0)
    with open(root / "prompts.jsonl", "w") as f:
        for i in range(8):
            body = " ".join(words[j] for j in torch.randint(0, 125, (10,), generator=g).tolist())
            f.write(json.dumps({"id": f"p{i}", "prompt": body}) + "\n")
    with open(root / "text.jsonl", "w") as f:
        for i in range(4):
            body = " ".join(words[j] for j in torch.randint(0, 125, (30,), generator=g).tolist())
            f.write(json.dumps({"id": f"t{i}", "text": body}) + "\n")
    with open(root / "questions.jsonl", "w") as f:
        for i, cat in enumerate(["writing", "qa"]):
            f.write(json.dumps({"question_id": i, "category": cat, "turns": ["w5 w9 w11 w23"]}) + "\n")
    return {p.name: p for p in root.iterdir()}


def args(s: dict[str, Path], out: Path, epochs: float) -> list[str]:
    return ["--model", str(s["model"]), "--out", str(out), "--prompts", str(s["prompts.jsonl"]),
            "--text", str(s["text.jsonl"]), "--n-prompts", "8", "--n-text", "4", "--batch", "4",
            "--max-prompt", "12", "--new-tokens", "16", "--max-text", "32", "--draft-vocab", "96",
            "--epochs", str(epochs), "--lr", "3e-3", "--tokens-per-batch", "64", "--ttt-steps", "2",
            "--eval-questions", str(s["questions.jsonl"]), "--eval-per-category", "1", "--eval-max-new", "8",
            "--dtype", "fp32"]


def test_train_end_to_end_resume_and_lossless_reload(setup, tmp_path):
    out = tmp_path / "run"
    assert main(args(setup, out, 2)) == 0
    card = json.loads((out / "head" / "training.json").read_text())
    assert card["data"]["prompt_rows"] == 8 and card["data"]["text_rows"] == 4
    assert card["training"]["final"]["loss"] < card["training"]["first"]["loss"]
    first_steps = card["training"]["steps"]
    assert {r["temperature"] for r in card["evaluation"]["results"]} == {0.0, 1.0}
    assert all(r["tau"] >= 1.0 for r in card["evaluation"]["results"])

    # rerun with more epochs: continues from the checkpoint
    assert main(args(setup, out, 4)) == 0
    log = (out / "train.log").read_text()
    assert f"resumed from {out / 'state.pt'} at step {first_steps}/" in log
    assert json.loads((out / "head" / "training.json").read_text())["training"]["steps"] == 2 * first_steps

    head = load_head(out / "head")
    assert head.trained and head.config.draft_vocab_size == 96
    assert {"fc.weight", "layers.0.self_attn.q_proj.weight", "layers.0.post_attention_layernorm.weight"} <= set(
        head.state_dict())
    target = TargetModel(tiny_model("llama").eval())
    cfg = DecodeConfig(60, tree=TreeConfig(8, 4, 3))
    base, _ = run(BaselineDecoder(target), PROMPT, cfg)
    eagle, _ = run(Eagle2Decoder(target, EagleDrafter(head, target)), PROMPT, cfg)
    assert eagle == base


def test_evaluation_sets_are_refused_as_training_data(tmp_path):
    bad = tmp_path / "spec_bench_questions.jsonl"
    bad.write_text('{"question_id": 1, "prompt": "x"}\n')
    with pytest.raises(ValueError, match="evaluation set"):
        read_pool(str(bad), None, 10, 0, 0)


def test_reduced_vocabulary_maps_ids_both_ways():
    ids = torch.tensor([2, 5, 6, 40, 99, 127])
    head = init_head(HeadConfig.for_target(64, 128, len(ids)), ids[torch.randperm(len(ids))])
    assert torch.equal(head.vocab_ids, ids)  # stored sorted
    draft = torch.arange(len(ids))
    assert torch.equal(draft + head.d2t, ids)  # draft -> target (EAGLE-3 d2t offsets)
    t2d = head.t2d()
    assert t2d.sum() == len(ids) and bool(t2d[ids].all())  # target -> in draft vocabulary
    assert torch.equal(torch.nonzero(t2d).flatten(), ids)


def test_long_prompt_round_filters_the_pool(setup):
    rows = read_pool(str(setup["prompts.jsonl"]), None, 100, 0, 0, min_prompt_chars=1)
    assert len(rows) == 8
    lengths = sorted(len(r["body"]) for r in rows)
    cut = lengths[4]
    kept = read_pool(str(setup["prompts.jsonl"]), None, 100, 0, 0, min_prompt_chars=cut)
    assert kept and all(len(r["body"]) >= cut for r in kept)
    assert len(kept) == sum(n >= cut for n in lengths)


def test_a_round_can_take_the_prompts_of_named_sources_only(tmp_path):
    rows = [{"id": f"{src}:{i}", "source": src, "prompt": f"{src} question {i}"}
            for src in ("chat", "math", "t0") for i in range(4)]
    path = tmp_path / "pool.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept = read_pool(str(path), None, 100, 0, 0, sources=("chat", "math"))
    assert sorted(r["id"].split(":")[0] for r in kept) == ["chat"] * 4 + ["math"] * 4
    with pytest.raises(ValueError, match="no prompts from chta"):
        read_pool(str(path), None, 100, 0, 0, sources=("chta",))


def test_second_round_trains_on_earlier_shards_from_the_first_head(setup, tmp_path):
    first = tmp_path / "first"
    assert main(args(setup, first, 1)) == 0
    second = tmp_path / "second"
    extra = ["--extra-shards", str(first / "shards"), "--init", str(first / "head"), "--max-len", "24"]
    assert main(args(setup, second, 1) + ["--n-text", "0", "--n-prompts", "4"] + extra) == 0
    card = json.loads((second / "head" / "training.json").read_text())
    n_first = json.loads((first / "head" / "training.json").read_text())["data"]["sequences"]
    assert card["data"]["extra_shards"] == {str(first / "shards"): n_first}
    stored = card["data"]["extra_stored"][str(first / "shards")]  # what those shards hold, for the data count
    assert stored["tokens"] > stored["generated"] > 0
    assert card["data"]["sequences"] == n_first + 4 and card["data"]["init"] == str(first / "head")
    assert card["training"]["max_len"] == 24
    assert card["init_card"] == json.loads((first / "head" / "training.json").read_text())  # the whole recipe
    log = (second / "train.log").read_text()
    assert f"initialised from {first / 'head'}" in log and f"({n_first} from --extra-shards)" in log
    # the second-round head keeps the first head's draft vocabulary and decodes losslessly
    head = load_head(second / "head")
    assert torch.equal(head.vocab_ids, load_head(first / "head").vocab_ids)
    target = TargetModel(tiny_model("llama").eval())
    cfg = DecodeConfig(40, tree=TreeConfig(8, 4, 3))
    assert run(Eagle2Decoder(target, EagleDrafter(head, target)), PROMPT, cfg)[0] == run(
        BaselineDecoder(target), PROMPT, cfg)[0]


def test_a_new_round_leaves_out_prompts_an_earlier_round_continued(setup, tmp_path, capsys):
    first, second = tmp_path / "first", tmp_path / "second"
    assert main(args(setup, first, 1) + ["--data-only", "--n-text", "0", "--n-prompts", "4"]) == 0
    earlier = stored_prompts([first / "shards"])
    assert len(earlier) == 4  # each stored sequence less what the target generated: the prompt it started from
    assert main(args(setup, second, 1) + ["--data-only", "--n-text", "0", "--exclude-shards",
                                          str(first / "shards")]) == 0
    later = stored_prompts([second / "shards"])
    assert len(later) == 4 and not later & earlier  # the pool's other four prompts, none of the first round's
    assert "4 prompts earlier runs started from" in (second / "train.log").read_text()
    # the first round kept as token ids only (data/tokens): the same prompts are left out, with no rebuild
    from core.train.tokens import pack_round

    pack_round(first / "shards", tmp_path / "r1", {"seed": 1, "sample_share": 0.0})
    assert stored_prompts([tmp_path / "r1"]) == earlier
    third = tmp_path / "third"
    assert main(args(setup, third, 1) + ["--data-only", "--n-text", "0", "--exclude-shards",
                                         str(tmp_path / "r1")]) == 0
    assert stored_prompts([third / "shards"]) == later
    own = second / "shards"
    assert main(args(setup, second, 1) + ["--data-only", "--exclude-shards", str(own)]) == 2
    assert "this run's own shard folder" in capsys.readouterr().err


def test_document_prompts_wrap_whole_lines_of_training_text_in_an_instruction(tmp_path):
    import random

    from core.train.documents import TEMPLATES, main as documents_main, passage_window

    text = "\n".join(f"Line {i} says something about the budget of year {1900 + i}." for i in range(80))
    rng = random.Random(0)
    for _ in range(20):
        doc = passage_window(text, rng, 200, 600)
        assert doc and 200 <= len(doc) <= 600 and all(ln in text.split("\n") for ln in doc.split("\n"))
    long_line = " ".join(f"Sentence {i} is here." for i in range(100))
    cut = passage_window(long_line, rng, 50, 300)
    assert cut.endswith(".") and len(cut) <= 300 and long_line.startswith(cut)
    assert passage_window("too short.", rng, 50, 300) is None
    src = tmp_path / "text.jsonl"
    src.write_text("".join(json.dumps({"id": f"t{i}", "text": text}) + "\n" for i in range(3)))
    out = tmp_path / "docs" / "prompts.jsonl"
    assert documents_main(["--text", str(src), "--out", str(out), "--n", "7", "--min-chars", "200",
                           "--max-chars", "600", "--seed", "1"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 7 and len({r["id"] for r in rows}) == 7
    for r in rows:  # one of the instructions around a window of the passage
        assert any(r["prompt"].startswith(t.split("{doc}")[0]) and r["prompt"].endswith(t.split("{doc}")[1])
                   for t, _ in TEMPLATES)
    evaluation = tmp_path / "spec_bench_questions.jsonl"
    evaluation.write_text(json.dumps({"id": "q", "text": text}) + "\n")
    assert documents_main(["--text", str(evaluation), "--out", str(tmp_path / "x.jsonl"), "--n", "1"]) == 2


def test_extra_shards_must_exist(setup, tmp_path, capsys):
    assert main(args(setup, tmp_path / "run", 1) + ["--extra-shards", str(tmp_path / "nothing")]) == 2
    assert "--extra-shards" in capsys.readouterr().err


def test_medusa_trains_from_the_same_shards_and_decodes_losslessly(setup, tmp_path):
    """`--head-type medusa` reads another run's shards (the EAGLE head's data), exports the Medusa layout with a
    training card, and the exported head decodes losslessly through the same loop as the EAGLE heads."""
    from core.drafters.heads import load_any_head, make_drafter
    from core.drafters.medusa import MedusaHead

    first = tmp_path / "eagle"
    assert main(args(setup, first, 1)) == 0
    out = tmp_path / "medusa"
    extra = ["--skip-data", "--extra-shards", str(first / "shards"), "--head-type", "medusa", "--medusa-heads", "3"]
    assert main(args(setup, out, 10) + extra) == 0
    card = json.loads((out / "head" / "training.json").read_text())
    assert card["head_type"] == "medusa" and card["training"]["medusa_heads"] == 3
    assert card["data"]["sequences"] == json.loads((first / "head" / "training.json").read_text())["data"]["sequences"]
    assert card["training"]["final"]["loss"] < card["training"]["first"]["loss"]
    assert len(card["training"]["final"]["top1"]) == 3
    head = load_any_head(out / "head")
    assert isinstance(head, MedusaHead) and head.trained and len(head.vocab_ids) == 96
    target = TargetModel(tiny_model("llama").eval())
    cfg = DecodeConfig(60, tree=TreeConfig(8, 3, 3))
    dec = Eagle2Decoder(target, make_drafter(head, target))
    assert dec.method == "medusa" and run(dec, PROMPT, cfg)[0] == run(BaselineDecoder(target), PROMPT, cfg)[0]


def test_training_autocasts_to_bf16_only_where_bf16_measured_faster(setup, tmp_path, monkeypatch):
    """On a CPU without bf16 units bf16 autocast made head training more than 20x slower; fit() times it first
    (core.models.kernels.bf16_matmul_is_faster) and the card says which precision trained the head."""
    from core.models import kernels

    for faster, expected in ((True, "bf16"), (False, "no")):
        monkeypatch.setattr(kernels, "bf16_matmul_is_faster", lambda *a, f=faster, **k: f)
        assert main(args(setup, tmp_path / expected, 1)) == 0
        card = json.loads((tmp_path / expected / "head" / "training.json").read_text())
        assert card["training"]["mixed_precision"] == expected
    assert kernels.bf16_matmul_is_faster(16, rows=8, cols=32, rounds=1) in (True, False)  # the real timing runs


def test_extend_vocab_adds_the_most_frequent_missing_ids():
    from core.train.vocab import extend_vocab, vocab_coverage

    seqs = [(torch.tensor([1, 1, 1, 7, 7, 9, 3, 3, 3, 3]),)]
    ids, coverage = extend_vocab(seqs, torch.tensor([3, 50]), 2, 64)
    assert ids.tolist() == [1, 3, 7, 50]  # 1 (3 uses) and 7 (2 uses) join; 9 (1 use) does not fit
    assert coverage == pytest.approx(9 / 10)
    ids, _ = extend_vocab(seqs, torch.tensor([3, 50]), 10, 64)
    assert ids.tolist() == [1, 3, 7, 9, 50]  # never ids the data does not use
    ids, coverage = extend_vocab(seqs, torch.tensor([3, 50]), 0, 64)  # n=0: nothing joins
    assert ids.tolist() == [3, 50] and coverage == pytest.approx(4 / 10)
    assert vocab_coverage(seqs, torch.tensor([3, 50]), 64) == pytest.approx(4 / 10)  # a kept vocabulary's coverage


def test_extended_vocabulary_round_keeps_the_weights_and_decodes_losslessly(setup, tmp_path):
    first = tmp_path / "first"
    assert main(args(setup, first, 1) + ["--draft-vocab", "24"]) == 0
    second = tmp_path / "second"
    more = ["--init", str(first / "head"), "--extend-vocab", "16", "--n-text", "0", "--n-prompts", "4",
            "--draft-vocab", "24", "--epochs", "0.01"]
    assert main(args(setup, second, 1) + more) == 0
    old, new = load_head(first / "head"), load_head(second / "head")
    assert set(old.vocab_ids.tolist()) < set(new.vocab_ids.tolist()) and len(new.vocab_ids) <= 24 + 16
    card = json.loads((second / "head" / "training.json").read_text())
    assert card["draft_vocab"]["size"] == len(new.vocab_ids) and card["draft_vocab"]["extended_by"] == 16
    target = TargetModel(tiny_model("llama").eval())
    cfg = DecodeConfig(40, tree=TreeConfig(8, 4, 3))
    assert run(Eagle2Decoder(target, EagleDrafter(new, target)), PROMPT, cfg)[0] == run(
        BaselineDecoder(target), PROMPT, cfg)[0]


def test_extend_vocab_needs_an_init_eagle_head(setup, tmp_path, capsys):
    assert main(args(setup, tmp_path / "run", 1) + ["--extend-vocab", "8"]) == 2
    assert "--extend-vocab" in capsys.readouterr().err


def test_widen_mlp_computes_the_same_function_and_its_new_units_learn():
    from core.train.grow import widen_mlp
    c = HeadConfig(hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=4,
                   vocab_size=128, draft_vocab_size=96)
    head = init_head(c, torch.arange(0, 128, 4).repeat(3)[:96].unique(), seed=1)
    wide = widen_mlp(head, 80, seed=2)
    assert wide.config.intermediate_size == 80 and torch.equal(wide.vocab_ids, head.vocab_ids)
    e, f, pos = torch.randn(2, 5, 32), torch.randn(2, 5, 32), torch.arange(5)
    assert torch.equal(head(e, f, pos)[0], wide(e, f, pos)[0])  # zero down_proj columns: the new units add nothing
    wide(e, f, pos)[0].pow(2).sum().backward()
    down = wide.layers[0].mlp.down_proj.weight.grad
    assert down[:, 48:].abs().sum() > 0  # ...until training moves them
    with pytest.raises(ValueError, match="must exceed"):
        widen_mlp(head, 48)


GROWN = {  # flag, value -> what the exported head and its card must say
    "--widen-mlp": ("200", lambda h, card: h.config.intermediate_size == 200 and card["widened_mlp_to"] == 200),
    "--add-layers": ("1", lambda h, card: h.config.num_layers == 2 and (card["added_layers"], card["layers"]) == (1, 2)
                     and h.layers[1].self_attn.o_proj.weight.abs().sum() > 0),  # the new layer trained off zero
}


@pytest.mark.parametrize("flag", sorted(GROWN))
def test_a_grown_round_exports_the_bigger_head_and_decodes_losslessly(setup, tmp_path, capsys, flag):
    value, check = GROWN[flag]
    first = tmp_path / "first"
    assert main(args(setup, first, 1)) == 0
    second = tmp_path / "second"
    more = ["--init", str(first / "head"), flag, value, "--n-text", "0", "--n-prompts", "4", "--epochs", "0.2"]
    assert main(args(setup, second, 1) + more) == 0
    grown = load_head(second / "head")
    assert check(grown, json.loads((second / "head" / "training.json").read_text())["training"])
    assert sum(p.numel() for p in grown.parameters()) > sum(p.numel() for p in load_head(first / "head").parameters())
    target = TargetModel(tiny_model("llama").eval())
    cfg = DecodeConfig(40, tree=TreeConfig(8, 4, 3))
    assert run(Eagle2Decoder(target, EagleDrafter(grown, target)), PROMPT, cfg)[0] == run(
        BaselineDecoder(target), PROMPT, cfg)[0]
    assert main(args(setup, tmp_path / "third", 1) + [flag, value]) == 2  # nothing to grow without --init
    assert flag in capsys.readouterr().err


def test_a_cut_round_exports_the_shallower_head_and_says_so(setup, tmp_path, capsys):
    """--keep-layers: a two-layer head cut to one before the fine-tune (the depth A/B's shallower arm)."""
    first, second, third = tmp_path / "first", tmp_path / "second", tmp_path / "third"
    short = ["--n-text", "0", "--n-prompts", "4", "--epochs", "0.2"]
    assert main(args(setup, first, 1)) == 0
    assert main(args(setup, second, 1) + ["--init", str(first / "head"), "--add-layers", "1"] + short) == 0
    assert main(args(setup, third, 1) + ["--init", str(second / "head"), "--keep-layers", "1"] + short) == 0
    cut = load_head(third / "head")
    card = json.loads((third / "head" / "training.json").read_text())["training"]
    assert cut.config.num_layers == 1 and (card["kept_layers"], card["layers"]) == (1, 1)
    assert main(args(setup, tmp_path / "fourth", 1) + ["--keep-layers", "1"]) == 2  # nothing to cut without --init
    assert "--keep-layers" in capsys.readouterr().err


def test_german_sources_are_filtered_and_wrapped_as_translation_prompts():
    import random

    from core.train.sources import TEMPLATES, first_sentences, reads_german, translation_prompt

    assert first_sentences("Die Stadt plant einen neuen Bahnhof. Er soll 2030 fertig sein. Mehr dazu\nx") == (
        "Die Stadt plant einen neuen Bahnhof. Er soll 2030 fertig sein.")
    assert first_sentences("Die Stadt plant\nund mehr.") is None  # no complete sentence on the first line
    assert first_sentences("Zu kurz.") is None
    assert reads_german("Die Stadt plant einen neuen Bahnhof, der im Jahr 2030 fertig sein soll.")
    assert not reads_german("The city plans a new station that should be finished in 2030.")
    assert not reads_german("Die <em>Stadt</em> plant einen neuen Bahnhof in der Mitte.")
    rng = random.Random(0)
    prompts = [translation_prompt("Das ist ein Satz.", rng) for _ in range(200)]
    assert all("Das ist ein Satz." in p for p in prompts)
    assert {p for p in prompts} == {t.format(s="Das ist ein Satz.") for t, _ in TEMPLATES}
    share = sum(p.startswith("Translate German to English: ") for p in prompts) / len(prompts)
    assert 0.45 < share < 0.75


def test_sampling_temperature_sharpens_towards_greedy():
    from core.train.generation import _pick

    logits = torch.tensor([[0.0, 1.0, 2.0, 0.5]]).repeat(4000, 1)
    g = torch.Generator().manual_seed(0)
    hot = (_pick(logits, True, g, 1.0) == 2).float().mean()
    cold = (_pick(logits, True, g, 0.3) == 2).float().mean()
    assert 0.52 < hot < 0.64 and cold > 0.92  # softmax([0,1,2,.5]) gives 2 about 0.58; at T=0.3 about 0.96


def test_sources_stop_with_one_line_when_the_model_writes_no_german(setup, tmp_path, capsys):
    from core.train import sources

    out = tmp_path / "de" / "prompts.jsonl"
    argv = ["--model", str(setup["model"]), "--out", str(out), "--n", "4", "--batch", "2", "--new-tokens", "6",
            "--dtype", "fp32"]
    assert sources.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the weights' loading bar
    assert err.startswith("error: only 0 of 16 samples read as German")
    assert not out.exists() and len(list(Path(str(out) + ".parts").glob("batch_*.json"))) == 8  # resumable parts


def test_the_training_profile_script_runs_the_recipe_loss_on_real_shards(setup, tmp_path, capsys):
    """scripts/probes/profile_train_step.py (README's training profile) on shards written by `core.train --data-only`: it
    profiles the recipe's loss and backward and reports the LM-head products' share; a folder without shards is one
    line and exit status 2."""
    assert main(args(setup, tmp_path / "run", 1) + ["--data-only"]) == 0
    prof = load_script("probes/profile_train_step")
    common = ["--model", str(setup["model"]), "--tokens-per-batch", "64", "--steps", "1"]
    assert prof.main(["--shards", str(tmp_path / "run" / "shards"), "--draft-vocab", "96", *common]) == 0
    out = capsys.readouterr().out
    assert "tokens a step" in out and "draft vocab 96, 2 unrolled steps" in out and "matrix products:" in out
    assert "aten::mm" in out  # the operator table
    assert prof.main(["--shards", str(tmp_path / "nothing"), *common]) == 2
    assert capsys.readouterr().err.strip() == f"error: no shard_*.safetensors in {tmp_path / 'nothing'}"


def test_a_batch_with_non_finite_loss_or_gradient_is_skipped_and_the_weights_stay_finite(tmp_path):
    """One poisoned sequence (a feature far beyond what a float sum holds) must cost its batch's update, not every
    weight: fit() skips the update, counts it, keeps checkpointing, and the head stays finite and trained."""
    from conftest import tiny_head, tiny_target
    from core.train.fit import FitConfig, fit

    target = tiny_target("llama")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        seqs = []
        for i in range(240):  # the first 200 set the noise scale; the poisoned one comes after them
            ids = torch.randint(3, 128, (12,), generator=g)
            feat = target.decoder(input_ids=ids[None]).last_hidden_state[0].to(torch.bfloat16)
            if i == 230:
                feat[5] = 3.0e38  # finite in bf16; its square and any sum over it are not
            seqs.append((ids, feat, None))
    head = tiny_head(target).float()
    cfg = FitConfig(epochs=1, lr=3e-3, tokens_per_batch=48, ttt_steps=2, p_weight=0.5, save_every=10)
    lines: list[str] = []
    summary = fit(head, target.embed, target.lm_head_weight.detach(), seqs, cfg, tmp_path, lines.append)
    assert summary["skipped_non_finite"] == 1
    assert any("non-finite" in m and "update skipped" in m for m in lines)
    assert all(torch.isfinite(v).all() for v in head.state_dict().values() if v.is_floating_point())
    assert summary["final"]["loss"] < summary["first"]["loss"]
    assert torch.load(tmp_path / "state.pt", weights_only=True)["step"] == summary["steps"]
    # a second epoch resumes from the checkpoint, meets the poisoned batch again, and keeps the count
    again = fit(tiny_head(target).float(), target.embed, target.lm_head_weight.detach(), seqs,
                FitConfig(**{**cfg.__dict__, "epochs": 2}), tmp_path, lines.append)
    assert again["steps"] == 2 * summary["steps"] and again["skipped_non_finite"] == 2


def test_training_on_a_gpu_leaves_the_cudnn_attention_kernel_out_and_a_cpu_keeps_its_own():
    """cuDNN's attention backward returns NaN gradients for masked inputs of some lengths on H100/H200; training
    passes a mask on every step, so on CUDA it runs memory-efficient or math attention instead. The choice is
    scoped to the training forward: outside it, and on a CPU, the global kernel settings are untouched."""
    from core.train.fit import training_attention

    assert torch.backends.cuda.cudnn_sdp_enabled()
    with training_attention(torch.device("cuda")):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.mem_efficient_sdp_enabled() and torch.backends.cuda.math_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled()
    with training_attention(torch.device("cpu")):
        assert torch.backends.cuda.cudnn_sdp_enabled() and torch.backends.cuda.flash_sdp_enabled()


def test_the_oracle_script_bounds_tau_by_the_targets_own_distribution(setup, tmp_path, capsys):
    """scripts/probes/oracle_tau.py on shards written by `core.train --data-only`: one JSON line per group of sequences
    (greedy, sampled); a perfect drafter's τ lies between 1 and depth + 1, the best tree never below the chain of
    the same depth; near T=0 the target's greedy text is certain, so the chain accepts every level."""
    assert main(args(setup, tmp_path / "run", 1) + ["--data-only"]) == 0
    oracle = load_script("probes/oracle_tau")
    common = ["--model", str(setup["model"]), "--shards", str(tmp_path / "run" / "shards"), "--max-seqs", "12",
              "--depth", "3", "--total-tokens", "6", "--top-k", "2"]
    capsys.readouterr()
    for temperature in ("1", "0.001"):
        assert oracle.main([*common, "--temperature", temperature]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
        assert rows and {r["group"] for r in rows} <= {"greedy", "sampled"}
        for r in rows:
            assert r["positions"] > 0 and 1.0 <= r["chain_tau_depth3"] <= r["tree_tau_6,3,2"] + 1e-9 <= 4.0 + 1e-9
        if temperature == "0.001":
            greedy = [r for r in rows if r["group"] == "greedy"]
            assert greedy and greedy[0]["chain_tau_depth3"] > 3.9
    assert oracle.main([*common[:2], "--shards", str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.strip() == f"error: no shard_*.safetensors in {tmp_path / 'nothing'}"


def _fit_inputs():
    from conftest import tiny_head, tiny_target

    target = tiny_target("llama")
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        seqs = []
        for _ in range(30):
            ids = torch.randint(3, 128, (12,), generator=g)
            seqs.append((ids, target.decoder(input_ids=ids[None]).last_hidden_state[0], None))
    return target, seqs, lambda: tiny_head(target).float()


class _Interrupted(Exception):
    pass


def test_a_resumed_training_run_equals_an_uninterrupted_one(tmp_path):
    """Stop a run right after its first checkpoint, resume it: the final head and optimizer state are exactly the
    uninterrupted run's (the noise generator's state travels in state.pt)."""
    from core.train.fit import FitConfig, fit

    target, seqs, new_head = _fit_inputs()
    cfg = FitConfig(epochs=2, lr=3e-3, tokens_per_batch=48, ttt_steps=2, noise=0.5, save_every=3)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    whole = new_head()
    fit(whole, target.embed, target.lm_head_weight.detach(), seqs, cfg, tmp_path / "a", lambda m: None)

    def stop_at_first_save(head, step, total):
        raise _Interrupted(step)

    with pytest.raises(_Interrupted):
        fit(new_head(), target.embed, target.lm_head_weight.detach(), seqs, cfg, tmp_path / "b", lambda m: None,
            stop_at_first_save)
    assert torch.load(tmp_path / "b" / "state.pt", weights_only=True)["step"] == 3
    resumed = new_head()
    lines: list[str] = []
    fit(resumed, target.embed, target.lm_head_weight.detach(), seqs, cfg, tmp_path / "b", lines.append)
    assert any("resumed from" in m and "at step 3/" in m for m in lines)
    for (k, a), b in zip(whole.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), k
    sa = torch.load(tmp_path / "a" / "state.pt", weights_only=True)
    sb = torch.load(tmp_path / "b" / "state.pt", weights_only=True)
    assert sa["data_fingerprint"] == sb["data_fingerprint"] and sa["args"] == sb["args"]
    assert torch.equal(sa["generator"], sb["generator"])


def test_resume_is_refused_for_other_data_or_other_arguments(tmp_path):
    """state.pt records the data fingerprint and the arguments; other data or another lr is refused with a message
    naming what differs, while more epochs (a longer run continuing a shorter one) is still accepted."""
    from core.train.fit import FitConfig, fit

    target, seqs, new_head = _fit_inputs()
    cfg = FitConfig(epochs=1, lr=3e-3, tokens_per_batch=48, ttt_steps=2, save_every=3)
    w = target.lm_head_weight.detach()
    fit(new_head(), target.embed, w, seqs, cfg, tmp_path, lambda m: None)
    other = [(ids.flip(0), feat, t) for ids, feat, t in seqs]
    with pytest.raises(ValueError, match="other training data"):
        fit(new_head(), target.embed, w, other, cfg, tmp_path, lambda m: None)
    with pytest.raises(ValueError, match=r"other arguments \(lr 0.003 -> 0.001\)"):
        fit(new_head(), target.embed, w, seqs, FitConfig(**{**cfg.__dict__, "lr": 1e-3}), tmp_path, lambda m: None)
    longer = fit(new_head(), target.embed, w, seqs, FitConfig(**{**cfg.__dict__, "epochs": 2}), tmp_path,
                 lambda m: None)
    assert longer["steps"] > 0


def test_evaluate_cli_reproduces_the_training_card(setup, tmp_path, capsys):
    """`python -m core.train.evaluate` on a trained head, with the card's tree (head alone) and settings, gives the
    card's own τ: an old head from git history can be put on the same curve as a new round."""
    from core.engine.config import TreeConfig
    from core.train.evaluate import main as evaluate_main

    out = tmp_path / "run"
    assert main(args(setup, out, 1)) == 0
    card = json.loads((out / "head" / "training.json").read_text())["evaluation"]
    capsys.readouterr()
    assert evaluate_main(["--questions", str(setup["questions.jsonl"]), "--per-category", "1",
                          "--max-new-tokens", "8", "--model", str(setup["model"]), "--head", str(out / "head"),
                          "--dtype", "fp32", "--tree", TreeConfig(lookup=0).spec(), "--temperatures", "0",
                          "--chat"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["prompt_mode"] == "raw"  # the word tokenizer has no chat template: --chat falls back to raw text
    want = next(r for r in card["results"] if r["temperature"] == 0.0)
    assert got["results"][0]["tau"] == pytest.approx(want["tau"])
