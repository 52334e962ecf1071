"""What a chat head is trained on and how (core/train/data.py, shards.py, vocab.py, fit.py): the answer tokens only, prompts cut
inside the user's text, the draft vocabulary counted over answers, guesses the draft vocabulary cannot make left
out, one schedule with a warmup share, timed saves, and a held-out measure that travels with the run."""
from __future__ import annotations

import math

import pytest
import torch

from conftest import tiny_head, tiny_target
from core.train.data import chat_prompt, template_tail
from core.train.shards import Stored, answers_opened
from core.train.vocab import data_counts, draft_vocab
from core.train.fit import FitConfig, collate, fit, heldout_measure, losses, lr_factor, warmup_steps
from test_generate_cli import word_tokenizer

TEMPLATE = ("{% for m in messages %}w3 {{ m['content'] }} w4 {% endfor %}"
            "{% if add_generation_prompt %}w5 w6{% endif %}")  # user turn w3 .. w4, assistant turn opened by w5 w6


@pytest.fixture
def chat_tok():
    tok = word_tokenizer()
    tok.chat_template = TEMPLATE
    return tok


def test_a_long_prompt_is_cut_inside_the_users_text_and_keeps_the_template_tail(chat_tok):
    text = " ".join(f"w{i}" for i in range(10, 60))
    for max_prompt in (8, 20, 200):
        ids = chat_prompt(chat_tok, text, max_prompt)
        assert len(ids) <= max_prompt and ids[-2:] == [5, 6]  # the assistant turn is opened
        assert ids[:3] == [1, 3, 10]  # BOS, the user turn, the text's first words
    assert template_tail(chat_tok) == [5, 6]
    whole = chat_prompt(chat_tok, text, 200)
    assert whole == chat_tok(chat_tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                          add_generation_prompt=True)).input_ids


def test_stored_answers_whose_prompt_lost_the_template_tail_are_found():
    feat = torch.zeros(8, 4)
    opened = Stored(torch.tensor([1, 3, 9, 4, 5, 6, 20, 21]), feat, None, 6)
    cut = Stored(torch.tensor([1, 3, 9, 9, 9, 9, 20, 21]), feat, None, 6)  # the wrapped prompt was cut short
    text = Stored(torch.tensor([1, 3, 9, 9, 9, 9, 20, 21]), feat, None, 0)  # a text row: no answer to open
    assert answers_opened([opened, cut, text], [5, 6]) == [True, False, True]
    assert answers_opened([cut], []) == [True]  # a base model has no template


def test_the_draft_vocabulary_is_counted_over_answers():
    feat = torch.zeros(6, 4)
    seqs = [Stored(torch.tensor([7, 7, 7, 7, 30, 31]), feat, None, 4)]  # prompt: four 7s; answer: 30, 31
    assert data_counts(seqs, 40)[7] == 0 and data_counts(seqs, 40)[30] == 1
    assert data_counts(seqs, 40, answers=False)[7] == 4
    ids, cover = draft_vocab(seqs, 2, 40)
    assert ids.tolist() == [30, 31] and cover == 1.0
    ids, cover = draft_vocab(seqs, 2, 40, answers=False)
    assert 7 in ids.tolist()


def _inputs(n: int = 12, length: int = 14, start: int = 6):
    target = tiny_target("llama")
    g = torch.Generator().manual_seed(3)
    seqs = []
    with torch.no_grad():
        for _ in range(n):
            ids = torch.randint(3, 128, (length,), generator=g)
            seqs.append(Stored(ids, target.decoder(input_ids=ids[None]).last_hidden_state[0], None, start))
    return target, seqs


def test_only_answer_positions_are_scored_and_unguessable_ones_are_left_out():
    """Pair i (feature i, token i+1) is scored when token i+1 is an answer token: S - start pairs a sequence; a
    pair whose next data token lies outside the draft vocabulary is left out as well."""
    target, seqs = _inputs(n=3, length=14, start=6)
    head = tiny_head(target).float()
    w = target.lm_head_weight.detach()
    cfg = FitConfig(ttt_steps=2, noise=0.0)
    rms = 1.0
    for answer_only, want in ((True, 3 * (14 - 6)), (False, 3 * 13)):
        ids, feat, valid, taps, scored = collate(seqs, [0, 1, 2], 64, answer_only)
        counts: dict = {}
        losses(head, target.embed, w, ids, feat, valid, cfg, rms, None, None, None, scored, None, counts)
        assert counts["n"][0] == want and counts["n"][1] == want - (0 if answer_only else 3)
    in_vocab = torch.ones(w.shape[0], dtype=torch.bool)
    in_vocab[seqs[0].ids[8:]] = False  # the first sequence's last six tokens can never be drafted
    ids, feat, valid, taps, scored = collate(seqs, [0, 1, 2], 64, True)
    counts = {}
    losses(head, target.embed, w, ids, feat, valid, cfg, rms, None, None, None, scored, in_vocab, counts)
    # scored pairs i = 5..12; pair i guesses token i+2, and the last pair (12) has no next token in the data
    want = sum(1 for sq in seqs for i in range(5, 13) if i == 12 or bool(in_vocab[sq.ids[i + 2]]))
    assert counts["n"][0] == want and want <= 3 * 8 - 6


def test_the_schedule_warms_up_over_its_share_and_decays_to_the_floor():
    total = 200
    cfg = FitConfig(warmup_share=0.05, schedule="cosine", min_lr_share=0.1)
    warm = warmup_steps(cfg, total)
    assert warm == 10 and warmup_steps(FitConfig(warmup=100), 50) == 5
    f = [lr_factor(t, total, warm, "cosine", 0.1) for t in range(total + 1)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0, abs=0.01)
    assert all(a >= b for a, b in zip(f[10:], f[11:])) and f[-1] == pytest.approx(0.1)
    assert f[105] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 105 / 200)))
    lin = [lr_factor(t, total, 1, "linear", 0.05) for t in (0, 100, 199)]
    assert lin == pytest.approx([1.0, 0.5, 0.05])


def test_a_run_measures_its_held_out_data_and_keeps_the_curve_across_a_resume(tmp_path):
    """The held-out curve has a point at the start, every eval_every steps and at the end, each with token-passes
    and wall time; it is stored in state.pt, so a resumed run continues it instead of starting a new one. Timed
    saves (save_every_s) save after every step here, each followed by the snapshot hook."""
    target, seqs = _inputs()
    heldout, train = seqs[:3], seqs[3:]
    w = target.lm_head_weight.detach()
    cfg = FitConfig(epochs=2, lr=3e-3, tokens_per_batch=48, ttt_steps=2, save_every=1000, save_every_s=1e-9,
                    eval_every=2, warmup_share=0.1, schedule="cosine")
    saves: list[int] = []
    head = tiny_head(target).float()
    out = fit(head, target.embed, w, train, cfg, tmp_path, lambda m: None, lambda h, s, t: saves.append(s), heldout)
    curve = out["heldout_curve"]
    steps = [p["step"] for p in curve]
    assert steps[0] == 0 and steps[-1] == out["steps"] and all(s % 2 == 0 or s == out["steps"] for s in steps)
    assert saves == list(range(1, out["steps"] + 1))
    passes = [p["token_passes"] for p in curve]
    assert passes[0] == 0 and all(a < b for a, b in zip(passes, passes[1:]))
    assert all(0.0 <= p["top1"][0] <= p["top3"][0] <= 1.0 and p["positions"] == 3 * 8 for p in curve)
    state = torch.load(tmp_path / "state.pt", weights_only=True)
    assert state["heldout"] == curve and state["tokens_seen"] == passes[-1]
    again = fit(tiny_head(target).float(), target.embed, w, train, FitConfig(**{**cfg.__dict__, "epochs": 3}),
                tmp_path, lambda m: None, None, heldout)
    assert again["heldout_curve"][: len(curve)] == curve and again["heldout_curve"][-1]["step"] == again["steps"]
    direct = heldout_measure(head, target.embed, w, heldout, cfg, 1.0, None, autocast=out["mixed_precision"] == "bf16")
    assert direct == {k: curve[-1][k] for k in ("top1", "top3", "positions")}  # the curve's last point is this head
    prompt_too = FitConfig(**{**cfg.__dict__, "answer_only": False})  # a run scoring prompts is measured the same way
    assert heldout_measure(head, target.embed, w, heldout, prompt_too, 1.0, None,
                           autocast=out["mixed_precision"] == "bf16") == direct


def test_the_card_mixes_both_dev_splits_and_reports_each_prompt(tmp_path, monkeypatch, capsys):
    """--card: MT-bench's dev-split first turns (every category) and three dev-split questions of each other
    Spec-Bench group, nothing from a test split; each prompt's τ with the median and how deep steps reached."""
    import json
    import statistics

    from core.drafters.draft_head import save_head
    from core.train.evaluate import card_questions, main as evaluate_main

    cats = ["writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"]
    with open(tmp_path / "mt_bench_questions.jsonl", "w") as f:
        for q in range(80):
            f.write(json.dumps({"question_id": 81 + q, "category": cats[q // 10], "turns": ["w5 w9 w11"]}) + "\n")
    groups = ["translation", "summarization", "qa", "math_reasoning", "rag"]
    with open(tmp_path / "spec_bench_questions.jsonl", "w") as f:
        for q in range(100):
            f.write(json.dumps({"question_id": q, "category": groups[q // 20], "turns": ["w7 w8 w12"]}) + "\n")
    qs = card_questions(tmp_path)
    assert len(qs) == 31 and all(q["question_id"] % 5 == 0 for q in qs)
    assert sorted({q["group"] for q in qs}) == sorted(cats + groups)
    target = tiny_target("llama")
    target.model.save_pretrained(tmp_path / "model")
    word_tokenizer().save_pretrained(tmp_path / "model")
    save_head(tiny_head(target), tmp_path / "head", dtype=torch.float32)
    monkeypatch.setenv("EAGLE_DATA_DIR", str(tmp_path))
    assert evaluate_main(["--card", "--max-new-tokens", "8", "--model", str(tmp_path / "model"),
                          "--head", str(tmp_path / "head"), "--dtype", "fp32", "--tree", "8,3,3,0",
                          "--temperatures", "0"]) == 0
    r = json.loads(capsys.readouterr().out)["results"][0]
    assert r["prompts"] == 31 and len(r["tau_per_prompt"]) == 31
    assert r["tau_median"] == statistics.median(r["tau_per_prompt"])
    assert all(1 >= a >= b >= 0 for a, b in zip(r["depth_reached"], r["depth_reached"][1:]))


def test_a_saved_head_is_put_on_a_runs_held_out_scale(tmp_path):
    """evaluate's held-out measure of a saved head reads shards from disk and gives the numbers the run's own
    curve gave its last point (the head saved in fp32)."""
    from safetensors.torch import save_file

    from core.drafters.draft_head import save_head
    from core.train.shards import shard_tensors
    from core.train.evaluate import heldout

    target, seqs = _inputs()
    heldout_seqs, train = seqs[:3], seqs[3:]
    (tmp_path / "held").mkdir()
    shard = shard_tensors([(sq.ids.tolist(), sq.feat, None) for sq in heldout_seqs], [8, 8, 8])
    save_file(shard, str(tmp_path / "held" / "shard_00000.safetensors"))
    cfg = FitConfig(epochs=1, lr=3e-3, tokens_per_batch=48, ttt_steps=2, save_every=1000)
    head = tiny_head(target).float()
    out = fit(head, target.embed, target.lm_head_weight.detach(), train, cfg, tmp_path, lambda m: None, None,
              heldout_seqs)
    save_head(head, tmp_path / "head", dtype=torch.float32)
    got = heldout(target, str(tmp_path / "head"), [tmp_path / "held"])
    # both sides autocast by the same probe (kernels.bf16_matmul_is_faster), so the arithmetic is the same
    assert {k: got[k] for k in ("top1", "top3", "positions")} == {
        k: out["heldout_curve"][-1][k] for k in ("top1", "top3", "positions")}
    assert got["positions"] == 3 * 8 and got["ttt_steps"] == 2


def test_the_held_out_measure_over_every_position_compares_draft_vocabularies(tmp_path):
    """evaluate's held-out measure also scores every answer position against the target's greedy token over its
    whole vocabulary ("top1_all"): with the full vocabulary it equals the in-vocabulary measure; with a reduced
    one it counts the positions the vocabulary leaves out, and a target token outside the vocabulary is a miss."""
    from safetensors.torch import save_file

    from core.drafters.draft_head import save_head
    from core.train.evaluate import heldout
    from core.train.fit import full_argmax
    from core.train.shards import shard_tensors

    target, seqs = _inputs()
    held = seqs[:3]
    (tmp_path / "held").mkdir()
    save_file(shard_tensors([(sq.ids.tolist(), sq.feat, None) for sq in held], [8, 8, 8]),
              str(tmp_path / "held" / "shard_00000.safetensors"))
    save_head(tiny_head(target, seed=3).float(), tmp_path / "full", dtype=torch.float32)
    got = heldout(target, str(tmp_path / "full"), [tmp_path / "held"])
    assert got["positions_all"] == got["positions"] == 24 and got["top1_all"] == got["top1"]
    ids = torch.arange(0, target.vocab_size, 3)  # a third of the vocabulary
    save_head(tiny_head(target, ids, seed=3).float(), tmp_path / "small", dtype=torch.float32)
    small = heldout(target, str(tmp_path / "small"), [tmp_path / "held"])
    assert small["positions_all"] == 24 and small["positions"] < 24
    w = target.lm_head_weight.detach().float()
    greedy = torch.cat([full_argmax(sq.feat[None, -8:].float(), w)[0] for sq in held])  # what the answers predict
    reachable = int(torch.isin(greedy, ids).sum())
    assert small["top1_all"][0] * 24 <= reachable + 1e-6
