"""core.bench --turns 2 (MT-bench's second turns asked on the baseline's first answer) and --specbench-dir (Spec-Bench's
per-method answer files, read back the way Spec-Bench's evaluation/speed.py and equal.py read them), on a tiny random
Llama whose tokenizer has a chat template. No timing thresholds."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from transformers import AutoTokenizer

from core.bench.cli import main
from core.bench.report import pooled_tau
from core.bench.turns import second_turns
from core.conversation import turn_messages
from core.prompt import encode_messages
from test_bench import stack  # noqa: F401  (fixture: the tiny model, head and tokenizer saved as folders)
from test_chat import TEMPLATE

QUESTIONS = [
    {"question_id": 81, "category": "writing", "turns": ["Once upon a time there was a little fox", "Go on."]},
    {"question_id": 82, "category": "roleplay", "turns": ["The capital of France is Paris.", "And Italy?"]},
    {"question_id": 201, "category": "translation", "turns": ["def add(a, b):\n    return a + b\n"]},
]
METHODS = "baseline,eagle2,eagle2-head,hf"


@pytest.fixture(scope="module")
def chat_stack(stack, tmp_path_factory):  # noqa: F811
    """test_bench's tiny model folder with a chat template in its tokenizer, and a questions file with two turns."""
    root = tmp_path_factory.mktemp("turns")
    shutil.copytree(stack["model"], root / "model")
    tok = AutoTokenizer.from_pretrained(root / "model")
    tok.chat_template = TEMPLATE
    tok.save_pretrained(root / "model")
    q = root / "questions.jsonl"
    q.write_text("".join(json.dumps(r) + "\n" for r in QUESTIONS))
    return {"model": str(root / "model"), "head": stack["head"], "questions": str(q),
            "tok": AutoTokenizer.from_pretrained(root / "model")}


def args(s: dict, out, *extra: str) -> list[str]:
    return ["--questions", s["questions"], "--model", s["model"], "--head", s["head"], "--dtype", "fp32",
            "--device", "cpu", "--tree", "10,4,3", "--max-new-tokens", "16", "--methods", METHODS,
            "--file-categories", "--json", str(out), *extra]


@pytest.fixture(scope="module")
def two_turns(chat_stack, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    assert main(args(chat_stack, out / "r.json", "--turns", "2", "--specbench-dir", str(out / "spec"))) == 0
    return json.loads((out / "r.json").read_text()), out / "spec"


def test_second_turn_prompt_holds_the_baseline_first_answer(chat_stack):
    tok = chat_stack["tok"]
    rows = [{"question_id": 81, "method": "baseline", "turn": 1, "token_ids": tok.encode(" a red fox") + [0]},
            {"question_id": 81, "method": "eagle2", "turn": 1, "token_ids": tok.encode(" something else")}]
    qs, prompts = second_turns(QUESTIONS, rows + [{"question_id": 82, "method": "baseline", "turn": 1,
                                                   "token_ids": tok.encode("Rome")}], tok)
    assert [q["question_id"] for q in qs] == [81, 82] and all(q["turn"] == 2 for q in qs)  # 201 has one turn
    text = tok.decode(prompts[0])
    assert " a red fox" in text and "something else" not in text and "<eos>" not in text
    assert prompts[0] == encode_messages(tok, turn_messages(QUESTIONS[0]["turns"], [" a red fox"]))
    assert text.index(QUESTIONS[0]["turns"][0]) < text.index(" a red fox") < text.index("Go on.")


def test_turns_2_runs_second_turns_losslessly_on_the_first_answer(two_turns, chat_stack):
    res, _ = two_turns
    rows = res["per_prompt"]
    assert res["config"]["turns"] == 2
    first = [r for r in rows if r["turn"] == 1]
    second = [r for r in rows if r["turn"] == 2]
    assert {r["question_id"] for r in first} == {81, 82, 201} and {r["question_id"] for r in second} == {81, 82}
    assert {r["method"] for r in second} == set(METHODS.split(","))
    # fp32 greedy: every method's second turn equals the baseline's token for token
    assert all(r["identical_to_baseline"] for r in second)
    assert res["summary_by_turn"]["2"]["eagle2"]["mismatches"] == 0
    assert set(res["summary_by_turn"]) == {"1", "2"}
    # the second turn really was asked on the first turn's baseline answer: decoding that prompt with our baseline
    # decoder reproduces the bench's second-turn tokens
    from core.engine.baseline import BaselineDecoder
    from core.engine.config import DecodeConfig
    from core.models.target import load_target

    tok = chat_stack["tok"]
    target, _ = load_target(chat_stack["model"], device="cpu", dtype="fp32")
    for qid in (81, 82):
        q = next(q for q in QUESTIONS if q["question_id"] == qid)
        answer = next(r for r in first if r["question_id"] == qid and r["method"] == "baseline")["token_ids"]
        prompt = encode_messages(tok, turn_messages(q["turns"], [tok.decode(answer, skip_special_tokens=True)]))
        got = [t for ev in BaselineDecoder(target).generate(prompt, DecodeConfig(max_new_tokens=16))
               for t in ev.new_token_ids]
        assert got == next(r for r in second if r["question_id"] == qid and r["method"] == "baseline")["token_ids"]
    # vLLM's names on the EAGLE rows
    e = next(r for r in second if r["method"] == "eagle2")
    assert e["num_drafts"] == e["steps"] and e["num_accepted_tokens"] == e["accepted_drafts"]
    assert sum(e["accept_lengths"]) == e["new_tokens"] and len(e["accept_lengths"]) == e["target_forwards"]


def _speed_read(path, base_path, count_tokens):
    """Spec-Bench evaluation/speed.py, speed(task="overall"), its reading logic replicated: per question
    sum(new_tokens) / sum(wall_time) of choices[0], accept_lengths extended into one list; the baseline file's tokens
    recounted from each turn's text with the tokenizer, minus one (speed.py: len(tokenizer(i).input_ids) - 1)."""
    speeds, accept_lengths_list = [], []
    for line in open(path, encoding="utf-8"):
        d = json.loads(line)
        speeds.append(sum(d["choices"][0]["new_tokens"]) / sum(d["choices"][0]["wall_time"]))
        accept_lengths_list.extend(d["choices"][0]["accept_lengths"])
    speeds0 = []
    for line in open(base_path, encoding="utf-8"):
        d = json.loads(line)
        tokens = sum(count_tokens(t) - 1 for t in d["choices"][0]["turns"])
        speeds0.append(tokens / sum(d["choices"][0]["wall_time"]))
    return np.array(speeds).mean(), np.array(speeds0).mean(), np.mean(accept_lengths_list)


def _equal_read(path) -> list[str]:
    """Spec-Bench evaluation/equal.py get_content: one line str(choices[0]["turns"]) per question."""
    return [str(json.loads(line)["choices"][0]["turns"]) for line in open(path, encoding="utf-8")]


def test_specbench_files_read_as_spec_bench_reads_them(two_turns, chat_stack):
    res, spec = two_turns
    rows = res["per_prompt"]
    files = {p.name: p for p in spec.glob("*.jsonl")}
    name = "model-{}-float32-temp-0.0.jsonl"
    assert set(files) == {name.format(m) for m in METHODS.split(",")}  # hf (plain generate) has per-step lengths
    line = json.loads(files[name.format("eagle2")].read_text().splitlines()[0])
    assert {"question_id", "category", "answer_id", "model_id", "choices", "tstamp"} <= set(line)
    assert line["model_id"] == "model-eagle2-float32-temp-0.0" and line["category"] == "writing"
    choice = line["choices"][0]
    assert choice["index"] == 0 and len(choice["turns"]) == len(choice["new_tokens"]) == len(choice["wall_time"]) == 2
    tok = chat_stack["tok"]
    tps, tps0, mean_accepted = _speed_read(files[name.format("eagle2")], files[name.format("baseline")],
                                           lambda text: len(tok(text).input_ids))
    eagle = [r for r in rows if r["method"] == "eagle2"]
    per_q = {}
    for r in eagle:
        n, s = per_q.get(r["question_id"], (0, 0.0))
        per_q[r["question_id"]] = (n + r["new_tokens"], s + r["seconds"])
    assert tps == pytest.approx(np.mean([n / s for n, s in per_q.values()]))
    # speed.py's "#Mean accepted tokens" is our pooled tau: every step's tokens over the number of steps
    assert mean_accepted == pytest.approx(pooled_tau(rows, "eagle2"))
    assert tps0 > 0
    base_lengths = [n for line in files[name.format("baseline")].read_text().splitlines()
                    for n in json.loads(line)["choices"][0]["accept_lengths"]]
    assert set(base_lengths) == {1}  # plain decoding: one token per forward, as Spec-Bench's baseline writes
    # equal.py: fp32 greedy, EAGLE-2's answers and the baseline's are "totally equal"
    assert _equal_read(files[name.format("eagle2")]) == _equal_read(files[name.format("baseline")])
    assert _equal_read(files[name.format("eagle2")])[0] == str(choice["turns"])


def test_turns_cli_errors_are_one_line(chat_stack, tmp_path, capsys):
    for extra, words in ((["--turns", "3"], "--turns must be 1 or 2"),
                         (["--turns", "2", "--raw"], "leave out --raw")):
        assert main(args(chat_stack, tmp_path / "x.json", *extra)) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err, err
    a = args(chat_stack, tmp_path / "x.json", "--turns", "2")
    a[a.index("--methods") + 1] = "eagle2,hf"
    assert main(a) == 2 and "add the method baseline" in capsys.readouterr().err


def test_summaries_count_each_turn_as_its_own_prompt():
    """With --turns 2 a question is measured twice: the ratio of means pools both turns, never one over the other."""
    from core.bench.report import per_prompt_speedups, spec_bench_speedup

    rows = [{"question_id": 7, "turn": t, "method": m, "tokens_per_s": v}
            for t, m, v in ((1, "baseline", 10.0), (1, "eagle2", 10.0), (2, "baseline", 10.0), (2, "eagle2", 30.0))]
    assert spec_bench_speedup(rows, "eagle2", "baseline") == 2.0  # (10 + 30) / (10 + 10), not turn 2's 3.0
    assert sorted(per_prompt_speedups(rows, "eagle2", "baseline")) == [1.0, 3.0]


def test_lane_rows_carry_the_same_fields_on_both_turns(chat_stack, tmp_path, capsys):
    """One `run_turn` serves both turns: a `--lane` over a head with a reduced draft vocabulary counts its output
    tokens inside it (`in_draft_vocab`) on the second turn as on the first, and every row of a method has the same
    fields on both turns."""
    import torch

    from core.drafters.draft_head import HeadConfig, init_head, save_head

    even = tmp_path / "head_even"
    save_head(init_head(HeadConfig.for_target(64, 1024, 512), torch.arange(0, 1024, 2), seed=1), even,
              dtype=torch.float32)
    out = tmp_path / "l.json"
    a = args(chat_stack, out, "--turns", "2", "--limit", "1", "--lane", f"even={even}@8,3,3")
    a[a.index("--methods") + 1] = "baseline,eagle2"
    assert main(a) == 0, capsys.readouterr().err
    rows = json.loads(out.read_text())["per_prompt"]
    by = {(r["turn"], r["method"]): r for r in rows}
    assert {t for t, _ in by} == {1, 2} and {m for _, m in by} == {"baseline", "eagle2", "even"}
    assert "in_draft_vocab" in by[2, "even"] and 0 <= by[2, "even"]["in_draft_vocab"] <= by[2, "even"]["new_tokens"]
    for m in ("baseline", "eagle2", "even"):
        assert set(by[1, m]) == set(by[2, m]), m
