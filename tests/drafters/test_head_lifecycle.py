"""Heads own their life cycle (core/drafters/heads.py HEAD_KINDS): every trainable kind starts a fresh head for a
target, saves it in its layout, reads it back as the same kind with the same weights, binds it to a drafter that
decodes losslessly and describes itself; the trainer's main reads all of that from the registry instead of
branching on the kind."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from conftest import PROMPT, run, tiny_target
from core.drafters.heads import HEAD_KINDS, HeadOptions, describe_head, kind_named, kind_of, load_any_head
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, TreeConfig
from core.pipeline import decoder_for

TRAINABLE = ("eagle", "eagle3", "medusa")


@pytest.mark.parametrize("name", TRAINABLE)
def test_a_fresh_head_saves_loads_and_decodes_losslessly(name, tmp_path):
    tgt = tiny_target("llama")
    kind = kind_named(name)
    head = kind.init(tgt, None, HeadOptions(seed=3, medusa_heads=3)).float()
    assert kind_of(head) is kind
    kind.save(head, tmp_path / name, dtype=torch.float32)
    back = load_any_head(tmp_path / name)
    assert kind_of(back).name == name
    mine, theirs = head.state_dict(), back.state_dict()
    assert set(mine) == set(theirs) and all(torch.equal(mine[k].float(), theirs[k].float()) for k in mine)
    ref, _ = run(BaselineDecoder(tgt), PROMPT, DecodeConfig(max_new_tokens=20))
    out, _ = run(decoder_for(back, tgt), PROMPT, DecodeConfig(max_new_tokens=20, tree=TreeConfig(8, 3, 2, lookup=0)))
    assert out == ref
    assert describe_head(back).startswith(kind.label + ", ")


def test_each_kind_states_its_taps_loss_and_card():
    assert kind_named("eagle3").taps(12) == (2, 6, 9) and kind_named("eagle").taps(12) == ()
    assert "{p_weight}" in kind_named("eagle").loss and all(kind_named(n).loss for n in TRAINABLE)
    tgt = tiny_target("llama")
    medusa = kind_named("medusa").init(tgt, None, HeadOptions(medusa_heads=4))
    assert kind_named("medusa").card(medusa) == {"medusa_heads": 4}
    with pytest.raises(ValueError, match="unknown head kind"):
        kind_named("nope")


def test_the_trainer_reads_the_registry_instead_of_branching_on_the_kind():
    """No comparison with a kind's name in core/train/__main__.py main(), and its --head-type choices are the
    registry's trainable kinds."""
    from core.train.__main__ import HEAD_TYPES

    src = (Path(__file__).resolve().parents[2] / "core" / "train" / "__main__.py").read_text()
    main = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "main")
    names = {k.name for k in HEAD_KINDS}
    compared = [ast.unparse(n) for n in ast.walk(main) if isinstance(n, ast.Compare)
                and any(isinstance(c, ast.Constant) and c.value in names for c in [n.left, *n.comparators])]
    keyed = [ast.unparse(n) for n in ast.walk(main) if isinstance(n, ast.Dict)
             and any(isinstance(k, ast.Constant) and k.value in names for k in n.keys)]
    assert compared == [] and keyed == []
    assert HEAD_TYPES == TRAINABLE and set(TRAINABLE) <= names
