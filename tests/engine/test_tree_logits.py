"""Verify rows on demand (core/engine/tree_logits.py): a walk reads the same logits as an all-rows product, in at most two
products and never more than N rows; the decoders' output does not depend on it; start-up timing turns it on only
where one LM-head row costs much less than a batch."""
from __future__ import annotations

import copy

import pytest
import torch

from conftest import KINDS, OracleDrafter, PROMPT, load_script, run, tiny_head, tiny_model
from core.models import kernels
from core.engine import tree
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, SamplingConfig, TreeConfig
from core.engine.eagle import Eagle2Decoder
from core.models.target import TargetModel
from core.engine.tree_logits import TreeLogits, subtree
from core.engine.verify import accept_greedy

PARENTS = [-1, 0, 0, 1, 1, 2, 3, 3, 6]  # root; 1, 2; 3, 4 under 1; 5 under 2; 6, 7 under 3; 8 under 6


def test_subtree_is_the_node_and_its_descendants_depth_first():
    kids = tree.children(PARENTS)
    assert subtree(kids, 0) == [0, 1, 3, 6, 8, 7, 4, 2, 5]
    assert subtree(kids, 1) == [1, 3, 6, 8, 7, 4]
    assert subtree(kids, 5) == [5]


class CountingHead:
    """A head of small integers in float64 (sums exact, so any row grouping gives identical values) that records
    each product's rows."""

    def __init__(self, vocab: int = 11, hidden: int = 5):
        self.w = torch.randint(-9, 10, (vocab, hidden), generator=torch.Generator().manual_seed(0)).double()
        self.calls: list[int] = []

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        self.calls.append(1 if h.dim() == 1 else len(h))
        return h @ self.w.T


@pytest.mark.parametrize("lazy", [True, False])
def test_rows_are_the_full_products_rows_and_lazy_runs_at_most_two_products(lazy):
    head = CountingHead()
    hidden = torch.randint(-9, 10, (len(PARENTS), 5), generator=torch.Generator().manual_seed(1)).double()
    rows = TreeLogits(head, hidden, tree.children(PARENTS), lazy)
    full = hidden @ head.w.T
    for n in (0, 1, 3, 6, 8, 4):  # a walk down node 1's subtree, then a sibling inside it
        assert torch.equal(rows[n], full[n])
    if lazy:
        assert head.calls == [1, 6] and rows.products == 2  # the root alone, then node 1's subtree (6 nodes)
        assert 2 not in rows.rows and 5 not in rows.rows  # the rejected branch is never computed
        assert rows.ms > 0
    else:
        assert head.calls == [len(PARENTS)] and rows.products == 1 and rows.ms == 0.0


def test_a_walk_that_stops_at_the_root_computes_one_row():
    head = CountingHead()
    hidden = torch.randint(-9, 10, (len(PARENTS), 5), generator=torch.Generator().manual_seed(2)).double()
    rows = TreeLogits(head, hidden, tree.children(PARENTS), lazy=True)
    want = int((hidden[0] @ head.w.T).argmax())
    tokens = [0] + [(want + 1) % 11] * (len(PARENTS) - 1)  # no child is the target's token: nothing accepted
    path, bonus = accept_greedy(tree.children(PARENTS), tokens, lambda n: int(rows[n].argmax()))
    assert path == [0] and bonus == want and head.calls == [1]


@pytest.mark.parametrize("times,lazy", [({1: 40.0, 8: 100.0}, True), ({1: 17.0, 8: 18.0}, False),
                                        ({1: 50.0, 8: 100.0}, False)])  # AVX2 fp32 oneDNN; AMX bf16; the edge
@pytest.mark.timed  # tests start-up timing: no pinned path (tests/conftest.py)
def test_lazy_rows_only_where_one_row_costs_under_half_of_eight(monkeypatch, times, lazy):
    assert kernels.rows_are_cheap(times) is lazy
    # linear() is fastest at both row counts; its own 1-row against 8-row cost decides laziness
    monkeypatch.setattr(kernels, "time_head_kernels",
                        lambda w, rounds=5, packed=None: {k: (dict(times) if k == "linear" else {1: 999.0, 8: 999.0})
                                             for k in kernels.head_candidates(w)})
    tgt = TargetModel(copy.deepcopy(tiny_model("llama")), name="fp32").accelerate()
    assert tgt.head_kernel == "linear" and tgt.lazy_rows is lazy


def lazy_target(kind: str, kernel: str) -> TargetModel:
    tgt = TargetModel(copy.deepcopy(tiny_model(kind)), name=f"tiny-{kind}")
    tgt.eos_ids, tgt.head_kernel, tgt.lazy_rows = frozenset(), kernel, True
    return tgt


@pytest.mark.parametrize("kernel", ["linear", "onednn"])
@pytest.mark.parametrize("kind", KINDS)
def test_fp32_greedy_eagle2_with_lazy_rows_equals_baseline(kind, kernel):
    """Long accepted chunks (oracle drafts) through rows on demand: the baseline's tokens, token for token, and the
    step's verify time includes the rows the walk computed."""
    tgt = lazy_target(kind, kernel)
    cfg = DecodeConfig(max_new_tokens=48, tree=TreeConfig(total_tokens=12, depth=4, top_k=3, lookup=4))
    ref, _ = run(BaselineDecoder(tgt), PROMPT, cfg)
    out, events = run(Eagle2Decoder(tgt, OracleDrafter(tiny_head(tgt), tgt, PROMPT + ref, seed=2)), PROMPT, cfg)
    assert max(len(e.new_token_ids) for e in events) >= 3
    assert out == ref
    assert all(e.verify_ms > 0 and e.step_ms >= e.verify_ms + e.draft_ms for e in events[1:])


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_sampled_eagle2_gives_the_same_tokens_with_rows_on_demand(kind):
    """The same seed, lazy rows or all rows: the same sampled tokens (the rows hold the same values)."""
    cfg = DecodeConfig(max_new_tokens=40, sampling=SamplingConfig(temperature=1.0, seed=5),
                       tree=TreeConfig(total_tokens=10, depth=3, top_k=3, lookup=0))
    outs = []
    for lazy in (True, False):
        tgt = lazy_target(kind, "linear")
        tgt.lazy_rows = lazy
        ref, _ = run(BaselineDecoder(tgt), PROMPT, DecodeConfig(max_new_tokens=40))
        out, _ = run(Eagle2Decoder(tgt, OracleDrafter(tiny_head(tgt), tgt, PROMPT + ref, seed=2)), PROMPT, cfg)
        outs.append(out)
    assert outs[0] == outs[1] and len(outs[0]) == 40


def test_the_draft_profile_script_reports_a_step_split(tmp_path, capsys):
    """scripts/probes/profile_draft.py (README, "Faster drafting") on a tiny saved model and head: the per-step split it
    prints adds up to the step, and a file with too few rows is one line and exit status 2."""
    import json

    from core.drafters.draft_head import HeadConfig, init_head, save_head
    from test_generate_cli import word_tokenizer

    tiny_model("llama").save_pretrained(tmp_path / "m")
    word_tokenizer().save_pretrained(tmp_path / "m")
    save_head(init_head(HeadConfig.for_target(64, 128), seed=2), tmp_path / "h", dtype=torch.float32)
    q = tmp_path / "q.jsonl"
    q.write_text("".join(json.dumps({"turns": [f"the cat sat on the mat {i}"]}) + "\n" for i in range(4)))
    script = load_script("probes/profile_draft")
    common = ["--model", str(tmp_path / "m"), "--head", str(tmp_path / "h"), "--dtype", "fp32", "--questions", str(q)]
    assert script.main([*common, "--prompts", "2", "--max-new-tokens", "12", "--tree", "6,3,2,0", "--ops"]) == 0
    out = capsys.readouterr().out
    split = out.splitlines()[1]
    fields = split.removeprefix("per step: ").split(", ")[:4]  # "draft 1.23 ms", "verify ...", "other ...", "step ..."
    parts = {k: float(v.split()[0]) for k, v in (f.split(" ", 1) for f in fields)}
    assert parts["step"] == pytest.approx(parts["draft"] + parts["verify"] + parts["other"], abs=0.02)
    assert parts["draft"] > 0 and "Self CPU" in out  # the head ran; the op table printed
    assert script.main([*common, "--prompts", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and err.endswith("--prompts 3 needs 5") and len(err.splitlines()) == 1
    assert script.main([*common, "--prompts", "1", "--max-new-tokens", "8", "--tree", "4,1,4,0",
                        "--temperature", "1", "--seed", "3"]) == 0  # sampled decoding profiles the same way
    assert " T=1: " in capsys.readouterr().out
    assert script.main([*common, "--prompts", "1", "--max-new-tokens", "8", "--tree", "6,3,2,0,0.05"]) == 0
    assert "tree 6,3,2,0,0.05" in capsys.readouterr().out  # dynamic depth's fifth field
    assert script.main([*common, "--temperature", "-1"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: temperature")
