"""Seeded sampling that does not depend on the device: one CPU uniform per draw, inverse CDF in float64 on the CPU.

These run on the CPU; tests/system/test_cuda.py repeats the cross-device claims on a GPU (`python -m pytest -m cuda`).
Before this, `sample` called torch.multinomial with the decode call's CPU generator, which raises for CUDA
probabilities and, on CUDA, would consume a different random stream.
"""
from __future__ import annotations

import pytest
import torch

from core.engine.config import DecodeError, SamplingConfig
from core.engine.sampling import new_generator, sample, target_probs, uniform
from core.engine.verify import accept_sampled


def inverse_cdf(probs: torch.Tensor, u: float) -> int:
    """The reference rule: the first id whose cumulative mass exceeds u * total."""
    cdf = probs.double().cumsum(-1)
    return int((cdf > u * cdf[-1]).nonzero()[0].item())


@pytest.mark.parametrize("seed", range(40))
def test_sample_is_the_inverse_cdf_of_one_cpu_uniform(seed):
    probs = torch.softmax(torch.randn(97, generator=torch.Generator().manual_seed(seed)) * 2, -1)
    u = uniform(new_generator(seed))
    assert sample(probs, new_generator(seed)) == inverse_cdf(probs, u)


def test_sample_does_not_depend_on_dtype_or_layout():
    """What a device change does to the probabilities (another dtype, a strided view) must not change the draw."""
    base = torch.softmax(torch.randn(2, 300, generator=torch.Generator().manual_seed(1)), -1)
    for seed in range(30):
        want = sample(base[0].contiguous(), new_generator(seed))
        assert sample(base[0].double(), new_generator(seed)) == want
        assert sample(base.t()[:, 0], new_generator(seed)) == want  # non-contiguous


def test_zero_probability_ids_are_never_drawn():
    probs = torch.tensor([0.0, 0.25, 0.0, 0.0, 0.75, 0.0])
    drawn = {sample(probs, new_generator(s)) for s in range(200)}
    assert drawn == {1, 4}


@pytest.mark.parametrize("bad", [torch.tensor([float("nan"), 0.5]), torch.zeros(4), torch.tensor([float("inf"), 1.0])])
def test_non_finite_or_empty_probabilities_are_a_clear_decode_error(bad):
    with pytest.raises(DecodeError, match="not finite"):
        sample(bad, new_generator(0))


def test_accept_sampled_uses_the_same_stream():
    """Acceptance draws its uniforms and its bonus token from the same CPU stream as sample()."""
    p = torch.softmax(torch.tensor([2.0, 1.0, 0.5, 0.1]), -1)
    kids, tokens = [[1, 2], [], []], [0, 3, 2]
    for seed in range(20):
        g = new_generator(seed)
        u1, u2, u_bonus = uniform(g), uniform(g), uniform(g)
        path, bonus = accept_sampled(kids, tokens, lambda n: p, new_generator(seed))
        if u1 < p[3]:
            assert path == [0, 1]
        else:
            r = p.clone()
            r[3] = 0
            r /= r.sum()
            if u2 < r[2]:
                assert path == [0, 2]
            else:
                r[2] = 0
                assert path == [0] and bonus == inverse_cdf(r / r.sum(), u_bonus)


def test_a_draw_depends_on_the_calls_own_generator_only(monkeypatch):
    """What makes a seed give the same token on any device: sample() consumes exactly one uniform from the decode
    call's CPU generator and nothing else: not the global RNG, not a device RNG, never torch.multinomial (which
    raised for CUDA probabilities with a CPU generator). The same claim on a real GPU: tests/system/test_cuda.py."""
    def no(*a, **k):
        raise AssertionError("sample() must not draw this way")

    monkeypatch.setattr(torch, "multinomial", no)
    probs = torch.softmax(torch.randn(50, generator=torch.Generator().manual_seed(4)), -1)
    for seed in range(20):
        torch.manual_seed(1000 + seed)  # the global RNG's state must not matter
        g = new_generator(seed)
        tok = sample(probs, g)
        torch.manual_seed(7)
        ref = new_generator(seed)
        assert tok == inverse_cdf(probs, uniform(ref))
        assert torch.equal(g.get_state(), ref.get_state())  # exactly one uniform consumed


@pytest.mark.parametrize("t", [1e-40, 1e-37, 1e-20, 1e-4, 5e-4])
def test_tiny_temperature_is_refused_with_a_clear_message(t):
    with pytest.raises(ValueError, match=r"temperature must be 0 \(greedy\) or at least 0.001"):
        SamplingConfig(temperature=t)


def test_smallest_allowed_temperature_gives_finite_probabilities():
    logits = torch.tensor([30.0, -30.0, 29.9, 0.0]) * 100
    p = target_probs(logits, SamplingConfig(temperature=1e-3))
    assert torch.isfinite(p).all() and abs(float(p.sum()) - 1.0) < 1e-5
