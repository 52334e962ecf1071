"""core.bench: end to end on a tiny random Llama saved to disk (all methods), Spec-Bench arithmetic, CLI errors.

No timing thresholds: only structure, token identity at T = 0 in fp32, and the speedup definition.
"""
from __future__ import annotations

import json

import pytest
import torch

from core.bench.cli import main
from core.bench.peers import trim_at_eos
from core.bench.protocol import rotation
from core.bench.questions import select_questions
from core.bench.report import (
    acceptance_table, category_table, pooled_tau, spec_bench_speedup, step_table, summarize_rows, summary_table,
    vocab_table,
)
from core.drafters.draft_head import HeadConfig, init_head, save_head
from core.prompt import encode_prompt
from fakes import tiny_tokenizer

METHODS = ["hf", "hf-pld", "baseline", "eagle2", "eagle2-head", "eagle2-chain", "lookup"]
QUESTIONS = [
    {"question_id": 81, "category": "writing", "turns": ["Once upon a time there was a little fox", "more"]},
    {"question_id": 82, "category": "roleplay", "turns": ["The capital of France is Paris."]},
    {"question_id": 201, "category": "translation", "turns": ["def add(a, b):\n    return a + b\n"]},
    {"question_id": 281, "category": "summarization", "turns": ["Summarize: 1. eggs\n2. milk\n3. flour\n" * 2]},
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> dict:
    """A tiny Llama (varied-output init) + byte-level BPE tokenizer + untrained head, saved as folders."""
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("bench")
    tok = tiny_tokenizer()
    torch.manual_seed(0)
    vocab = 1024  # > the tokenizer's 320 (unused rows are harmless); core.engine.autotree's verify profile draws ids < 1000
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      eos_token_id=tok.eos_token_id, bos_token_id=None, pad_token_id=None, tie_word_embeddings=False,
                      initializer_range=0.3)  # the stock 0.02 collapses greedy output into a short loop
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.5 * torch.randn_like(p))
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    save_head(init_head(HeadConfig.for_target(64, vocab), seed=0), root / "head", dtype=torch.float32)
    q = root / "questions.jsonl"
    q.write_text("".join(json.dumps(r) + "\n" for r in QUESTIONS))
    return {"root": root, "model": str(root / "model"), "head": str(root / "head"), "questions": str(q)}


def _args(stack: dict, out, *extra: str) -> list[str]:
    return ["--questions", stack["questions"], "--model", stack["model"], "--head", stack["head"], "--dtype", "fp32",
            "--device", "cpu", "--tree", "10,4,3", "--max-new-tokens", "24", "--json", str(out), *extra]


def test_end_to_end_all_methods(stack, tmp_path, capsys):
    out, html = tmp_path / "r.json", tmp_path / "r.html"
    rc = main(_args(stack, out, "--methods", ",".join(METHODS), "--per-category", "1", "--html", str(html)))
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    res = json.loads(out.read_text())
    c = res["config"]
    for key in ("machine", "torch", "torch_threads", "dtype", "device", "model", "head", "tree", "methods",
                "temperature", "max_new_tokens", "questions", "categories", "n_prompts", "date"):
        assert key in c, key
    assert {"platform", "processor", "cpu_count"} <= set(c["machine"])
    assert set(c["kernels"]) == {"lm_head", "lazy_rows", "body_onednn_rows", "packed_weights"}  # start-up's choices
    assert c["choices"]["lm_head"] == c["kernels"]["lm_head"] and c["choices"]["dtype"] == "float32"
    assert c["choices"]["source"].startswith("pinned") and "draft_head" in c["choices"]  # tests/conftest.py's pin
    assert c["dtype"] == "float32" and c["n_prompts"] == 3  # writing + roleplay collapse into mt_bench
    assert (c["tree"]["total_tokens"], c["tree"]["depth"], c["tree"]["top_k"]) == (10, 4, 3)
    rows = res["per_prompt"]
    assert len(rows) == 3 * len(METHODS)
    assert {r["category"] for r in rows} == {"mt_bench", "translation", "summarization"}
    for r in rows:
        assert {"question_id", "category", "method", "new_tokens", "seconds", "tokens_per_s", "tau",
                "identical_to_baseline"} <= set(r)
        assert 0 < r["new_tokens"] <= 24 and r["seconds"] > 0
    by = {(r["method"], r["question_id"]): r for r in rows}
    for qid in (81, 201, 281):
        assert by[("eagle2", qid)]["identical_to_baseline"] is True
        assert by[("eagle2-chain", qid)]["identical_to_baseline"] is True
        assert by[("hf", qid)]["identical_to_baseline"] is True  # HF generate() agrees with core in fp32
        assert by[("hf-pld", qid)]["identical_to_baseline"] is True
        assert by[("hf", qid)]["tau"] == pytest.approx(1.0)  # one forward per token, counted by the hook
        assert by[("baseline", qid)]["tau"] == pytest.approx(1.0)
    s = res["summary"]
    assert list(s) == METHODS
    for m in METHODS:
        assert {"tokens_per_s", "speedup_vs_hf", "speedup_vs_baseline", "tau", "mismatches",
                "per_category"} <= set(s[m])
        assert s[m]["mismatches"] == 0
        assert set(s[m]["per_category"]) == {"mt_bench", "translation", "summarization"}
    assert s["hf"]["speedup_vs_hf"] == pytest.approx(1.0)
    for m in ("eagle2", "eagle2-chain"):
        assert 0.0 <= s[m]["accept_rate"] <= 1.0 and isinstance(s[m]["depth_accept"], list)
    assert html.exists() and "plotly" in html.read_text()[:200_000].lower()
    assert "| method | tok/s | speedup vs hf | speedup vs baseline | τ | mismatches |" in captured.out
    assert "| eagle2-chain |" in captured.out and "| n-α 0.. (conditional) |" in captured.out
    assert all(0.0 <= x <= 1.0 for x in s["eagle2-chain"]["n_alpha"])
    # where a step's time goes: our decoders split it, generate() gives its mean per forward
    for m in ("baseline", "eagle2"):
        t = s[m]["step_ms"]
        assert min(t["target"], t["other"]) > 0 and t["total"] == pytest.approx(t["target"] + t["draft"] + t["other"])
    assert s["baseline"]["step_ms"]["draft"] == 0 and s["eagle2"]["step_ms"]["draft"] > 0
    assert s["hf"]["step_ms"]["target"] is None and s["hf"]["step_ms"]["total"] > 0
    assert "| method | ms per step | target forward | draft head |" in captured.out
    # what a mean hides: matched-only speedup, spread, copied share and loop flags, per row and in the summary
    for r in rows:
        assert "loop_period" in r
        if r["method"] in ("eagle2", "eagle2-head", "lookup"):
            assert r["accepted_lookup"] + r["accepted_head"] == r["accepted_drafts"]
    assert all(r["accepted_lookup"] == 0 for r in rows if r["method"] == "eagle2-head")  # the head alone copies nothing
    lookup_rows = [r for r in rows if r["method"] == "lookup"]
    assert all(r["accepted_head"] == 0 for r in lookup_rows)  # lookup alone: every accepted draft was copied
    for m in METHODS:
        assert s[m]["n_matched_vs_baseline"] == 3 and s[m]["speedup_vs_baseline_matched"] is not None
        assert set(s[m]["speedup_spread"]) == {"median", "p10", "p90", "min", "max"}
        assert s[m]["loops"] is not None
    assert s["eagle2-head"]["copied_share"] in (0.0, None)
    assert "| method | speedup vs baseline: all | matched only (n) |" in captured.out


def test_sampled_run_with_auto_tree(stack, tmp_path, capsys):
    out = tmp_path / "s.json"
    rc = main(_args(stack, out, "--methods", "hf,baseline,eagle2,eagle2-head,eagle2-greedy-tree", "--limit", "1",
                    "--temperature", "0.8", "--tree", "auto", "--head-tree", "5,3,2"))
    assert rc == 0, capsys.readouterr().err
    res = json.loads(out.read_text())
    assert res["config"]["tree"]["spec"] == "auto" and res["config"]["tree"]["source"].startswith("auto")
    head_tree = res["config"]["head_tree"]  # --head-tree: the head alone at a fixed tree while eagle2 runs at auto
    assert (head_tree["total_tokens"], head_tree["depth"], head_tree["top_k"], head_tree["lookup"]) == (5, 3, 2, 0)
    assert res["summary"]["eagle2-head"]["tau"] >= 1.0
    greedy = res["config"]["greedy_tree"]  # auto's greedy plan, raced next to eagle2's sampled plan
    assert greedy["source"].startswith("auto") and "verify_ms" in greedy and greedy["total_tokens"] >= 1
    assert res["summary"]["eagle2-greedy-tree"]["tau"] >= 1.0 and res["summary"]["eagle2-greedy-tree"]["step_ms"]
    assert res["config"]["head"] == stack["head"] and res["config"]["head_trained"] is True
    assert all(r["identical_to_baseline"] is None for r in res["per_prompt"])
    assert all(v["mismatches"] is None for v in res["summary"].values())


def test_auto_calibrates_on_a_held_out_prompt_never_a_measured_one(stack, tmp_path, monkeypatch):
    """`--tree auto` plans on CALIBRATION_PROMPT: the ids choose_tree sees are none of the measured prompts'."""
    import core.bench.stack as bench_mod
    from transformers import AutoTokenizer

    seen = []
    real = bench_mod.choose_tree

    def spy(eagle, prompt_ids, **kw):
        seen.append(list(prompt_ids))
        return real(eagle, prompt_ids, **kw)

    monkeypatch.setattr(bench_mod, "choose_tree", spy)
    out = tmp_path / "a.json"
    assert main(_args(stack, out, "--methods", "baseline,eagle2", "--tree", "auto", "--max-new-tokens", "8")) == 0
    tok = AutoTokenizer.from_pretrained(stack["model"])
    measured = [encode_prompt(tok, q["turns"][0], "auto") for q in QUESTIONS]
    assert seen == [encode_prompt(tok, bench_mod.CALIBRATION_PROMPT, "auto")]
    assert all(ids != seen[0] for ids in measured)
    tree = json.loads(out.read_text())["config"]["tree"]
    assert tree["calibration_prompt"] == bench_mod.CALIBRATION_PROMPT and "held-out" in tree["source"]


def test_split_dev_and_test_are_disjoint_and_recorded(stack, tmp_path):
    """dev (question_id % 5 == 0) is for training decisions, test is the rest; together they are the file."""
    from core.bench.questions import BenchError, split_questions

    rows = [{"question_id": i, "category": "qa", "turns": ["x"]} for i in range(80, 92)]
    dev, test = split_questions(rows, "dev"), split_questions(rows, "test")
    assert [r["question_id"] for r in dev] == [80, 85, 90]
    assert {r["question_id"] for r in dev} | {r["question_id"] for r in test} == set(range(80, 92))
    assert not {r["question_id"] for r in dev} & {r["question_id"] for r in test}
    assert split_questions(rows, "all") == rows
    with pytest.raises(BenchError):
        split_questions(rows, "train")
    out = tmp_path / "t.json"
    assert main(_args(stack, out, "--methods", "baseline", "--split", "test", "--max-new-tokens", "4")) == 0
    res = json.loads(out.read_text())
    assert res["config"]["split"] == "test"
    assert {r["question_id"] for r in res["per_prompt"]} == {81, 82, 201, 281}  # no id here is a multiple of 5
    assert main(_args(stack, tmp_path / "d.json", "--methods", "baseline", "--split", "dev")) == 2  # none selected


def _hrow(qid, method, tps, same=True, tau=1.0, lookup=None, drafts=None, loop=None):
    r = {"question_id": qid, "category": "qa", "method": method, "new_tokens": 128, "seconds": 128 / tps,
         "tokens_per_s": tps, "target_forwards": int(128 / tau), "tau": tau, "identical_to_baseline": same,
         "loop_period": loop}
    if drafts is not None:
        r.update(accepted_drafts=drafts, accepted_lookup=lookup, accepted_head=drafts - lookup, drafted_tokens=4 * drafts,
                 accept_hist=[1, 1])
    return r


def test_honest_summary_on_planted_rows():
    """Four prompts: one looping output that ran 10x and diverged, three ordinary ones at 1.5x. The mean speedup
    (ratio of means) is pulled up by the loop; matched-only, the median and the spread say what happened."""
    from core.bench.report import honest_table, quantile, spread

    rows = []
    for qid, (tps, same, loop) in enumerate([(100.0, False, 3), (15.0, True, None), (15.0, True, None),
                                             (15.0, True, None)]):
        rows.append(_hrow(qid, "baseline", 10.0))
        rows.append(_hrow(qid, "eagle2", tps, same, tau=tps / 10, lookup=30 if loop else 2, drafts=40 if loop else 6,
                         loop=loop))
    s = summarize_rows(rows)["eagle2"]
    assert s["speedup_vs_baseline"] == pytest.approx((100 + 45) / 4 / 10)  # 3.63x, the headline a loop makes
    assert s["speedup_vs_baseline_matched"] == pytest.approx(1.5) and s["n_matched_vs_baseline"] == 3
    assert s["speedup_spread"]["median"] == pytest.approx(1.5) and s["speedup_spread"]["max"] == pytest.approx(10.0)
    assert s["speedup_spread"]["p90"] == pytest.approx(quantile([1.5, 1.5, 1.5, 10.0], 0.9))
    assert s["tau_spread"]["min"] == pytest.approx(1.5) and s["tau_spread"]["max"] == pytest.approx(10.0)
    assert s["copied_share"] == pytest.approx((30 + 3 * 2) / (40 + 3 * 6))
    assert s["loops"] == 1 and summarize_rows(rows)["baseline"]["loops"] == 0
    table = honest_table(summarize_rows(rows))
    assert "| eagle2 | 3.62x | 1.50x (3) | 1.50x [1.50, 7.45] | 1.50 [1.50, 10.00] | 62% | 1 of 4 |" in table
    assert quantile([1, 2, 3, 4], 0.5) == 2.5 and spread([]) is None


def test_auto_tree_is_not_calibrated_when_no_method_drafts_with_it(stack, tmp_path, capsys):
    """A heads-only race at --head-tree: `auto` would plan a tree nobody uses, so it is not calibrated."""
    out = tmp_path / "h.json"
    rc = main(_args(stack, out, "--methods", "hf,eagle2-head", "--limit", "1", "--tree", "auto",
                    "--head-tree", "5,3,2"))
    assert rc == 0, capsys.readouterr().err
    res = json.loads(out.read_text())
    assert res["config"]["tree"]["source"].startswith("unused") and "calibration" not in res["config"]["tree"]
    assert res["config"]["head_tree"]["total_tokens"] == 5 and res["summary"]["eagle2-head"]["tau"] >= 1.0


@pytest.mark.parametrize(("methods", "head_tree", "uses"), [
    ("hf,eagle2-head,eagle2-head-b", "16,6,8", False),
    ("hf,eagle2-head", None, True),  # the head alone drafts with the run's tree when --head-tree is absent
    ("hf,eagle2", "16,6,8", True),
    ("baseline,lookup,eagle2-greedy-tree", None, False),  # lookup has its own tree; greedy-tree calibrates its own
])
def test_uses_run_tree(methods, head_tree, uses):
    from core.bench.methods import method_lanes, uses_run_tree
    from core.engine.config import TreeConfig

    lanes = method_lanes(methods.split(","), head_tree=head_tree and TreeConfig.parse(head_tree), head_b="b")
    assert uses_run_tree(lanes) is uses


def test_second_head_races_in_the_same_run(stack, tmp_path, capsys):
    """--head-b: an EAGLE-3 head and the EAGLE-1/2 head, both lossless, reported side by side in one run."""
    from core.drafters.eagle3_head import Eagle3Config, init_eagle3_head, save_eagle3_head

    c = Eagle3Config(hidden_size=64, intermediate_size=128, num_attention_heads=1, num_key_value_heads=1,
                     vocab_size=1024, draft_vocab_size=1024, target_hidden_size=64, head_dim=64)
    save_eagle3_head(init_eagle3_head(c), stack["root"] / "head3", dtype=torch.float32)
    out = tmp_path / "b.json"
    methods = "baseline,eagle2-head,eagle2-head-b,eagle2-chain-b"
    rc = main(_args(stack, out, "--methods", methods, "--limit", "2", "--head-b", str(stack["root"] / "head3")))
    assert rc == 0, capsys.readouterr().err
    res = json.loads(out.read_text())
    assert res["config"]["head_b"] == str(stack["root"] / "head3")
    assert list(res["summary"]) == methods.split(",")
    assert all(r["identical_to_baseline"] for r in res["per_prompt"])
    assert all(isinstance(res["summary"][m]["depth_accept"], list) for m in ("eagle2-head-b", "eagle2-chain-b"))
    assert main(_args(stack, tmp_path / "c.json", "--methods", "baseline,eagle2-head-b")) == 2  # needs --head-b
    assert "--head-b" in capsys.readouterr().err


def test_one_head_races_itself_at_two_trees(stack, tmp_path, capsys):
    """--head-tree-b: the same head at a fixed depth and with dynamic depth, in one interleaved run; both lossless,
    each row drafting its own tree (the dynamic one verifies smaller trees), the trees recorded in the config."""
    out = tmp_path / "t.json"
    head = str(stack["root"] / "head")
    rc = main(_args(stack, out, "--methods", "baseline,eagle2-head,eagle2-head-b", "--limit", "2", "--head-b", head,
                    "--head-tree", "12,5,4", "--head-tree-b", "12,5,4,0,0.05"))
    assert rc == 0, capsys.readouterr().err
    res = json.loads(out.read_text())
    assert res["config"]["head_tree"]["stop_below"] == 0.0 and res["config"]["head_tree_b"]["stop_below"] == 0.05
    assert all(r["identical_to_baseline"] for r in res["per_prompt"])
    drafted = {m: sum(r["drafted_tokens"] for r in res["per_prompt"] if r["method"] == m) /
               sum(r["steps"] for r in res["per_prompt"] if r["method"] == m) for m in ("eagle2-head", "eagle2-head-b")}
    assert drafted["eagle2-head-b"] < drafted["eagle2-head"]  # steps that stopped early verified smaller trees
    assert main(_args(stack, tmp_path / "u.json", "--methods", "baseline,eagle2-head", "--head-tree-b", "8,3,3")) == 2
    assert "--head-tree-b" in capsys.readouterr().err


def test_medusa_races_the_eagle_head_at_the_same_budget(stack, tmp_path, capsys):
    """--methods medusa: the Medusa head drafts through the same loop with eagle2-head's tree; lossless, with the
    tree statistics (tau, depth acceptance) the EAGLE rows carry."""
    from core.drafters.medusa import MedusaConfig, init_medusa_head, save_medusa_head

    head = init_medusa_head(MedusaConfig(64, 1024, num_heads=3))
    with torch.no_grad():
        for b in head.medusa_head:
            b[0].linear.weight.normal_(0, 0.1)
    save_medusa_head(head, stack["root"] / "medusa", dtype=torch.float32)
    out = tmp_path / "m.json"
    methods = "baseline,medusa,eagle2-head,lookup"
    rc = main(_args(stack, out, "--methods", methods, "--limit", "2", "--head-tree", "8,3,3",
                    "--medusa-head", str(stack["root"] / "medusa")))
    assert rc == 0, capsys.readouterr().err
    res = json.loads(out.read_text())
    assert res["config"]["medusa_head"] == str(stack["root"] / "medusa")
    assert list(res["summary"]) == methods.split(",")
    assert all(r["identical_to_baseline"] for r in res["per_prompt"])
    med = [r for r in res["per_prompt"] if r["method"] == "medusa"]
    assert med and all(r["tau"] >= 1.0 and "depth_accept" in r for r in med)
    assert isinstance(res["summary"]["medusa"]["depth_accept"], list)


def _row(qid, method, tps, cat="qa", new=10, fw=10):
    return {"question_id": qid, "category": cat, "method": method, "new_tokens": new, "seconds": new / tps,
            "tokens_per_s": tps, "target_forwards": fw, "identical_to_baseline": None}


def test_speedup_is_ratio_of_mean_speeds():
    # prompt 1: hf 10 tok/s, eagle 40 (4x); prompt 2: hf 100, eagle 100 (1x)
    rows = [_row(1, "hf", 10.0), _row(1, "eagle2", 40.0, new=20, fw=5),
            _row(2, "hf", 100.0, cat="rag"), _row(2, "eagle2", 100.0, cat="rag", new=10, fw=10)]
    assert spec_bench_speedup(rows, "eagle2", "hf") == pytest.approx(70.0 / 55.0)  # not (4 + 1) / 2 = 2.5
    assert spec_bench_speedup(rows, "eagle2", "hf", category="qa") == pytest.approx(4.0)
    assert pooled_tau(rows, "eagle2") == pytest.approx(30 / 15)  # Σ tokens / Σ forwards, not mean of 4.0 and 1.0
    s = summarize_rows(rows)
    assert s["eagle2"]["speedup_vs_hf"] == pytest.approx(70.0 / 55.0)
    assert s["eagle2"]["speedup_vs_baseline"] is None and s["eagle2"]["mismatches"] is None
    assert s["eagle2"]["per_category"]["rag"]["speedup_vs_hf"] == pytest.approx(1.0)
    assert "1.27x" in summary_table(s) and "| overall | 2 |" in category_table(s)


def test_acceptance_pools_steps_and_conditions_per_depth():
    # 10 verify steps over two prompts: accepted drafts 0 x4, 1 x2, 2 x3, 3 x1
    rows = [{**_row(1, "eagle2-chain", 10.0), "accept_hist": [3, 1, 2, 0], "accepted_drafts": 5, "drafted_tokens": 24},
            {**_row(2, "eagle2-chain", 10.0), "accept_hist": [1, 1, 1, 1], "accepted_drafts": 6, "drafted_tokens": 16}]
    a = summarize_rows(rows)["eagle2-chain"]
    assert a["accept_hist"] == [4, 2, 3, 1] and a["accept_rate"] == pytest.approx(11 / 40)
    assert a["depth_accept"] == pytest.approx([6 / 10, 4 / 10, 1 / 10])  # reached depth 1, 2, 3
    assert a["n_alpha"] == pytest.approx([6 / 10, 4 / 6, 1 / 4])  # depth n+1 given depth n
    table = acceptance_table({"eagle2-chain": a, "hf": {"tau": 1.0}})
    assert "| eagle2-chain | 0.275 | 0.60, 0.40, 0.10 | 0.60, 0.67, 0.25 |" in table and "| hf |" not in table


def test_step_split_weights_prompts_by_their_decode_steps():
    rows = [{**_row(1, "eagle2", 10.0), "step_ms": {"target": 10.0, "draft": 2.0, "other": 1.0, "steps": 3}},
            {**_row(2, "eagle2", 10.0), "step_ms": {"target": 20.0, "draft": 4.0, "other": 3.0, "steps": 1}},
            _row(1, "hf", 10.0, new=10, fw=10), _row(2, "hf", 20.0, new=10, fw=10)]
    s = summarize_rows(rows)
    assert s["eagle2"]["step_ms"] == pytest.approx({"target": 12.5, "draft": 2.5, "other": 1.5, "total": 16.5})
    assert s["hf"]["step_ms"]["total"] == pytest.approx(1e3 * (1.0 + 0.5) / 20)  # wall seconds / forwards
    assert "| eagle2 | 16.5 | 12.5 (76 %) | 2.5 (15 %) | 1.5 (9 %) |" in step_table(s)


def test_pure_helpers():
    assert rotation(("a", "b", "c"), 4) == ("b", "c", "a")
    assert trim_at_eos([5, 1, 7, 1], frozenset({1})) == (5, 1)
    rows = [{"question_id": i, "category": c, "turns": ["x"]} for i, c in
            enumerate(["writing", "math", "qa", "qa", "writing", "rag"])]
    assert [r["question_id"] for r in select_questions(rows, per_category=1)] == [0, 2, 5]
    assert [r["question_id"] for r in select_questions(rows, frozenset({"mt_bench"}))] == [0, 1, 4]
    assert [r["question_id"] for r in select_questions(rows, limit=2)] == [0, 1]
    by_file = select_questions(rows, per_category=1, file_categories=True)  # MT-bench's own categories kept
    assert [(r["question_id"], r["group"]) for r in by_file] == [(0, "writing"), (1, "math"), (2, "qa"), (5, "rag")]


def test_prompt_uses_chat_template_when_present():
    tok = tiny_tokenizer()
    assert encode_prompt(tok, "hello") == tok("hello").input_ids
    tok.chat_template = ("{% for m in messages %}<u>{{ m['content'] }}{% endfor %}"
                         "{% if add_generation_prompt %}<a>{% endif %}")
    assert tok.decode(encode_prompt(tok, "hello")) == "<u>hello<a>"
    assert encode_prompt(tok, "hello", "raw") == tok("hello").input_ids


@pytest.mark.parametrize("extra", [
    ["--questions", "/nonexistent/q.jsonl"],
    ["--methods", "hf,medusa"],  # no Medusa head is shipped for this model and none was given
    ["--methods", "hf,medusa-2"],
    ["--tree", "24,6"],
    ["--temperature", "-1"],
    ["--categories", "poetry"],
    ["--max-new-tokens", "many"],
    ["--methods", "baseline,eagle2-greedy-tree"],  # _args gives a fixed tree: nothing to compare auto's plans with
    ["--repeats", "0"],
])
def test_bad_arguments_exit_with_one_line(stack, tmp_path, capsys, extra):
    args = _args(stack, tmp_path / "x.json", "--methods", "baseline") + extra
    rc = main(args)
    err = capsys.readouterr().err.strip()
    assert rc != 0
    assert len(err.splitlines()) == 1 and err.startswith("core.bench: error:"), err
    assert not (tmp_path / "x.json").exists()


def test_questions_file_from_the_environment(stack, tmp_path, capsys, monkeypatch):
    """EAGLE_QUESTIONS stands in for --questions; with neither, one line says how to give the file."""
    def no_flag(out):  # _args starts with --questions FILE
        return _args(stack, out, "--methods", "baseline", "--limit", "1")[2:]

    monkeypatch.setenv("EAGLE_QUESTIONS", stack["questions"])
    assert main(no_flag(tmp_path / "e.json")) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "e.json").read_text())["config"]["questions"] == stack["questions"]
    monkeypatch.delenv("EAGLE_QUESTIONS")
    capsys.readouterr()
    assert main(no_flag(tmp_path / "f.json")) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "EAGLE_QUESTIONS" in err, err
    assert not (tmp_path / "f.json").exists()


def _outcome(tokens, margins, tops=None):
    from core.bench.runners import Outcome

    return Outcome(tuple(tokens), 1.0, len(tokens), None, tuple(margins), tuple(tops or [20.0] * len(tokens)))


def test_mismatch_rows_carry_a_classified_divergence():
    """Issue 15: a planted near tie (margin 0.125 = one bf16 ulp at 20) is explained, a planted 3-logit margin is
    not; the summary counts both as mismatches and only the second as unexplained."""
    from core.bench.rows import make_row, prompt_rows

    q = {"question_id": 1, "group": "qa"}
    base = _outcome([5, 6, 7, 8], [2.0, 2.0, 0.125, 3.0])
    tie = _outcome([5, 6, 9, 9], [2.0, 2.0, 0.25, 1.0])
    bug = _outcome([5, 6, 7, 1], [2.0, 2.0, 2.0, 3.0])
    rows = prompt_rows(q, {"baseline": base, "eagle2": tie, "hf": bug}, ("hf", "baseline", "eagle2"), True,
                       torch.bfloat16)
    by = {r["method"]: r for r in rows}
    assert "divergence" not in by["baseline"] and by["baseline"]["identical_to_baseline"] is True
    d = by["eagle2"]["divergence"]
    assert d["index"] == 2 and d["baseline_margin"] == 0.125 and d["method_margin"] == 0.25 and d["near_tie"] is True
    d = by["hf"]["divergence"]
    assert d == {"index": 3, "baseline_margin": 3.0, "method_margin": 3.0, "near_tie": False, "tolerance": 2.0}
    assert by["hf"]["first_mismatch"] == 3
    s = summarize_rows(rows)
    assert (s["eagle2"]["mismatches"], s["eagle2"]["unexplained_mismatches"]) == (1, 0)
    assert (s["hf"]["mismatches"], s["hf"]["unexplained_mismatches"]) == (1, 1)
    assert s["baseline"]["unexplained_mismatches"] == 0
    assert "| eagle2 |" in summary_table(s) and "1 (0 unexplained)" in summary_table(s)
    short = make_row(q, "eagle2", _outcome([5, 6], [2.0, 2.0]), base, "bfloat16")  # a prefix: nothing to explain
    assert short["divergence"]["near_tie"] is False and short["divergence"]["index"] == 2


def test_hf_scorer_reads_generate_logits_and_matches_baseline_margins(stack):
    """generate()'s margins (output_logits, second untimed call) sit at the same positions as our baseline's: in
    fp32 they agree per token; a rerun that does not reproduce the tokens gives no margins."""
    from core.bench.peers import hf_generation_config, hf_scorer
    from core.bench.protocol import score_divergences
    from core.bench.stack import load_stack
    from core.engine.config import DecodeConfig

    target, tok, baseline, _, _ = load_stack(stack["model"], stack["head"], "cpu", "fp32")
    ids = encode_prompt(tok, QUESTIONS[0]["turns"][0], "raw")
    cfg = DecodeConfig(max_new_tokens=12)
    events = list(baseline.generate(ids, cfg))
    tokens = tuple(t for e in events for t in e.new_token_ids)
    for pld in (False, True):
        score = hf_scorer(target, hf_generation_config(target, tok, cfg, pld))
        margins, tops = score(ids, tokens[:8])
        assert margins == pytest.approx([m for e in events for m in e.margins][:8], abs=1e-4)
        assert tops == pytest.approx([t for e in events for t in e.top_logits][:8], abs=1e-4)
        assert score(ids, tokens[:3] + (tokens[3] + 1,)) == ([], [])
    base = _outcome(tokens, [m for e in events for m in e.margins])
    other = _outcome(tokens[:5] + (tokens[5] + 1,), [])
    fake = {"hf": lambda i, t: ([0.5] * len(t), [1.0] * len(t))}
    filled = score_divergences({"baseline": base, "hf": other}, ids, fake)
    assert filled["hf"].margins == (0.5,) * 6 and filled["baseline"] is base


def test_repeats_keep_each_methods_fastest_round():
    """--repeats R runs every prompt R times per method (rotating who goes first) and keeps the fastest round."""
    from core.bench.protocol import run_bench
    from core.bench.runners import Outcome

    clock = {"a": iter([3.0, 1.0, 2.0, 5.0]), "b": iter([2.0, 4.0, 1.5, 0.5])}  # warm-up first, then 3 rounds
    calls: list[str] = []

    def runner(m):
        def run(ids, seed):
            calls.append(m)
            return next(clock[m])
        return run, lambda secs, _s: Outcome((1, 2), secs, 2, None, (1.0, 1.0), (9.0, 9.0))

    questions = [{"question_id": 1, "category": "qa", "group": "qa", "turns": ["q"]}]
    rows = run_bench(questions, [[5, 6]], {m: runner(m) for m in "ab"}, ("a", "b"), torch.device("cpu"), 0,
                     compare=False, repeats=3)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warm-up, then rounds starting a, b, a
    assert {r["method"]: r["seconds"] for r in rows} == {"a": 1.0, "b": 0.5}


def test_draft_vocab_reach_counts_output_tokens_the_head_could_draft():
    """A head with a reduced draft vocabulary can never guess a token outside it: rows count the output tokens
    inside it, the summary pools them (Σ inside / Σ tokens, per category too), full-vocabulary methods carry none."""
    from core.bench.rows import make_row, prompt_rows

    mask = torch.zeros(16, dtype=torch.bool)
    mask[[5, 6, 7]] = True
    q1, q2 = {"question_id": 1, "group": "qa"}, {"question_id": 2, "group": "translation"}
    rows = prompt_rows(q1, {"eagle2": _outcome([5, 6, 7, 8], [1.0] * 4), "hf": _outcome([5, 6, 7, 8], [1.0] * 4)},
                       ("hf", "eagle2"), False, vocabs={"eagle2": mask})
    rows += prompt_rows(q2, {"eagle2": _outcome([9, 9, 5, 9], [1.0] * 4), "hf": _outcome([9, 9, 5, 9], [1.0] * 4)},
                        ("hf", "eagle2"), False, vocabs={"eagle2": mask})
    by = {(r["question_id"], r["method"]): r for r in rows}
    assert by[1, "eagle2"]["in_draft_vocab"] == 3 and by[2, "eagle2"]["in_draft_vocab"] == 1
    assert "in_draft_vocab" not in by[1, "hf"]
    s = summarize_rows(rows)
    assert s["eagle2"]["in_draft_vocab"] == pytest.approx(4 / 8) and s["hf"]["in_draft_vocab"] is None
    assert s["eagle2"]["per_category"]["translation"]["in_draft_vocab"] == pytest.approx(0.25)
    table = vocab_table(s)
    assert "| translation | 0.250 |" in table and "| overall | 0.500 |" in table and "hf" not in table
    assert vocab_table(summarize_rows([r for r in rows if r["method"] == "hf"])) == ""
    assert make_row(q1, "eagle2", _outcome([], []), None, vocab=mask)["in_draft_vocab"] == 0


def test_bench_reports_the_reduced_draft_vocabulary(stack, tmp_path, capsys):
    """End to end: a head drafting over the even ids only races a full-vocabulary head; its rows count exactly the
    tokens of its (lossless) output inside that vocabulary, the other head's rows carry none, and the report prints
    the vocabulary table."""
    save_head(init_head(HeadConfig.for_target(64, 1024, 512), torch.arange(0, 1024, 2), seed=1), stack["root"] / "head_even", dtype=torch.float32)
    out = tmp_path / "v.json"
    rc = main(_args(stack, out, "--methods", "baseline,eagle2-head,eagle2-head-b", "--limit", "2",
                    "--head", str(stack["root"] / "head_even"), "--head-b", stack["head"]))
    assert rc == 0, capsys.readouterr().err
    res = json.loads(out.read_text())
    rows = res["per_prompt"]
    assert all(r["identical_to_baseline"] for r in rows)
    assert all("in_draft_vocab" in r for r in rows if r["method"] == "eagle2-head")
    assert not any("in_draft_vocab" in r for r in rows if r["method"] in ("baseline", "eagle2-head-b"))
    assert all(0 <= r["in_draft_vocab"] <= r["new_tokens"] for r in rows if r["method"] == "eagle2-head")
    assert "output tokens in the draft vocabulary" in capsys.readouterr().out


def test_the_bench_modules_stay_small_and_re_export_nothing():
    """No function in core/bench over 60 lines, and every name core/bench/cli.py imports is used there: an importer
    takes a name from the module that defines it."""
    import ast
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "core" / "bench"
    for f in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno - node.lineno < 60, (f.name, node.name)
    tree = ast.parse((folder / "cli.py").read_text(encoding="utf-8"))
    imported = {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names} - {"annotations"}
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert imported - used == set()
