"""Sampling: the logits processors, and the end-to-end claim that EAGLE-2 sampling is lossless.

The statistical tests draw the first three generated tokens thousands of times (one seed per run) and compare their
empirical joint distribution with the target's exact one, enumerated over a 16-token vocabulary, by a chi-square test.
The draft vocabulary is reduced to the tokens the target likes, so drafts are accepted often (an untrained head over
the full vocabulary almost never proposes a likely token, and the test would then only exercise the bonus path).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter

import pytest
import torch

from conftest import run, tiny_drafter, tiny_head, tiny_target
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, DecodeError, SamplingConfig, TreeConfig
from core.drafters.eagle import EagleDrafter
from core.engine.eagle import Eagle2Decoder
from core.engine.sampling import next_token, sample, target_probs

# ------------------------------------------------------------------------------------------ processors


def test_temperature_only_is_softmax_of_scaled_logits():
    logits = torch.tensor([1.0, 2.0, 0.5, -1.0])
    for t in (0.5, 1.0, 2.0):
        p = target_probs(logits, SamplingConfig(temperature=t))
        torch.testing.assert_close(p, torch.softmax(logits / t, -1))


def test_top_k_keeps_k_tokens():
    logits = torch.tensor([0.1, 3.0, 2.0, -1.0, 1.0])
    p = target_probs(logits, SamplingConfig(temperature=1.0, top_k=2))
    assert (p > 0).tolist() == [False, True, True, False, False]
    torch.testing.assert_close(p.sum(), torch.tensor(1.0))
    torch.testing.assert_close(p[1] / p[2], torch.tensor(math.e))


def test_top_p_keeps_smallest_prefix_reaching_p():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log()
    keep = lambda tp: (target_probs(logits, SamplingConfig(temperature=1.0, top_p=tp)) > 0).tolist()
    assert keep(0.5) == [True, False, False, False]
    assert keep(0.6) == [True, True, False, False]
    assert keep(0.8) == [True, True, False, False]
    assert keep(0.81) == [True, True, True, False]
    assert keep(1.0) == [True, True, True, True]
    assert keep(0.01) == [True, False, False, False]  # the top token always survives
    p = target_probs(logits, SamplingConfig(temperature=1.0, top_p=0.9))
    torch.testing.assert_close(p, torch.tensor([0.5, 0.3, 0.15, 0.0]) / 0.95)


def test_processors_batch_and_normalise(rng):
    logits = torch.randn(7, 50, generator=rng) * 3
    p = target_probs(logits, SamplingConfig(temperature=0.7, top_p=0.9, top_k=20))
    torch.testing.assert_close(p.sum(-1), torch.ones(7))
    assert ((p > 0).sum(-1) <= 20).all()
    for row in range(7):  # batched == row by row
        torch.testing.assert_close(p[row], target_probs(logits[row], SamplingConfig(temperature=0.7, top_p=0.9,
                                                                                     top_k=20)))


def test_next_token_greedy_and_seeded_sampling():
    logits = torch.tensor([0.0, 5.0, 1.0])
    assert next_token(logits, SamplingConfig(), torch.Generator()) == 1
    cfg = SamplingConfig(temperature=1.0)
    draws = lambda seed: [next_token(logits, cfg, torch.Generator().manual_seed(seed)) for _ in range(1)]
    assert draws(3) == draws(3)
    g = torch.Generator().manual_seed(0)
    counts = Counter(sample(torch.tensor([0.2, 0.0, 0.8]), g) for _ in range(2000))
    assert counts[1] == 0 and 0.75 < counts[2] / 2000 < 0.85


@pytest.mark.parametrize("bad", [dict(temperature=-0.1), dict(temperature=11), dict(top_p=0.0), dict(top_p=1.5),
                                 dict(top_k=-1), dict(seed=-1), dict(temperature=float("nan")), dict(top_p="x")])
def test_sampling_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        SamplingConfig(**bad)


# ------------------------------------------------------------------------------------------ losslessness

VOCAB = 16
PROMPT = [1, 5, 7, 3, 2, 9]
N_NEW = 3
RUNS_EAGLE = 1500
RUNS_BASE = 2000
SETTINGS = {"T1": SamplingConfig(temperature=1.0), "T0.7-p0.9": SamplingConfig(temperature=0.7, top_p=0.9)}
NEARBY = {"T1.2": SamplingConfig(temperature=1.2)}  # for the power check only


def target():
    return tiny_target("llama", vocab=VOCAB, seed=1)


@functools.lru_cache(maxsize=None)
def exact_joint(name: str, prompt: tuple[int, ...] = tuple(PROMPT)) -> torch.Tensor:
    """(V, V, V) exact probability of the first three generated tokens under the processed target distribution."""
    cfg, v, p = {**SETTINGS, **NEARBY}[name], VOCAB, len(prompt)
    pairs = torch.cartesian_prod(torch.arange(v), torch.arange(v))  # (V*V, 2): t1, t2
    ids = torch.cat([torch.tensor(prompt).expand(v * v, -1), pairs], 1)  # (V*V, P+2)
    with torch.no_grad():
        logits = target().model(ids).logits.double()  # stock HF forward, no cache
    p1 = target_probs(logits[0, p - 1], cfg).double()  # (V,)
    p2 = target_probs(logits[::v, p], cfg).double()  # (V, V): row t1
    p3 = target_probs(logits[:, p + 1], cfg).double().view(v, v, v)  # (t1, t2, V)
    return p1[:, None, None] * p2[:, :, None] * p3


def chi_square_pvalue(samples: list[tuple[int, ...]], probs: torch.Tensor) -> float:
    """Pearson chi-square over cells with expected count >= 5, the remaining cells lumped into one bin."""
    n = len(samples)
    counts = torch.zeros(probs.numel(), dtype=torch.float64)
    for s in samples:
        counts[(s[0] * VOCAB + s[1]) * VOCAB + s[2]] += 1
    expected = probs.flatten() * n
    big = expected >= 5
    obs, exp = counts[big].tolist(), expected[big].tolist()
    rest_exp = n - sum(exp)
    if rest_exp >= 1:
        obs.append(n - sum(obs))
        exp.append(rest_exp)
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp))
    df = len(obs) - 1
    assert df >= 10, "too few cells for a meaningful test"
    try:
        from scipy.stats import chi2

        return float(chi2.sf(stat, df))
    except ImportError:  # regularized upper incomplete gamma = chi-square survival function
        return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                             torch.tensor(stat / 2, dtype=torch.float64)))


def test_chi_square_fallback_matches_closed_form():
    """The torch fallback (regularized upper incomplete gamma) is the chi-square survival function; for even degrees
    of freedom that has the closed form exp(-x/2) * sum_{k < df/2} (x/2)^k / k! (no scipy needed)."""
    for stat, df in [(3.0, 4), (25.0, 12), (80.0, 40), (7.5, 2)]:
        fallback = torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                           torch.tensor(stat / 2, dtype=torch.float64))
        half = stat / 2
        exact = math.exp(-half) * sum(half**k / math.factorial(k) for k in range(df // 2))
        assert float(fallback) == pytest.approx(exact, rel=1e-9)


def draw(decoder, name: str, runs: int, tree: TreeConfig | None = None,
         prompt: tuple[int, ...] = tuple(PROMPT)) -> tuple[list[tuple[int, ...]], int]:
    out, accepted = [], 0
    for seed in range(runs):
        cfg = DecodeConfig(max_new_tokens=N_NEW, sampling=dataclasses.replace(SETTINGS[name], seed=seed),
                           tree=tree or TreeConfig())
        tokens, events = run(decoder, list(prompt), cfg)
        assert len(tokens) == N_NEW
        out.append(tuple(tokens))
        accepted += sum(e.accepted_drafts for e in events)
    return out, accepted


def check_matches(samples, name: str, prompt: tuple[int, ...] = tuple(PROMPT)) -> None:
    probs = exact_joint(name, prompt)
    impossible = [s for s in samples if probs[s] == 0]
    assert not impossible, f"sampled sequences the target gives probability 0: {impossible[:5]}"
    p = chi_square_pvalue(samples, probs)
    assert p > 1e-3, f"empirical joint differs from the target's (chi-square p = {p:.2e})"


def likely_tokens(name: str, n: int) -> torch.Tensor:
    """The n tokens with the most mass across the three positions: a draft vocabulary that gets accepted often."""
    j = exact_joint(name)
    mass = j.sum((1, 2)) + j.sum((0, 2)) + j.sum((0, 1))
    return mass.topk(n).indices.sort().values


@pytest.mark.slow
@pytest.mark.parametrize("drafter_kind", ["eagle", "eagle3", "medusa"])
@pytest.mark.parametrize("name", list(SETTINGS))
def test_eagle2_sampling_matches_target_distribution(name, drafter_kind):
    """Every head-based drafter behind the contract (EAGLE-1/2, EAGLE-3, Medusa); lookup alone is the next test."""
    tgt = target()
    dec = Eagle2Decoder(tgt, tiny_drafter(drafter_kind, tgt, likely_tokens(name, 5), seed=3))
    samples, accepted = draw(dec, name, RUNS_EAGLE, TreeConfig(12, 2, 5))
    assert accepted > RUNS_EAGLE // 2, "drafts were rarely accepted: the test would not exercise acceptance"
    check_matches(samples, name)


@pytest.mark.slow
def test_dynamic_depth_sampling_matches_target_distribution():
    """A tree whose depth follows the head's confidence (TreeConfig.stop_below) is still a deterministic proposal:
    the steps that stopped early and the ones that drafted deep together keep the target's distribution."""
    tgt = target()
    dec = Eagle2Decoder(tgt, tiny_drafter("eagle", tgt, likely_tokens("T1", 5), seed=3))
    tree = TreeConfig(12, 2, 5, stop_below=0.6)
    samples, accepted = draw(dec, "T1", RUNS_EAGLE, tree)
    assert accepted > RUNS_EAGLE // 2
    check_matches(samples, "T1")
    depths = set()  # the head's deepest node per step: both depths occur, so both kinds of step were sampled
    for seed in range(40):
        cfg = DecodeConfig(max_new_tokens=N_NEW, sampling=dataclasses.replace(SETTINGS["T1"], seed=seed), tree=tree)
        depths |= {max((n.depth for n in e.tree if n.source == "head"), default=0) for e in run(dec, PROMPT, cfg)[1]}
    assert depths - {0} == {1, 2}  # 0: the prefill, or a copy step the lookup chain drafted alone


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SETTINGS))
def test_baseline_sampling_matches_target_distribution(name):
    samples, _ = draw(BaselineDecoder(target()), name, RUNS_BASE)
    check_matches(samples, name)
    if name == "T1":  # power check: the test tells T=1 samples from a nearby temperature's distribution
        assert chi_square_pvalue(samples, exact_joint("T1.2")) < 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SETTINGS))
def test_context_lookup_sampling_matches_target_distribution(name):
    """Lookup proposals (copied from the context, no head) are deterministic choices too: the output distribution is
    still exactly the target's. The prompt is the target's own greedy text, so what follows a token there is often
    what the target samples next, and proposals get accepted (and rejected) a lot."""
    tgt = target()
    greedy, _ = run(BaselineDecoder(tgt), PROMPT, DecodeConfig(max_new_tokens=24))
    prompt = tuple(PROMPT + greedy)
    dec = Eagle2Decoder(tgt, tiny_drafter("lookup", tgt))  # the lookup drafter: no head at all
    samples, accepted = draw(dec, name, RUNS_EAGLE, TreeConfig(1, 1, 1, lookup=3), prompt)
    assert accepted > RUNS_EAGLE // 2, "lookup proposals were rarely accepted: acceptance would not be exercised"
    check_matches(samples, name, prompt)


@pytest.mark.slow
@pytest.mark.parametrize("period", [1, 3])
def test_overlapping_lookup_copies_sampling_matches_target_distribution(period):
    """A prompt ending in a loop of the target's own likely tokens: every step's lookup chain is a copy with overlap
    (longer than the loop's remaining text), and the sampled output is still exactly the target's."""
    tgt = target()
    likely = likely_tokens("T1", period).tolist()
    prompt = tuple(PROMPT + likely * (6 // period))
    dec = Eagle2Decoder(tgt, EagleDrafter(tiny_head(tgt), tgt))
    samples, accepted = draw(dec, "T1", RUNS_EAGLE, TreeConfig(1, 1, 1, lookup=4), prompt)
    assert accepted > RUNS_EAGLE // 50, "lookup proposals were never accepted: acceptance would not be exercised"
    check_matches(samples, "T1", prompt)


@pytest.mark.parametrize("cfg", [SamplingConfig(), SamplingConfig(temperature=1.0)])
def test_next_token_rejects_non_finite_logits(cfg):
    with pytest.raises(DecodeError, match="NaN or inf"):
        next_token(torch.tensor([0.0, float("nan"), 1.0]), cfg, torch.Generator())
