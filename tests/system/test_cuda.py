"""GPU checks (`python -m pytest -m cuda`; deselected by default, skipped without CUDA): greedy and sampled decoding
on a CUDA target, seeded sampling that gives the same tokens on CPU and CUDA, the app's handler on a GPU, bf16
divergences only at near ties, EAGLE-3, Medusa and lookup drafters, and the real model with its shipped head past
its sliding window.

Tiny random models are deep-copied from the cached CPU fixtures and moved to the GPU (fp32), so nothing is
downloaded. scripts/gpu_check.sh runs them on a machine that has a GPU (README, Hardening, says which have run on one).
"""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from conftest import PROMPT, run, tiny_head, tiny_model, tiny_target
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, SamplingConfig, TreeConfig
from core.drafters.eagle import EagleDrafter
from core.engine.eagle import Eagle2Decoder
from core.models.target import TargetModel

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def on(device: str, kind: str = "llama", vocab: int = 128, seed: int = 0) -> tuple[BaselineDecoder, Eagle2Decoder]:
    """Baseline and EAGLE-2 decoders over the same tiny model and untrained head, placed on `device`."""
    if device == "cpu":
        tgt = tiny_target(kind, vocab, seed)
    else:
        tgt = TargetModel(copy.deepcopy(tiny_model(kind, vocab, seed)).to(device), name=f"tiny-{kind}")
        tgt.eos_ids = frozenset()
    head = tiny_head(tiny_target(kind, vocab, seed), seed=seed)
    return BaselineDecoder(tgt), Eagle2Decoder(tgt, EagleDrafter(head, tgt))


@pytest.mark.parametrize("kind", ["llama", "gemma3", "mistral"])
@pytest.mark.parametrize("tree", [TreeConfig(16, 6, 6), TreeConfig(8, 3, 2, 0), TreeConfig(1, 1, 1, 0)])
def test_greedy_eagle2_equals_baseline_on_cuda(kind, tree):
    base, eagle = on("cuda", kind)
    cfg = DecodeConfig(max_new_tokens=96, tree=tree)
    want, _ = run(base, PROMPT, cfg)
    got, events = run(eagle, PROMPT, cfg)
    assert got == want and len(got) == 96
    assert all(e.step_ms > 0 for e in events)


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_greedy_cuda_equals_cpu(kind):
    cfg = DecodeConfig(max_new_tokens=48)
    assert run(on("cuda", kind)[0], PROMPT, cfg)[0] == run(on("cpu", kind)[0], PROMPT, cfg)[0]


SAMPLED = [SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.7, top_p=0.9)]


@pytest.mark.parametrize("sampling", SAMPLED, ids=["T1", "T0.7-p0.9"])
def test_seeded_sampling_gives_the_same_tokens_on_cpu_and_cuda(sampling):
    """Uniforms come from the CPU generator and the inverse CDF runs in float64 on the host, so a seed picks the same
    tokens on both devices (up to probabilities that differ in the last float bits, which these seeds do not hit)."""
    cpu, cuda = on("cpu"), on("cuda")
    for seed in range(8):
        cfg = DecodeConfig(max_new_tokens=24, sampling=dataclasses.replace(sampling, seed=seed))
        for c, g in zip(cpu, cuda):
            assert run(g, PROMPT, cfg)[0] == run(c, PROMPT, cfg)[0], (c.method, seed)


def test_sampled_eagle2_on_cuda_matches_the_target_distribution():
    """The chi-square check of tests/engine/test_sampling.py on a CUDA target (fewer runs: a smoke-size test)."""
    import test_sampling as ts

    tgt_cpu = ts.target()
    tgt = TargetModel(copy.deepcopy(tgt_cpu.model).to("cuda"), name="tiny-llama")
    tgt.eos_ids = frozenset()
    head = tiny_head(tgt_cpu, vocab_ids=ts.likely_tokens("T1", 5), seed=3)
    dec = Eagle2Decoder(tgt, EagleDrafter(head, tgt))
    samples, accepted = ts.draw(dec, "T1", 800, TreeConfig(12, 2, 5))
    assert accepted > 400
    ts.check_matches(samples, "T1")


def test_app_handler_on_cuda():
    """Playground.run and the streaming handler on a GPU target: greedy identical, sampled complete and seeded."""
    from app.handlers import OUTPUTS, Playground
    from fakes import tiny_tokenizer

    tok = tiny_tokenizer()
    base, eagle = on("cuda", vocab=len(tok))
    pg = Playground(tok, base, eagle)
    out = pg.run("Once upon a time", 32)
    assert out["identical"] is True and len(out["eagle_token_ids"]) == 32
    s1 = pg.run("Once upon a time", 16, temperature=0.8, top_p=0.9, seed=5)
    s2 = pg.run("Once upon a time", 16, temperature=0.8, top_p=0.9, seed=5)
    assert s1["greedy"] is False and s1["eagle_token_ids"] == s2["eagle_token_ids"]
    assert len(s1["baseline_token_ids"]) == 16
    views = list(pg.stream("Once upon a time", 16, 0.0, 1.0, 0, 16, 6, 6, 10))
    assert "token-identical" in views[-1][OUTPUTS.index("stats")]


def test_offloaded_growing_cache_moves_its_buffers():
    """transformers' layer offloading moves `keys` / `values` to the CPU and back; a growing layer moves its buffers
    with them, so the views stay on the buffers and the next append lands where attention reads it."""
    from core.engine import kv_cache

    tgt = TargetModel(copy.deepcopy(tiny_model("llama")).to("cuda"), name="tiny-llama")
    cache = tgt.new_cache()
    tgt.forward(torch.tensor([PROMPT[:9]], device="cuda"), cache)
    for layer in cache.layers:
        layer.offload()
        assert layer._k.device.type == "cpu" and layer.keys.data_ptr() == layer._k.data_ptr()
        layer.prefetch()
        assert layer._k.device.type == "cuda" and layer.keys.data_ptr() == layer._k.data_ptr()
    h, _ = tgt.forward(torch.tensor([PROMPT[9:12]], device="cuda"), cache)
    h_ref, _ = tgt.forward(torch.tensor([PROMPT[:12]], device="cuda"), tgt.new_cache())
    torch.testing.assert_close(h[0], h_ref[0, 9:12], rtol=1e-4, atol=1e-4)
    kv_cache.free(cache)


def test_head_training_runs_on_cuda_and_the_head_decodes_losslessly_on_cpu(tmp_path):
    """core.train end to end on a GPU (self-distilled shards, fit, export, evaluation): shards stay on the CPU and
    each batch moves to the device; the exported head then decodes on a CPU target exactly like the baseline."""
    import json

    from test_train import args, training_files
    from core.drafters.draft_head import load_head
    from core.train.__main__ import main

    s = training_files(tmp_path / "files")
    out = tmp_path / "run"
    assert main(args(s, out, 2)) == 0
    card = json.loads((out / "head" / "training.json").read_text())
    assert card["hardware"]["device"].startswith("cuda")
    assert card["training"]["final"]["loss"] < card["training"]["first"]["loss"]
    head = load_head(out / "head")
    target = tiny_target("llama")
    cfg = DecodeConfig(48, tree=TreeConfig(8, 4, 3))
    assert run(Eagle2Decoder(target, EagleDrafter(head, target)), PROMPT, cfg)[0] == \
        run(BaselineDecoder(target), PROMPT, cfg)[0]


def test_training_attention_gives_finite_query_gradients_where_cudnn_gives_nan():
    """The masked case of pytorch/pytorch#196678 (length 64 mod 128, every row's log-sum-exp below ln(FLT_MAX)):
    through core.train.fit.training_attention, which every training step uses, grad_q stays finite."""
    import math

    import torch.nn.functional as F

    from core.train.fit import training_attention

    n, d = 704, 64
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(1, 1, n, d, device="cuda", dtype=torch.bfloat16, generator=g) * 0.1
    k = torch.randn(1, 1, n, d, device="cuda", dtype=torch.bfloat16, generator=g) * 0.1
    v = torch.randn(1, 1, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
    q[..., 0], k[..., 0] = 1.0, -120 * math.sqrt(d)  # every score near -120
    q.requires_grad_()
    mask = torch.ones(n, n, dtype=torch.bool, device="cuda").tril()[None, None]
    with training_attention(torch.device("cuda")):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out.backward(torch.randn(out.shape, device="cuda", dtype=out.dtype, generator=g))
    assert torch.isfinite(q.grad).all()


# ------------------------------------------------------------------------------------------ bf16, every drafter, the real model


def test_bf16_greedy_eagle2_on_cuda_diverges_only_at_near_ties():
    """bf16, the GPU default: where EAGLE-2's output parts from plain decoding's, both runs' margins together fit
    inside the rounding change of a logit difference (core/engine/exactness.py); prompts that never diverge count too."""
    from core.engine.exactness import divergence_of

    for kind in ("llama", "gemma3"):
        tgt = TargetModel(copy.deepcopy(tiny_model(kind)).to("cuda", torch.bfloat16), name=f"tiny-{kind}")
        tgt.eos_ids = frozenset()
        dec = Eagle2Decoder(tgt, EagleDrafter(tiny_head(tiny_target(kind)), tgt))
        for tree in (TreeConfig(16, 6, 6), TreeConfig(8, 3, 2, 0)):
            cfg = DecodeConfig(max_new_tokens=64, tree=tree)
            _, base = run(BaselineDecoder(tgt), PROMPT, cfg)
            _, eagle = run(dec, PROMPT, cfg)
            d = divergence_of(base, eagle, torch.bfloat16)
            assert d is None or d.near_tie, (kind, tree, d)


@pytest.mark.parametrize("kind", ["eagle3", "medusa", "lookup"])
def test_every_drafter_is_lossless_on_cuda(kind):
    """fp32 greedy on CUDA: EAGLE-3 (fused taps), Medusa (token-level) and context lookup alone equal plain
    decoding token for token, as EAGLE-1/2 does above."""
    from conftest import tiny_drafter

    tgt = TargetModel(copy.deepcopy(tiny_model("llama")).to("cuda"), name="tiny-llama")
    tgt.eos_ids = frozenset()
    drafter = tiny_drafter(kind, tgt)
    cfg = DecodeConfig(max_new_tokens=96, tree=TreeConfig(12, 4, 3, lookup=8))
    want, _ = run(BaselineDecoder(tgt), PROMPT * 2, cfg)
    got, events = run(Eagle2Decoder(tgt, drafter), PROMPT * 2, cfg)
    assert got == want and all(e.step_ms > 0 for e in events)
    if kind == "lookup":  # the prompt repeats: copies are drafted and accepted on the GPU too
        assert sum(e.accepted_lookup for e in events) > 0


@pytest.mark.real_model
def test_real_model_with_its_shipped_head_past_the_sliding_window_on_cuda():
    """The packaged Gemma 3 270M (sliding window 512) with its shipped head, fp32 on CUDA: a prompt of ~500 tokens
    and 96 new ones, so verify trees and the KV cache run past the window; EAGLE-2 equals plain decoding."""
    from core import pipeline

    target, tok, base, eagle = pipeline.build_decoders(None, None, "cuda", "fp32")
    assert target.sliding_window == 512 and eagle.drafter.trained
    text = " ".join(f"Step {i}: stir the dough and let it rest." for i in range(60))
    ids = tok(text).input_ids[:500]
    cfg = DecodeConfig(max_new_tokens=96, tree=TreeConfig(16, 6, 8))
    want, _ = run(base, ids, cfg)
    got, events = run(eagle, ids, cfg)
    assert len(ids) + len(want) > target.sliding_window
    assert got == want and sum(e.accepted_drafts for e in events) > 0
