"""The export vLLM reads and the two halves of recipes/vllm.sh's check, without vLLM installed.

Guards: a head trained with `--no-fc-bias --draft-vocab 0` has exactly the weight names and config fields vLLM
0.32's EagleLlamaForCausalLM loads (its loader raises on any other name); a head with fc.bias or d2t/t2d is
reported with the reason; our side of the check decodes losslessly and writes the job scripts/vllm_side.py reads;
the comparison counts identical outputs and turns vLLM's counters into mean accepted length and per-position rates.
"""
from __future__ import annotations

import json
from dataclasses import replace

import torch

from conftest import tiny_model
from core.drafters.draft_head import HeadConfig, init_head, save_head
from core.drafters.eagle3_head import Eagle3Config, init_eagle3_head, save_eagle3_head
from core.drafters.heads import vllm_problems
from core.interop import compare, main as interop_main, per_position
from core.train.__main__ import main as train_main
from test_train import args, setup  # noqa: F401  (the tiny model folder, prompts and questions)

VLLM_EAGLE_NAMES = {"fc.weight"} | {f"layers.0.{k}" for k in (
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", "post_attention_layernorm.weight")}


def weight_names(folder) -> set[str]:
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        return set(f.keys())


def test_a_head_trained_for_vllm_has_exactly_the_names_and_fields_it_loads(setup, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    argv = args(setup, out, 1)
    argv[argv.index("--draft-vocab") + 1] = "0"
    assert train_main(argv + ["--no-fc-bias"]) == 0
    head = out / "head"
    assert weight_names(head) == VLLM_EAGLE_NAMES
    cfg = json.loads((head / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
    assert cfg["bias"] is False and "draft_vocab_size" not in cfg
    assert {"hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "num_hidden_layers", "rms_norm_eps", "rope_theta", "vocab_size"} <= set(cfg)
    assert cfg["num_hidden_layers"] == 1 and cfg["head_dim"] == 64
    assert vllm_problems(head) == []
    assert interop_main(["check", str(head)]) == 0


def test_the_default_export_says_why_vllm_refuses_it(tmp_path):
    c = HeadConfig.for_target(128, 1000, draft_vocab=96)
    save_head(init_head(c, torch.arange(96) * 3), tmp_path / "h")
    problems = vllm_problems(tmp_path / "h")
    assert len(problems) == 2 and problems[0].startswith("fc.bias") and problems[1].startswith("d2t/t2d")
    assert interop_main(["check", str(tmp_path / "h")]) == 1
    save_head(init_head(replace(c, draft_vocab_size=0, bias=False)), tmp_path / "ok")
    assert vllm_problems(tmp_path / "ok") == []
    save_head(init_head(replace(c, draft_vocab_size=0, bias=False, num_layers=2)), tmp_path / "deep")
    assert vllm_problems(tmp_path / "deep") == []  # vLLM builds num_hidden_layers layers (a two-layer head ran there)
    cfg = json.loads((tmp_path / "deep" / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 2
    (tmp_path / "deep" / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 1}))
    assert vllm_problems(tmp_path / "deep") == ["config.json says num_hidden_layers=1, the weights hold 2"]


def test_eagle3_export_names_are_all_known_to_vllms_eagle3_loader(tmp_path):
    c = Eagle3Config(hidden_size=128, intermediate_size=384, num_attention_heads=2, num_key_value_heads=2,
                     vocab_size=1000, draft_vocab_size=96, target_hidden_size=128, head_dim=64)
    save_eagle3_head(init_eagle3_head(c, torch.arange(96) * 3), tmp_path / "e3")
    assert {"d2t", "t2d", "fc.weight", "norm.weight", "lm_head.weight"} <= weight_names(tmp_path / "e3")
    assert vllm_problems(tmp_path / "e3") == []


def test_our_half_decodes_losslessly_and_writes_the_vllm_job(setup, tmp_path):  # noqa: F811
    from core.engine.baseline import BaselineDecoder
    from core.engine.config import DecodeConfig
    from core.models.target import TargetModel

    head = tmp_path / "head"
    save_head(init_head(replace(HeadConfig.for_target(64, 128), bias=False)), head)
    job_file = tmp_path / "ours.json"
    assert interop_main(["ours", "--model", str(setup["model"]), "--head", str(head), "--questions",
                         str(setup["questions.jsonl"]), "--prompts", "2", "--k", "3", "--max-new-tokens", "12",
                         "--out", str(job_file)]) == 0
    job = json.loads(job_file.read_text())
    assert job["k"] == 3 and job["head_kind"] == "eagle" and len(job["prompts"]) == 2
    assert job["max_model_len"] >= max(map(len, job["prompts"])) + 12 + 3
    target = TargetModel(tiny_model("llama").eval())
    for ids, out in zip(job["prompts"], job["outputs"]):  # EOS ignored: always max_new tokens, baseline's tokens
        want = [t for ev in BaselineDecoder(target).generate(ids, DecodeConfig(12, stop_on_eos=False))
                for t in ev.new_token_ids]
        assert out == want and len(out) == 12
    assert all(0 <= a <= 3 for a in job["accepted"])


def test_compare_counts_identical_outputs_and_reads_vllms_counters():
    ours = {"model": "m", "head": "/x/h", "head_name": "h", "k": 3, "outputs": [[1, 2, 3], [4, 5, 6]],
            "margins": [[0.5, 0.5, 0.5], [0.5, 0.01, 0.5]], "accepted": [3, 1, 0, 2]}
    theirs = {"version": "0.32.0", "outputs": [[1, 2, 3], [4, 7, 6]],
              "spec": {"drafts": 4, "draft_tokens": 12, "accepted_tokens": 6, "accepted_per_pos": [3, 2, 1]}}
    r = compare(ours, theirs)
    assert r["identical"] == 1 and r["prompts"] == 2 and r["head"] == "h"
    assert r["vllm_mean_accepted"] == 2.5 and r["our_tau_chain"] == 2.5
    assert r["vllm_per_position"] == [0.75, 0.5, 0.25] and r["our_per_position"] == per_position([3, 1, 0, 2], 3)
    assert r["our_per_position"] == [0.75, 0.5, 0.25]
    assert r["first_differences"] == [{"prompt": 1, "token": 1, "our_margin": 0.01}]


def test_engine_exports_keep_what_the_head_computes(tmp_path):
    """SGLang's EAGLE fc always has a bias (a random one when the file has none), vLLM's never: the same bias-free
    head is written with a zero fc.bias for SGLang and without for vLLM, and both copies draft alike."""
    from core.drafters.draft_head import load_head

    head = init_head(replace(HeadConfig.for_target(64, 128), bias=False), seed=3)
    save_head(head, tmp_path / "h", dtype=torch.float32)
    assert interop_main(["export", str(tmp_path / "h"), str(tmp_path / "sglang"), "--engine", "sglang"]) == 0
    assert interop_main(["export", str(tmp_path / "h"), str(tmp_path / "vllm"), "--engine", "vllm"]) == 0
    assert weight_names(tmp_path / "sglang") == VLLM_EAGLE_NAMES | {"fc.bias"}
    assert json.loads((tmp_path / "sglang" / "config.json").read_text())["bias"] is True
    assert weight_names(tmp_path / "vllm") == VLLM_EAGLE_NAMES and vllm_problems(tmp_path / "vllm") == []
    a, b = load_head(tmp_path / "sglang"), load_head(tmp_path / "vllm")
    assert torch.equal(a.fc.bias, torch.zeros(64))
    x = torch.randn(1, 5, 128)
    pos = torch.arange(5)
    assert torch.allclose(a(x[..., :64], x[..., 64:], pos)[0], b(x[..., :64], x[..., 64:], pos)[0], atol=1e-6)


def test_vllm_export_refuses_what_vllm_cannot_read(tmp_path, capsys):
    save_head(init_head(HeadConfig.for_target(64, 128, 5), torch.tensor([0, 3, 9, 40, 127])), tmp_path / "h")
    assert interop_main(["export", str(tmp_path / "h"), str(tmp_path / "v"), "--engine", "vllm"]) == 2
    err = capsys.readouterr().err
    assert "vLLM cannot read this head: fc.bias" in err and "d2t/t2d" in err and err.count("\n") == 1
