"""A round's token ids, packed to commit and rebuilt into feature shards (core/train/tokens.py).

Guards: pack/unpack is exact; packing a real data run keeps every sequence, its generated count and the sampling
flag the run drew; rebuilding gives shards with the same ids and the features a teacher-forced forward computes,
close to the ones generation stored; a rebuilt folder trains with --extra-shards; bad input exits 2 with one line.
"""
from __future__ import annotations

import json
import random

import torch
from safetensors.torch import load_file

from core.models.target import TargetModel
from core.train.__main__ import main as train_main
from core.train.tokens import CARD, PACKED, main, pack, pack_round, rebuild, unpack
from test_train import args, training_files
from conftest import tiny_model


def test_pack_unpack_is_exact():
    seqs = [[1, 2, 3], [151_000, 7], list(range(40))]
    assert unpack(pack(seqs, [1, 0, 30], [True, False, True], [0, 0, 4])) == (seqs, [1, 0, 30], [True, False, True],
                                                                                [0, 0, 4])


def test_pack_round_and_rebuild_reproduce_the_run(tmp_path):
    files = training_files(tmp_path / "files")
    run = tmp_path / "run"
    assert train_main(args(files, run, 1) + ["--data-only", "--sample-share", "0.5", "--seed", "3"]) == 0
    shards = sorted((run / "shards").glob("shard_*.safetensors"))
    stored = [load_file(str(p)) for p in shards]

    card = pack_round(run / "shards", tmp_path / "packed", {"model": str(files["model"]), "seed": 3,
                                                              "sample_share": 0.5})
    assert (tmp_path / "packed" / PACKED).exists() and json.loads((tmp_path / "packed" / CARD).read_text()) == card
    seqs, gen, sampled, _ = unpack((tmp_path / "packed" / PACKED).read_bytes())
    want = [d["ids"][a:b].tolist() for d in stored for a, b in zip(d["offsets"][:-1], d["offsets"][1:])]
    assert seqs == want and card["tokens"] == sum(map(len, want))
    assert gen == [g for d in stored for g in d["generated"].tolist()]
    draws = {int(p.stem.split("_")[1]): random.Random(3 + int(p.stem.split("_")[1])).random() < 0.5 for p in shards}
    assert sampled == [draws[int(p.stem.split("_")[1])] and bool(d["generated"].sum())
                       for p, d in zip(shards, stored) for _ in d["generated"]]

    target = TargetModel(tiny_model("llama").eval())  # the same seed-0 weights the run generated with, in fp32
    stats = rebuild(tmp_path / "packed", tmp_path / "rebuilt", target)
    assert stats["sequences"] == len(want) and stats["tokens_rebuilt"] == card["tokens"]
    rebuilt = sorted((tmp_path / "rebuilt").glob("shard_*.safetensors"))
    assert [p.name for p in rebuilt] == [p.name for p in shards]  # the run resumes over the rebuilt folder
    again = [load_file(str(p)) for p in rebuilt]
    for a, b in zip(again, stored):
        assert torch.equal(a["ids"], b["ids"]) and torch.equal(a["offsets"], b["offsets"])
    assert torch.equal(torch.cat([d["ids"] for d in again]), torch.cat([d["ids"] for d in stored]))
    assert torch.equal(torch.cat([d["generated"] for d in again]), torch.cat([d["generated"] for d in stored]))
    old, new = torch.cat([d["feat"] for d in stored]).float(), torch.cat([d["feat"] for d in again]).float()
    assert old.shape == new.shape and torch.allclose(old, new, atol=0.05, rtol=0.02)  # bf16 storage rounding
    assert rebuild(tmp_path / "packed", tmp_path / "rebuilt", target)["tokens_rebuilt"] == 0  # resumes: all there

    again_run = tmp_path / "again"  # the round's own command over the rebuilt shards writes no shard again
    (again_run).mkdir()
    (tmp_path / "rebuilt").rename(again_run / "shards")
    assert train_main(args(files, again_run, 1) + ["--data-only", "--sample-share", "0.5", "--seed", "3"]) == 0
    assert sorted(p.name for p in (again_run / "shards").iterdir()) == [p.name for p in shards]
    assert '"generated": 0, "seconds": 0.0' in (again_run / "train.log").read_text()

    out = tmp_path / "trained"
    assert train_main(args(files, out, 1) + ["--skip-data", "--extra-shards", str(again_run / "shards")]) == 0
    assert json.loads((out / "head" / "training.json").read_text())["data"]["sequences"] == len(want)


def test_rebuild_first_shards_with_eagle3_taps(tmp_path):
    """--shards N rebuilds a prefix of the round; --head-type eagle3 stores the layer taps of the same forward,
    which EAGLE-3 training reads (load_shards(taps=True)) beside the EAGLE-1/2 feature."""
    from core.drafters.heads import kind_named
    from core.train.generation import features
    from core.train.shards import load_shards

    files = training_files(tmp_path / "files")
    run = tmp_path / "run"
    assert train_main(args(files, run, 1) + ["--data-only", "--seed", "3"]) == 0
    assert len(list((run / "shards").glob("shard_*.safetensors"))) >= 2
    pack_round(run / "shards", tmp_path / "packed", {"model": str(files["model"]), "seed": 3, "sample_share": 0.0})
    target = TargetModel(tiny_model("llama").eval())
    taps = kind_named("eagle3").taps(target.num_layers)
    stats = rebuild(tmp_path / "packed", tmp_path / "rebuilt", target, taps, limit=1)
    rebuilt = sorted((tmp_path / "rebuilt").glob("shard_*.safetensors"))
    assert [p.name for p in rebuilt] == ["shard_00000.safetensors"]
    first = load_file(str(run / "shards" / "shard_00000.safetensors"))
    assert stats["tokens_rebuilt"] == first["ids"].numel()
    seqs = load_shards(tmp_path / "rebuilt", taps=True)
    ids = [s[0].tolist() for s in seqs]
    want = features(target, ids, taps)
    for (_, feat, tp, _), (_, f2, t2) in zip(seqs, want):
        assert tp.shape == (feat.shape[0], 3 * target.hidden_size)
        assert torch.equal(tp, t2) and torch.equal(feat, f2)


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "s.json").write_text(json.dumps({"seed": 1, "sample_share": 0.3}))
    assert main(["pack", str(tmp_path / "none"), str(tmp_path / "o"), "--settings", str(tmp_path / "s.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no shard_" in err
    (tmp_path / "s2.json").write_text("{}")
    assert main(["pack", str(tmp_path), str(tmp_path / "o"), "--settings", str(tmp_path / "s2.json")]) == 2
    assert "'seed'" in capsys.readouterr().err
