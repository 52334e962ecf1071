"""Head weights stored compact (core/drafters/storage.py): int8 matrices with row scales, xz-compressed. A compact
folder loads as every head kind, reads back within the int8 rounding, decodes losslessly, exports the full layout
other engines read, and never leaves a stale file of the other layout beside a new one."""
from __future__ import annotations

import json
import lzma

import pytest
import torch
from safetensors.torch import load_file

from conftest import PROMPT, run, tiny_drafter, tiny_head, tiny_target
from core import interop
from core.drafters import storage
from core.drafters.draft_head import load_head, save_head
from core.drafters.eagle3_head import save_eagle3_head
from core.drafters.heads import kind_of_folder, load_any_head, make_drafter, vllm_problems, weight_names
from core.drafters.medusa import save_medusa_head
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, TreeConfig
from core.engine.eagle import Eagle2Decoder


def test_rows_round_trip_within_half_a_step_and_zero_rows_stay_zero():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(6, 50, generator=g) * torch.tensor([1e-3, 1.0, 30.0, 0.0, 2.0, 5.0])[:, None]
    q, scale = storage.quantize_rows(w, levels=127)
    assert q.dtype == torch.int8 and scale.shape == (6,) and int(q.abs().max()) == 127
    back = storage.dequantize_rows(q, scale, torch.float32)
    assert bool(((back - w).abs() <= scale[:, None] / 2 + 1e-7).all())  # each entry within half its row's step
    assert torch.equal(back[3], torch.zeros(50))  # an all-zero row has scale 1 and reads back as zeros
    assert storage.dequantize_rows(q, scale, torch.bfloat16).dtype == torch.bfloat16
    q63, s63 = storage.quantize_rows(w, levels=63)  # fewer levels: a coarser step, the same bound in its own steps
    nonzero = w.abs().amax(1) > 0
    assert int(q63.abs().max()) == 63 and torch.allclose(s63[nonzero], (scale * 127 / 63)[nonzero])
    assert bool(((storage.dequantize_rows(q63, s63, torch.float32) - w).abs() <= s63[:, None] / 2 + 1e-7).all())
    with pytest.raises(ValueError, match="levels"):
        storage.quantize_rows(w, levels=128)


def test_compact_state_keeps_small_and_integer_tensors_as_they_are():
    sd = {"big": torch.randn(4, 8), "norm": torch.randn(8), "d2t": torch.arange(5), "small": torch.randn(2, 2)}
    c = storage.compact_state(sd, min_entries=32)
    assert set(c) == {"big.q8", "big.q8scale", "norm", "d2t", "small"}
    assert torch.equal(c["norm"], sd["norm"]) and torch.equal(c["d2t"], sd["d2t"])
    back = storage.expand_state(c, torch.float32)
    assert set(back) == set(sd) and torch.equal(back["small"], sd["small"])
    # a matrix 63 levels round too coarsely gets 127; one whose columns differ wildly in scale is kept as it is
    g = torch.Generator().manual_seed(1)
    plain, tailed, extreme = (torch.randn(16, 256, generator=g) for _ in range(3))
    tailed[:, :2] *= 10.0  # two large columns: each row's step grows, its other entries round coarsely
    extreme[:, :2] *= 30.0
    c = storage.compact_state({"plain": plain, "tailed": tailed, "fc": extreme}, min_entries=32)
    for name, w in (("plain", plain), ("tailed", tailed), ("fc", extreme)):
        errors = [storage.rounding_error(w, *storage.quantize_rows(w, n)) for n in (63, 127)]
        if errors[0] <= storage.MAX_ERROR:
            assert int(c[name + ".q8"].abs().max()) == 63
        elif errors[1] <= storage.MAX_ERROR:
            assert int(c[name + ".q8"].abs().max()) == 127
        else:
            assert torch.equal(c[name], w) and name + ".q8" not in c
    assert {k.split(".")[0] for k in c if k.endswith(".q8")} == {"plain", "tailed"} and "fc" in c  # each branch ran
    assert int(c["plain.q8"].abs().max()) == 63 and int(c["tailed.q8"].abs().max()) == 127
    with pytest.raises(ValueError, match="ends like"):
        storage.compact_state({"x.q8": torch.zeros(1)})
    with pytest.raises(ValueError, match="lacks"):
        storage.expand_state({"w.q8": torch.zeros(2, 2, dtype=torch.int8)}, torch.float32)


def test_a_compact_eagle_head_loads_reads_back_within_rounding_and_decodes_losslessly(tmp_path):
    tgt = tiny_target("llama")
    head = tiny_head(tgt, torch.arange(0, 128, 2), seed=4)
    save_head(head, tmp_path, dtype=torch.bfloat16)
    full = load_file(str(tmp_path / storage.FULL))
    names = weight_names(tmp_path)
    record = storage.compact_folder(tmp_path, min_entries=1024)
    assert not (tmp_path / storage.FULL).exists() and (tmp_path / storage.COMPACT).exists()
    assert record["bytes_after"] < 0.75 * record["bytes_before"] and record["dtype"] == "bfloat16"
    assert 0 < record["largest_relative_error"] < 0.04 and record["levels"] == storage.LEVELS == 63
    assert sorted(weight_names(tmp_path)) == sorted(names) and kind_of_folder(tmp_path).name == "eagle"
    back = storage.read_state(tmp_path)
    assert set(back) == set(full) and all(back[k].dtype == full[k].dtype for k in full)
    assert torch.equal(back["d2t"], full["d2t"]) and torch.equal(back["t2d"], full["t2d"])
    big = [k for k, v in full.items() if v.is_floating_point() and v.numel() >= 1024]
    assert big and any(not torch.equal(back[k], full[k]) for k in big)  # the matrices are rounded...
    small = [k for k, v in full.items() if v.is_floating_point() and v.numel() < 1024]
    assert small and all(torch.equal(back[k], full[k]) for k in small)  # ...the norms and biases are not
    loaded = load_head(tmp_path)
    assert torch.equal(loaded.vocab_ids, head.vocab_ids)
    cfg = DecodeConfig(max_new_tokens=40, tree=TreeConfig(12, 4, 4, lookup=0))
    ref, _ = run(BaselineDecoder(tgt), PROMPT, cfg)
    assert run(Eagle2Decoder(tgt, make_drafter(loaded, tgt)), PROMPT, cfg)[0] == ref


@pytest.mark.parametrize("kind", ["eagle3", "medusa"])
def test_compact_eagle3_and_medusa_folders_load_as_their_kind(tmp_path, kind):
    tgt = tiny_target("llama")
    head = tiny_drafter(kind, tgt, seed=2).head
    (save_eagle3_head if kind == "eagle3" else save_medusa_head)(head, tmp_path, dtype=torch.float32)
    names = weight_names(tmp_path)
    storage.compact_folder(tmp_path, min_entries=1024)
    assert sorted(weight_names(tmp_path)) == sorted(names) and kind_of_folder(tmp_path).name == kind
    loaded = load_any_head(tmp_path)
    assert type(loaded) is type(head) and torch.equal(loaded.vocab_ids, head.vocab_ids)
    cfg = DecodeConfig(max_new_tokens=30, tree=TreeConfig(8, 3, 3, lookup=0))
    ref, _ = run(BaselineDecoder(tgt), PROMPT, cfg)
    assert run(Eagle2Decoder(tgt, make_drafter(loaded, tgt)), PROMPT, cfg)[0] == ref


def test_export_writes_the_full_layout_and_a_new_save_replaces_the_compact_file(tmp_path, capsys):
    tgt = tiny_target("llama")
    src, out = tmp_path / "head", tmp_path / "out"
    save_head(tiny_head(tgt, seed=1), src, dtype=torch.bfloat16)
    storage.compact_folder(src, min_entries=1024)
    problems = vllm_problems(src)
    assert problems and "compact" in problems[0] and "core.interop export" in problems[0]
    assert interop.main(["check", str(src)]) == 1
    assert interop.main(["export", str(src), str(out), "--engine", "sglang"]) == 0
    assert (out / storage.FULL).exists() and not (out / storage.COMPACT).exists()
    exported, compact = load_file(str(out / storage.FULL)), storage.read_state(src)
    assert all(torch.equal(exported[k], compact[k]) for k in compact)  # the compact head's values, in bf16
    assert interop.main(["expand", str(src)]) == 0
    assert (src / storage.FULL).exists() and not (src / storage.COMPACT).exists()
    assert interop.main(["expand", str(src)]) == 2  # nothing compact left
    assert "no compact weights" in capsys.readouterr().err
    storage.compact_folder(src, min_entries=1024)
    save_head(load_head(src), src)  # training writes the full layout: the compact file must not outlive it
    assert (src / storage.FULL).exists() and not (src / storage.COMPACT).exists()


def test_unreadable_compact_files_and_empty_folders_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(ValueError, match="neither"):
        storage.read_state(tmp_path)
    (tmp_path / storage.COMPACT).write_bytes(lzma.compress(b"not safetensors"))
    with pytest.raises(ValueError, match="not a compact weights file"):
        storage.read_state(tmp_path)
    (tmp_path / storage.COMPACT).write_bytes(b"not xz at all")
    with pytest.raises(ValueError, match="not a compact weights file"):
        weight_names(tmp_path)
    assert interop.main(["compact", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "error: " in err and "no model.safetensors to make compact" in err and "\n" not in err
