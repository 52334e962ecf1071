"""`auto` tree: the measured verify cost of this target on this hardware, combined with observed acceptance.

EAGLE-2 ranks draft nodes by cumulative draft probability, which is calibrated (arXiv 2406.16858 §3.2): the
expected number of accepted drafts of a tree is close to the sum of exp(score) over its nodes. One calibration run
with a large, deep tree records every step's node scores and depths; a tree of depth d' and N nodes is the same pool
cut at level d' and reranked, so for every (N, d') the planner (`plan_tree`, pure) predicts
    tokens per step = 1 + c * E[sum of the top N-1 exp(scores) among nodes of depth <= d'] (+ lookup's tokens)
    ms per step     = draft ms * d'/depth + verify ms(N + lookup nodes)
and keeps the fastest tokens/ms. c rescales predicted to observed acceptance; verify ms(N) is timed on this machine.
Dynamic depth (TreeConfig.stop_below) is planned the same way: a step whose best node at some level falls under the
threshold keeps only the nodes down to that level and pays for the levels it drafted.
N = 1 is the root alone: no head pass, so no draft cost. With lookup off that is plain decoding, which the planner
picks where no tree pays for its verify width (on one AVX2 CPU a 2-token verify of a 0.5B target cost 1.7x its
one-token step, so every tree there ran slower than no tree at all); a greedy run that keeps lookup gets the chain
alone instead, which costs plain decoding's step wherever nothing matches.
Context lookup is planned only for sampled runs, where it stays on only when the tokens it was seen to add pay for the
verify width it costs (at T=1 sampled text rarely repeats: over 12 Spec-Bench prompts it added 0.01 tokens a step).
Greedy runs keep it as configured: small models loop and copy later in a generation than one short calibration sees
(on the first Spec-Bench prompt it added 0.05 tokens a step over 128 tokens; over 30 prompts, 2.4).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

from core.engine import kv_cache, tree
from core.engine.config import DecodeConfig, SamplingConfig, TreeConfig
from core.engine.contract import Target
from core.engine.eagle import Eagle2Decoder
from core.engine.sampling import peak
from core.engine.timing import now

SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)  # 1: the root alone (no draft; plain decoding without lookup)
STOPS = (0.0, 0.05, 0.1, 0.2, 0.35, 0.5)  # dynamic-depth thresholds planned (TreeConfig.stop_below; 0 = fixed depth)


@dataclass(frozen=True)
class AutoTreeReport:
    chosen: TreeConfig
    verify_ms: dict[int, float]  # tree tokens -> verify forward + LM head, ms
    expected_tokens: dict[int, float]  # tree tokens -> predicted tokens per step at the chosen depth, lookup included
    draft_ms: float  # per step at the chosen depth
    calibration: float


@dataclass(frozen=True)
class TreePlan:
    """The tree for each sampling regime. Greedy and sampled runs accept very differently (at T=1 the head's guesses
    are accepted far less often and copied text rarely repeats), so one tree cannot serve both."""

    greedy: TreeConfig
    sampled: TreeConfig
    source: str = "engine default"  # "engine default" | "given" | "auto: ..."
    verify_ms: dict[int, float] | None = None  # auto: the verify profile it planned with (tree tokens -> ms)

    @classmethod
    def fixed(cls, tree: TreeConfig, source: str) -> TreePlan:
        return cls(tree, tree, source)

    def for_temperature(self, temperature: float) -> TreeConfig:
        """The planned tree for a run at this temperature (0 = greedy)."""
        return self.greedy if temperature <= 0 else self.sampled


@dataclass(frozen=True)
class Calibration:
    """What one calibration generation with a large tree saw, per verify step (head nodes only, root excluded)."""

    nodes: tuple[tuple[tuple[float, int], ...], ...]  # per step: (exp(score), depth) of every head node
    head_accepted: float  # mean accepted head nodes per step
    lookup_accepted: float  # mean accepted lookup nodes per step (0 when lookup was off)
    # lookup nodes grafted at each step (extra verify width): the verify cost is charged per step, not at the mean
    # width, because it is convex where a kernel changes path (on one CPU, 16 tokens cost 89 ms and 24 cost 116 ms),
    # and a chain of 10 copied tokens in most steps would otherwise be priced as if it were spread evenly
    lookup_widths: tuple[int, ...]
    draft_ms: float  # draft ms per step at `depth` (median of the drafting steps x their share; `_draft_cost`)
    depth: int

    @property
    def lookup_nodes(self) -> float:
        """Mean lookup nodes grafted per step."""
        return sum(self.lookup_widths) / len(self.lookup_widths) if self.lookup_widths else 0.0


def describe(t: TreeConfig) -> str:
    """A plan in words, for logs and reports: a planned tree of one node is not a tree."""
    if t.total_tokens == 1:
        return f"context lookup alone (chain {t.lookup}, no head)" if t.lookup else "plain decoding (no tree pays here)"
    return f"{t.total_tokens} nodes, depth {t.depth}, top-{t.top_k}" + (f", lookup {t.lookup}" if t.lookup else "")


def verify_profile(target: Target, sizes=SIZES, prefix: int = 64, rounds: int = 5,
                   clock: Callable[[torch.device], float] = now) -> dict[int, float]:
    """Fastest ms seen for one tree verify of N tokens after a `prefix`-token context: the forward, and the LM-head
    rows a walk that accepts one draft reads (all N rows unless the target computes rows lazily).

    Sizes are timed round-robin, each round in the opposite order to the last, and the minimum per size is kept.
    Other work on the machine only ever slows a reading, so a burst of load spoils one round for a few sizes rather
    than every repeat of one size (timed back to back, a 3 s burst once made 2 tokens read 500 ms against 122 ms
    for 48, and `auto` chose a tree three times too big).
    """
    cache = target.new_cache()
    ids = torch.randint(0, min(1000, target.vocab_size), (1, max(prefix, *sizes)),
                        generator=torch.Generator().manual_seed(0)).to(target.device)  # the prefix, then tree tokens
    target.forward(ids[:, :prefix], cache)
    trees = {}
    for n in sizes:
        parents = [-1] + [max(0, (i - 1) // 2) for i in range(1, n)]  # a bushy binary tree
        trees[n] = (parents, tree.depths(parents), tree.ancestor_mask(parents))
    best = {n: math.inf for n in sizes}
    for r in range(rounds):
        for n in (sizes if r % 2 == 0 else tuple(reversed(sizes))):
            parents, d, anc = trees[n]
            t0 = clock(target.device)
            h, _ = target.forward(ids[:, :n], cache, parents, d, anc)
            rows = target.tree_logits(h[0], tree.children(parents))  # all N rows, or (lazy) as a walk reads them:
            for i in range(min(n, 2)):  # a walk that accepts one draft: the root's row, then node 1's subtree
                peak(rows[i])  # a greedy verify reduces the rows its walk visits, not all N
            best[n] = min(best[n], clock(target.device) - t0)
            kv_cache.crop(cache, prefix)
    kv_cache.free(cache)
    return {n: best[n] * 1e3 for n in sizes}


def calibrate(decoder: Eagle2Decoder, prompt_ids: list[int], tree_cfg: TreeConfig, max_new_tokens: int,
              sampling: SamplingConfig) -> Calibration:
    """Run one generation with `tree_cfg` and record what the planner needs."""
    steps = [e for e in decoder.generate(prompt_ids, DecodeConfig(max_new_tokens, sampling, tree=tree_cfg)) if e.tree]
    if not steps:
        return Calibration((), 0.0, 0.0, (), 0.0, tree_cfg.depth)
    on_path = [[e.tree[i].source for i in e.accepted_path[1:]] for e in steps]
    return Calibration(
        nodes=tuple(tuple((math.exp(n.score), n.depth) for n in e.tree if n.source == "head") for e in steps),
        head_accepted=sum(p.count("head") for p in on_path) / len(steps),
        lookup_accepted=sum(p.count("lookup") for p in on_path) / len(steps),
        lookup_widths=tuple(sum(n.source == "lookup" for n in e.tree) for e in steps),
        draft_ms=_draft_cost(steps),
        depth=tree_cfg.depth,
    )


def _draft_cost(steps: list) -> float:
    """Draft ms per step: the median over steps that ran the head (a burst of load must not set the cost), scaled by
    the share of steps that did (while a copy runs the lookup chain drafts alone, at no head cost). A plain median
    over every step would read zero when copies fill over half of them, and price any tree's drafting as free."""
    drafted = [e.draft_ms for e in steps if e.draft_forwards > 0]
    return statistics.median(drafted) * len(drafted) / len(steps) if drafted else 0.0


def stop_depth(step: tuple[tuple[float, int], ...], depth: int, stop: float) -> int:
    """The levels a grow of `depth` drafts at a step whose head nodes were `step` ((exp(score), depth) each) with
    dynamic depth `stop` (TreeConfig.stop_below): it goes one level deeper while the best node of the last level
    holds at least `stop` (core/drafters/eagle.py)."""
    if not stop:
        return depth
    best: dict[int, float] = {}
    for v, d in step:
        best[d] = max(best.get(d, 0.0), v)
    reached = 1
    while reached < depth and best.get(reached, 0.0) >= stop:
        reached += 1
    return reached


def interpolate(profile: dict[int, float], n: float) -> float:
    """Verify ms at n tokens from a measured profile: linear between measured sizes, flat outside the measured range
    (0.0 for an empty profile). The planner here, the app's "why this speedup" and gpu_day's prediction share it."""
    xs = sorted(profile)
    if not xs:
        return 0.0
    if n <= xs[0]:
        return profile[xs[0]]
    for a, b in zip(xs, xs[1:]):
        if n <= b:
            return profile[a] + (profile[b] - profile[a]) * (n - a) / (b - a)
    return profile[xs[-1]]


def plan_tree(cal: Calibration, profile: dict[int, float], top_k: int, lookup: int,
              plan_lookup: bool = True, stops: tuple[float, ...] = STOPS) -> AutoTreeReport:
    """Pure: the (total_tokens, depth, stop_below, lookup on/off) that maximises predicted tokens per ms (a
    stop_below prunes each calibration step's pool at the level its grow would have stopped, and charges the levels
    it drafted; `stops` are the thresholds tried, 0.0 = fixed depth); with plan_lookup
    False, lookup stays at `lookup` and only size and depth are planned. When the profile has size 1, the root alone
    is an option: plain decoding where lookup is off (always a candidate for sampled runs), the lookup chain without
    the head where a greedy run keeps lookup."""
    sizes = sorted(profile)
    # verifying fewer tokens never costs more: each size costs at most what any larger size measured (timing noise)
    cost = {n: min(profile[m] for m in sizes if m >= n) for n in sizes}
    if not cal.nodes:  # the calibration ended before a verify step: nothing to plan from
        return AutoTreeReport(TreeConfig(depth=cal.depth, top_k=top_k, lookup=lookup), profile, {}, 0.0, 1.0)
    predicted = sum(sum(v for v, _ in step) for step in cal.nodes) / len(cal.nodes)
    c = cal.head_accepted / predicted if predicted > 0 else 0.0  # an untrained head: c = 0, the smallest tree wins
    best, best_rate, best_expected, best_draft = None, -1.0, {}, 0.0
    for d, stop in ((d, s) for d in range(1, cal.depth + 1) for s in (stops if d > 1 else (0.0,))):
        reached = [stop_depth(step, d, stop) for step in cal.nodes]  # the levels each step would have drafted
        ranked = [sorted((v for v, depth in step if depth <= r), reverse=True) for step, r in zip(cal.nodes, reached)]
        pool = top_k + (d - 1) * top_k * top_k  # candidates a depth-d grow offers
        draft = cal.draft_ms * sum(reached) / len(reached) / cal.depth
        head = {n: c * sum(sum(r[: n - 1]) for r in ranked) / len(ranked) for n in sizes if n - 1 <= pool}
        if plan_lookup:
            options = (False, True) if lookup and cal.lookup_nodes else (False,)
        else:
            options = (lookup > 0,)
        for use_lookup in options:
            extra_tokens = cal.lookup_accepted if use_lookup else 0.0
            widths = (cal.lookup_widths or (0,)) if use_lookup else (0,)
            expected = {n: 1.0 + extra_tokens + h for n, h in head.items()}
            for n, e in expected.items():
                if n == 1 and d > 1:
                    continue  # the root alone is the same plan at every depth: priced once, at depth 1
                cost_draft = draft if n > 1 else 0.0  # the root alone runs no head pass
                verify = sum(interpolate(cost, n + w) for w in widths) / len(widths)  # expected over the steps
                rate = e / (cost_draft + verify)
                if rate > best_rate:
                    chosen = TreeConfig(total_tokens=n, depth=d, top_k=top_k, lookup=lookup if use_lookup else 0,
                                        stop_below=stop if n > 1 else 0.0)
                    best, best_rate, best_expected, best_draft = chosen, rate, expected, cost_draft
    return AutoTreeReport(best, profile, best_expected, best_draft, c)


def exact_sizes(target: Target, sizes=SIZES, lookup: int = 0) -> tuple[int, ...]:
    """The tree sizes whose verify (plus a `lookup` chain) stays within the rows the target reproduces bit for bit
    (`exact_rows`, probed at start-up: core/models/invariance.py), so a run planned here stays bit-exact; all of
    `sizes` where the target has no such limit (SDPA). The root alone is always kept."""
    width = getattr(target, "exact_rows", 0) or 0
    if not width:
        return tuple(sizes)
    return tuple(n for n in sizes if n == 1 or n + lookup <= width) or (1,)


def choose_tree(decoder: Eagle2Decoder, prompt_ids: list[int], depth: int = 6, top_k: int = 8,
                max_new_tokens: int = 64, sizes=SIZES, sampling: SamplingConfig | None = None,
                lookup: int = TreeConfig().lookup) -> AutoTreeReport:
    """Pick total_tokens, depth (<= `depth`) and, when sampling, whether context lookup pays, from one calibration
    generation at the run's own `sampling` (greedy when None; acceptance at T=1 is far below greedy's, so a greedy
    calibration would oversize a sampled run's tree) and a verify-latency profile of this machine."""
    sampling = sampling or SamplingConfig()
    sizes = exact_sizes(decoder.target, sizes, lookup)
    big = TreeConfig(total_tokens=max(sizes), depth=depth, top_k=top_k, lookup=lookup)
    cal = calibrate(decoder, prompt_ids, big, max_new_tokens, sampling)
    return plan_tree(cal, verify_profile(decoder.target, sizes), top_k, lookup, plan_lookup=not sampling.greedy)


def plan_regimes(decoder: Eagle2Decoder, prompt_ids: list[int], depth: int = 6, top_k: int = 8,
                 max_new_tokens: int = 64, sizes=SIZES, lookup: int = TreeConfig().lookup,
                 seed: int = 0) -> tuple[TreePlan, dict[str, AutoTreeReport]]:
    """`auto` for a server that takes both greedy and sampled requests: one verify profile of this machine, then one
    calibration per regime (greedy, and sampled at T=1), each planned by `plan_tree` as `choose_tree` would."""
    sizes = exact_sizes(decoder.target, sizes, lookup)
    profile = verify_profile(decoder.target, sizes)
    big = TreeConfig(total_tokens=max(sizes), depth=depth, top_k=top_k, lookup=lookup)
    reports = {}
    for name, sampling in (("greedy", SamplingConfig()), ("sampled", SamplingConfig(temperature=1.0, seed=seed))):
        cal = calibrate(decoder, prompt_ids, big, max_new_tokens, sampling)
        reports[name] = plan_tree(cal, profile, top_k, lookup, plan_lookup=not sampling.greedy)
    plan = TreePlan(reports["greedy"].chosen, reports["sampled"].chosen,
                    "auto: core.engine.autotree.plan_regimes (one calibration greedy, one at T=1)")
    return plan, reports


def auto_or_parse(spec: str | None, eagle: Eagle2Decoder | None, tokenizer) -> TreePlan:
    """The app's --tree: None or 'default' keeps the engine default; 'T,D,K[,L[,S]]' is used for every request;
    'auto' measures this machine once and plans one tree for greedy requests and one for sampled ones
    (`plan_regimes`). Here rather than in the app so the bench's measure_defaults plans exactly as the app does."""
    if not spec or spec == "default":
        return TreePlan.fixed(TreeConfig(), "engine default")
    if spec != "auto":
        return TreePlan.fixed(TreeConfig.parse(spec), "given")
    plan, reports = plan_regimes(eagle, tokenizer("The history of the printing press").input_ids, max_new_tokens=48)
    plan = dataclasses.replace(plan, verify_ms=dict(reports["greedy"].verify_ms))  # reused by the "why" what-if
    logging.getLogger("eagle_playground").info(
        "auto tree: greedy %s, sampled %s (verify ms by tree size %s)", describe(plan.greedy), describe(plan.sampled),
        {n: round(v, 1) for n, v in reports["greedy"].verify_ms.items()})
    return plan
