"""One Lane for the app's race and the bench (core/lanes.py): `--lane NAME=HEAD@TREE` races any head at any tree,
and a method name is a shorthand for the lane it describes (same tokens, same tree statistics)."""
from __future__ import annotations

import json

import pytest

from conftest import PROMPT, run, tiny_target
from core.bench.cli import main
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, TreeConfig
from core.lanes import Lane, LaneSpec, build_lane
from core.pipeline import decoder_for
from test_bench import _args, stack  # noqa: F401  (the bench's tiny model folders)


def test_a_lane_spec_reads_name_head_and_tree():
    assert LaneSpec.parse("mine=head@12,5,4,0") == LaneSpec("mine", "head", TreeConfig(12, 5, 4, lookup=0))
    assert LaneSpec.parse("b=/some/head") == LaneSpec("b", "/some/head", None)
    for bad, msg in [("x", "NAME=HEAD"), ("=head", "NAME=HEAD"), ("a=", "NAME=HEAD"),
                     ("a=baseline@4,2,2", "drafts no tree"), ("a=head@1,2", "total_tokens,depth,top_k")]:
        with pytest.raises(ValueError, match=msg):
            LaneSpec.parse(bad)


def test_a_lane_decodes_with_its_own_tree_or_the_runs():
    tgt = tiny_target("llama")
    ref, _ = run(BaselineDecoder(tgt), PROMPT, DecodeConfig(max_new_tokens=30))
    eagle = decoder_for(None, tgt)
    cfg = DecodeConfig(max_new_tokens=30, tree=TreeConfig(8, 3, 2, lookup=4))
    own = Lane("pl", eagle, TreeConfig(1, 1, 1, lookup=10))
    assert own.config(cfg).tree.lookup == 10 and Lane("x", eagle).config(cfg) is cfg
    events = list(own.generate(PROMPT, cfg))
    assert [t for e in events for t in e.new_token_ids] == ref
    lane = build_lane(LaneSpec("pl", "lookup", TreeConfig(1, 1, 1, lookup=10)), tgt, None, None)
    assert lane.decoder.method == "pl" and lane.tree.lookup == 10
    assert build_lane(LaneSpec("b", "baseline"), tgt, "the run's baseline", None).decoder == "the run's baseline"


def test_bench_lanes_match_the_methods_they_spell(stack, tmp_path, capsys):  # noqa: F811
    """`--lane same=head@12,5,4,0` is eagle2-head at --head-tree 12,5,4: the same tokens and tree statistics in the
    same run; a lane over a head folder and a lookup lane race beside them, lossless, and the config records them."""
    out = tmp_path / "l.json"
    rc = main(_args(stack, out, "--methods", "baseline,eagle2-head,lookup", "--head-tree", "12,5,4", "--limit", "2",
                    "--lane", "same=head@12,5,4,0", "--lane", f"folder={stack['head']}@8,3,3",
                    "--lane", "pl=lookup@1,1,1,10"))
    assert rc == 0, capsys.readouterr().err
    res = json.loads(out.read_text())
    assert list(res["summary"]) == ["baseline", "eagle2-head", "lookup", "same", "folder", "pl"]
    assert res["config"]["lanes"]["same"] == {"head": "head", "tree": {**TreeConfig(12, 5, 4, lookup=0).__dict__}}
    assert all(r["identical_to_baseline"] for r in res["per_prompt"])
    rows = {(r["question_id"], r["method"]): r for r in res["per_prompt"]}
    for (qid, m), r in rows.items():
        if m == "same":
            twin = rows[qid, "eagle2-head"]
            assert r["new_tokens"] == twin["new_tokens"] and r["target_forwards"] == twin["target_forwards"]
            assert r["depth_accept"] == twin["depth_accept"] and r["drafted_tokens"] == twin["drafted_tokens"]
        if m == "pl":
            assert r["target_forwards"] == rows[qid, "lookup"]["target_forwards"]
    assert "depth_accept" in res["summary"]["folder"]


@pytest.mark.parametrize("lane,msg", [("eagle2=head", "is a method name"), ("x=/no/such/head", "is not a folder"),
                                      ("x=head@0,1,1", "total_tokens must be between")])
def test_a_bad_lane_is_one_line(stack, tmp_path, capsys, lane, msg):  # noqa: F811
    assert main(_args(stack, tmp_path / "x.json", "--methods", "baseline", "--lane", lane)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and msg in err, err

