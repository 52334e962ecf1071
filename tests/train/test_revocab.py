"""Re-choosing an EAGLE-1/2 head's draft vocabulary after training (core/train/revocab.py): the new vocabulary is the
tokens the target generated most (the current ids kept with --keep), the weights and what they compute stay as they
were, decoding stays lossless and can now draft the added tokens, and bad requests end as one line."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import PROMPT, run, tiny_head, tiny_target
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, TreeConfig
from core.drafters.draft_head import DRAFT_VOCAB_FILE, load_head, save_head, write_draft_vocab
from core.engine.eagle import Eagle2Decoder
from core.drafters.heads import make_drafter
from core.train import revocab


def _shard(path, seqs: list[tuple[list[int], int]]) -> None:
    """A shard of sequences (ids, how many of the last ids the target generated)."""
    ids = [i for s, _ in seqs for i in s]
    off = [0]
    for s, _ in seqs:
        off.append(off[-1] + len(s))
    save_file({"ids": torch.tensor(ids, dtype=torch.int32), "feat": torch.zeros(len(ids), 4, dtype=torch.bfloat16),
               "offsets": torch.tensor(off), "generated": torch.tensor([g for _, g in seqs])}, str(path))


def test_choose_ranks_generated_tokens_and_breaks_ties_by_all_tokens():
    gen = torch.tensor([0, 5, 3, 3, 0, 1, 0, 0])
    counted = torch.tensor([9, 6, 3, 4, 50, 1, 0, 2])  # prompt tokens count here too: they only break ties
    assert revocab.choose(gen, counted, 3).tolist() == [1, 2, 3]
    assert revocab.choose(gen, counted, 2).tolist() == [1, 3]  # 3 and 2 tie on generated: 3 has more tokens overall
    assert revocab.choose(gen, counted, 4, keep=torch.tensor([6])).tolist() == [1, 2, 3, 6]  # kept ids stay in
    assert revocab.choose(gen, counted, 5).tolist() == [1, 2, 3, 4, 5]  # then never-generated ids by all tokens


def test_revocab_grows_the_vocabulary_keeps_the_weights_and_stays_lossless(tmp_path, capsys):
    tgt = tiny_target("llama")
    old = torch.arange(0, 64)  # the vocabulary the head was trained with
    head_dir, shards, out = tmp_path / "head", tmp_path / "shards", tmp_path / "grown"
    save_head(tiny_head(tgt, old, seed=3), head_dir, dtype=torch.float32)
    (head_dir / "training.json").write_text(json.dumps({"head_type": "eagle", "draft_vocab": {"size": 64}}))
    (head_dir / "NOTICE").write_text("terms")
    shards.mkdir()
    # prompt [100] * 6 is not generated; the target wrote 120 x 4, 121 x 2 and ids of the old vocabulary
    _shard(shards / "shard_00000.safetensors", [([100] * 6 + [120] * 4 + [5], 5), ([121, 121, 7], 3)])
    argv = ["--head", str(head_dir), "--shards", str(shards), "--size", "66", "--keep", "--out", str(out)]
    assert revocab.main(argv) == 0
    grown = load_head(out)
    assert grown.vocab_ids.tolist() == old.tolist() + [120, 121]  # 100 was only ever prompted
    before, after = load_file(str(head_dir / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert {k for k in before if k not in ("d2t", "t2d")} == {k for k in after if k not in ("d2t", "t2d")}
    assert all(torch.equal(before[k], after[k]) for k in before if k not in ("d2t", "t2d"))
    card = json.loads((out / "training.json").read_text())["draft_vocab"]
    assert card["size"] == 66 and card["rechosen"]["previous_size"] == 64 and card["rechosen"]["kept_previous"]
    assert card["rechosen"]["generated_tokens_counted"] == 8
    assert card["rechosen"]["generated_coverage_before"] == round(2 / 8, 4)
    assert card["rechosen"]["generated_coverage_after"] == 1.0
    assert (out / "NOTICE").read_text() == "terms"
    assert json.loads(capsys.readouterr().out)["size"] == 66

    cfg = DecodeConfig(max_new_tokens=40, tree=TreeConfig(12, 4, 4, lookup=0))
    ref, _ = run(BaselineDecoder(tgt), PROMPT, cfg)
    out_ids, events = run(Eagle2Decoder(tgt, make_drafter(grown, tgt)), PROMPT, cfg)
    assert out_ids == ref
    assert {n.token_id for e in events for n in e.tree if n.source == "head"} <= set(grown.vocab_ids.tolist())


def test_revocab_without_keep_replaces_the_vocabulary_in_place(tmp_path):
    tgt = tiny_target("llama")
    head_dir, shards = tmp_path / "head", tmp_path / "shards"
    save_head(tiny_head(tgt, torch.arange(0, 8), seed=1), head_dir, dtype=torch.float32)
    shards.mkdir()
    _shard(shards / "shard_00000.safetensors", [([1, 90, 90, 91, 3, 90, 91, 92], 7)])
    argv = ["--head", str(head_dir), "--shards", str(shards), "--size", "4", "--out", str(head_dir)]
    assert revocab.main(argv) == 0
    assert load_head(head_dir).vocab_ids.tolist() == [3, 90, 91, 92]



def test_a_committed_round_of_token_ids_counts_like_its_shards(tmp_path):
    """A round kept as token ids (data/tokens/MODEL/rN) is counted without rebuilding its features: the same
    counts, all tokens or only the generated ones, as the feature shards it was packed from."""
    from core.train.prune import shard_token_counts
    from core.train.tokens import pack_round

    shards = tmp_path / "shards"
    shards.mkdir()
    _shard(shards / "shard_00000.safetensors", [([100] * 6 + [120] * 4 + [5], 5), ([121, 121, 7], 3)])
    _shard(shards / "shard_00001.safetensors", [([9, 9, 120], 0), ([4, 5, 6, 7], 1)])
    pack_round(shards, tmp_path / "r1", {"seed": 1, "sample_share": 0.5})
    for generated in (False, True):
        want = shard_token_counts([shards], 128, generated=generated)
        assert torch.equal(shard_token_counts([tmp_path / "r1"], 128, generated=generated), want)
    assert shard_token_counts([tmp_path / "r1"], 128, generated=True)[[120, 121, 5, 7]].tolist() == [4, 2, 1, 2]

@pytest.mark.parametrize("case, message", [
    ("small", "--size must be between 64"), ("large", "--size must be between"), ("prefill", "no tokens the target"),
    ("pruned", "inference vocabulary"), ("eagle3", "EAGLE-3"), ("noshards", "no shard_"),
])
def test_revocab_refuses_with_one_line(tmp_path, capsys, case, message):
    tgt = tiny_target("llama")
    head_dir, shards = tmp_path / "head", tmp_path / "shards"
    save_head(tiny_head(tgt, torch.arange(0, 64)), head_dir, dtype=torch.float32)
    shards.mkdir()
    if case != "noshards":
        _shard(shards / "shard_00000.safetensors", [([1, 2, 3], 0 if case == "prefill" else 2)])
    if case == "pruned":
        write_draft_vocab(head_dir, torch.arange(8))
    if case == "eagle3":
        sd = load_file(str(head_dir / "model.safetensors"))
        save_file({"midlayer.x": torch.zeros(1), **sd}, str(head_dir / "model.safetensors"))
    size = {"small": "10", "large": str(tgt.vocab_size + 1)}.get(case, "70")
    argv = ["--head", str(head_dir), "--shards", str(shards), "--size", size, "--keep", "--out", str(tmp_path / "o")]
    assert revocab.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err
    assert not (tmp_path / "o").exists()
