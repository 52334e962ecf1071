"""A head folder's inference vocabulary (draft_vocab.json, core/drafters/draft_head.py) and the command that writes
it (core/train/prune.py): the drafter drafts over the kept ids only, the output stays the baseline's, bad files are
refused with a message, and the command keeps the most frequent ids of the counted shards."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from conftest import PROMPT, run, tiny_head, tiny_target
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, TreeConfig
from core.drafters.draft_head import DRAFT_VOCAB_FILE, load_head, save_head, write_draft_vocab
from core.engine.eagle import Eagle2Decoder
from core.drafters.heads import describe_head, make_drafter
from core.pipeline import read_head
from core.train import prune

TREE = TreeConfig(12, 4, 4, lookup=0)


def _drafted(head, tgt) -> tuple[list[int], set[int]]:
    out, events = run(Eagle2Decoder(tgt, make_drafter(head, tgt)), PROMPT, DecodeConfig(max_new_tokens=40, tree=TREE))
    return out, {n.token_id for e in events for n in e.tree if n.source == "head"}


def test_inference_vocab_drafts_only_its_ids_and_stays_lossless(tmp_path):
    tgt = tiny_target("llama")
    save_head(tiny_head(tgt, seed=3), tmp_path, dtype=torch.float32)  # full vocabulary, as vLLM reads it
    ref, _ = run(BaselineDecoder(tgt), PROMPT, DecodeConfig(max_new_tokens=40))
    full, drafted_full = _drafted(load_head(tmp_path), tgt)
    keep = torch.arange(0, 128, 4)
    assert full == ref and not drafted_full <= set(keep.tolist())  # the control drafts outside the kept ids

    weights = (tmp_path / "model.safetensors").read_bytes()
    write_draft_vocab(tmp_path, keep.flip(0))  # stored sorted whatever the order given
    head = load_head(tmp_path)
    assert torch.equal(head.inference_vocab, keep) and len(head.vocab_ids) == 128  # the weights' vocabulary stays
    out, drafted = _drafted(head, tgt)
    assert out == ref
    assert drafted and drafted <= set(keep.tolist())
    assert "drafts over 32 of its 128-token vocabulary" in describe_head(head)
    assert (tmp_path / "model.safetensors").read_bytes() == weights  # other engines read the same full-vocab head


@pytest.mark.parametrize("body, message", [
    ('{"ids": [1, 2, 2]}', "repeat"),
    ('{"ids": [1, 2, 500]}', "outside the head's own draft vocabulary"),
    ('{"ids": [0.5, 1.0]}', "integer"),
    ('{"ids": [true, false]}', "integer"),
    ('{"ids": []}', "non-empty"),
    ('[1, 2]', "JSON object"),
    ('{"ids": [1, 2', "JSON object"),
])
def test_a_bad_inference_vocab_is_refused(tmp_path, body, message):
    tgt = tiny_target("llama")
    save_head(tiny_head(tgt), tmp_path, dtype=torch.float32)
    (tmp_path / DRAFT_VOCAB_FILE).write_text(body)
    with pytest.raises(ValueError, match=message):
        read_head(tmp_path, tgt)


def test_saving_new_weights_drops_the_old_inference_vocab(tmp_path):
    tgt = tiny_target("llama")
    save_head(tiny_head(tgt), tmp_path, dtype=torch.float32)
    write_draft_vocab(tmp_path, torch.arange(8))
    assert load_head(tmp_path).inference_vocab is not None
    assert load_head(tmp_path, inference_vocab=False).inference_vocab is None  # the head as trained
    save_head(tiny_head(tgt, seed=1), tmp_path, dtype=torch.float32)  # e.g. a retrained head into the same folder
    assert not (tmp_path / DRAFT_VOCAB_FILE).exists() and load_head(tmp_path).inference_vocab is None


def test_inference_vocab_must_lie_inside_a_reduced_vocabulary(tmp_path):
    tgt = tiny_target("llama")
    save_head(tiny_head(tgt, torch.arange(0, 128, 2)), tmp_path, dtype=torch.float32)
    write_draft_vocab(tmp_path, torch.tensor([0, 2, 3]))  # 3 is not in the head's even-id vocabulary
    with pytest.raises(ValueError, match="outside"):
        load_head(tmp_path)
    write_draft_vocab(tmp_path, torch.tensor([0, 2, 4]))
    assert load_head(tmp_path).inference_vocab.tolist() == [0, 2, 4]


def _shard(path, ids: list[int]) -> None:
    t = torch.tensor(ids, dtype=torch.int32)
    save_file({"ids": t, "feat": torch.zeros(len(ids), 4, dtype=torch.bfloat16),
               "offsets": torch.tensor([0, len(ids)]), "generated": torch.tensor([len(ids)])}, str(path))


def test_prune_keeps_the_most_frequent_ids_and_notes_the_card(tmp_path, capsys):
    tgt = tiny_target("llama")
    head_dir, shards = tmp_path / "head", tmp_path / "shards"
    save_head(tiny_head(tgt), head_dir, dtype=torch.float32)
    (head_dir / "training.json").write_text(json.dumps({"head_type": "eagle"}))
    shards.mkdir()
    _shard(shards / "shard_00000.safetensors", [7] * 5 + [3] * 4 + [9] * 2)
    _shard(shards / "shard_00001.safetensors", [3] * 2 + [100] * 3 + [9])  # 3: 6, 7: 5, 100: 3, 9: 3 (tie)
    assert prune.main(["--head", str(head_dir), "--shards", str(shards), "--size", "3"]) == 0
    written = json.loads((head_dir / DRAFT_VOCAB_FILE).read_text())
    assert written["ids"] == [3, 7, 9] and written["size"] == 3  # the tie between 9 and 100 goes to the lower id
    card = json.loads((head_dir / "training.json").read_text())["inference_vocab"]
    assert card["size"] == 3 and card["of"] == 128 and card["counted_tokens"] == 17
    assert card["token_coverage"] == round(14 / 17, 4)
    assert json.loads(capsys.readouterr().out)["size"] == 3
    write_draft_vocab(head_dir, torch.tensor([50]))  # a stale file does not stop a rerun: it is replaced
    assert prune.main(["--head", str(head_dir), "--shards", str(shards), "--size", "2"]) == 0
    assert json.loads((head_dir / DRAFT_VOCAB_FILE).read_text())["ids"] == [3, 7]


@pytest.mark.parametrize("size, message", [("128", "--size must be between 1 and 127"), ("0", "--size")])
def test_prune_refuses_a_size_it_cannot_keep(tmp_path, capsys, size, message):
    tgt = tiny_target("llama")
    save_head(tiny_head(tgt), tmp_path / "head", dtype=torch.float32)
    (tmp_path / "shards").mkdir()
    _shard(tmp_path / "shards" / "shard_00000.safetensors", [1, 2, 3])
    assert prune.main(["--head", str(tmp_path / "head"), "--shards", str(tmp_path / "shards"), "--size", size]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err
    assert not (tmp_path / "head" / DRAFT_VOCAB_FILE).exists()


@pytest.mark.parametrize("content, message", [
    ([1, 2, 4000], "another model's data"), (None, "no shard_"), (b"not a shard", "error: "),
])
def test_prune_refuses_shards_it_cannot_count(tmp_path, capsys, content, message):
    tgt = tiny_target("llama")
    save_head(tiny_head(tgt), tmp_path / "head", dtype=torch.float32)
    (tmp_path / "shards").mkdir()
    if isinstance(content, list):
        _shard(tmp_path / "shards" / "shard_00000.safetensors", content)
    elif content is not None:
        (tmp_path / "shards" / "shard_00000.safetensors").write_bytes(content)  # corrupt
    assert prune.main(["--head", str(tmp_path / "head"), "--shards", str(tmp_path / "shards"), "--size", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.startswith("error: ") and "\n" not in err
    assert not (tmp_path / "head" / DRAFT_VOCAB_FILE).exists()
