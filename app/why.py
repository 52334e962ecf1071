""""Why this speedup": the arithmetic of one run on its own numbers, and a what-if over tree sizes.

Speculative decoding is faster when the tokens a step yields outweigh what the step costs, both counted in plain
decoding steps:

    predicted speedup = τ × (ms of one plain step) / (ms of one drafting step)
    ms of one drafting step = draft passes + one verify at this tree size + everything else

τ is the run's own over its decode steps (new tokens per target forward, bonus token included; the prefill's
forward is left out, as it is from the step costs), the plain step is the baseline lane's own
mean decode step, and the drafting step is split the way StepEvent times it (draft_ms, verify_ms, the rest). So the
prediction is built from the run's parts, and where it misses the measured tokens/s ratio the difference is what the
parts leave out (the prefill, which both lanes pay once, and step-to-step variance).

The what-if re-prices the same run with smaller trees: the verify cost per size comes from a verify profile measured
on this machine (core.engine.autotree.verify_profile, the planner's own measurement), scaled to the run's own verify cost at
its size; τ when each step keeps only its best N-1 head nodes is estimated the way EAGLE-2 ranks nodes (its
cumulative draft probabilities are calibrated, arXiv 2406.16858 §3.2): the run's τ less c × the exp(score) of the
nodes cut, with c fitted so the whole tree gives the run's own acceptance. The last row is the run as measured;
bigger trees than the run drafted are not listed (the run never saw those nodes). Draft passes and the rest stay as
measured (same depth; the root alone has no draft pass).

Pure functions of StepEvents and numbers: no gradio, no tensors (tests/app/test_why.py).
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Sequence

from app.lanes import speedup
from core.engine.autotree import interpolate
from core.engine.events import RunStats, StepEvent

WHAT_IF_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)


@dataclass(frozen=True)
class WhatIf:
    size: int  # at most this many head nodes verified per step, root included (lookup nodes on top, as in the run)
    tau: float
    verify_ms: float
    step_ms: float
    speedup: float
    run: bool = False  # the run's own size


@dataclass(frozen=True)
class Why:
    lane: str  # "EAGLE-2", "Medusa", "Prompt lookup"
    tau: float
    plain_ms: float  # the baseline's mean decode step
    draft_ms: float  # per drafting step
    verify_ms: float
    other_ms: float
    tree_size: float  # mean nodes verified per step, root and lookup nodes included
    measured: float  # tokens/s ratio of the run (0 when unknown)
    what_if: tuple[WhatIf, ...] = ()

    @property
    def step_ms(self) -> float:
        return self.draft_ms + self.verify_ms + self.other_ms

    @property
    def predicted(self) -> float:
        return self.tau * self.plain_ms / self.step_ms if self.step_ms > 0 else 0.0

    @property
    def break_even_tau(self) -> float:
        """The τ at which this step cost would merely match plain decoding."""
        return self.step_ms / self.plain_ms if self.plain_ms > 0 else 0.0

    def in_plain_steps(self, ms: float) -> float:
        return ms / self.plain_ms if self.plain_ms > 0 else 0.0

    def as_dict(self) -> dict:
        return {"lane": self.lane, "tau": self.tau, "plain_step_ms": self.plain_ms, "draft_ms": self.draft_ms,
                "verify_ms": self.verify_ms, "other_ms": self.other_ms, "step_ms": self.step_ms,
                "tree_size": self.tree_size, "predicted_speedup": self.predicted, "measured_speedup": self.measured,
                "break_even_tau": self.break_even_tau,
                "what_if": [dict(w.__dict__) for w in self.what_if]}


def why_of(d: dict) -> Why:
    """A Why back from its as_dict() form (a finished run keeps plain JSON, app/result.py)."""
    rows = tuple(WhatIf(**w) for w in d.get("what_if", ()))
    return Why(d["lane"], d["tau"], d["plain_step_ms"], d["draft_ms"], d["verify_ms"], d["other_ms"], d["tree_size"],
               d["measured_speedup"], rows)


def _head_probs(ev: StepEvent) -> list[float]:
    """exp(score) of a step's draft-head nodes, best first (root and lookup nodes excluded)."""
    return sorted((math.exp(n.score) for n in ev.tree if n.source == "head"), reverse=True)


def tau_at_sizes(steps: Sequence[StepEvent], sizes: Sequence[int], tau: float | None = None) -> dict[int, float]:
    """Estimated τ if every step had verified at most its best size-1 head nodes: the run's τ less the acceptance
    expected of the nodes cut (c × their exp(score), c fitted so the whole tree gives the run's own acceptance).
    Lookup nodes stay as they were. Sizes up to the run's most head nodes + 1 (there nothing is cut, so τ is the
    run's); `tau`: the run's τ (default: 1 + accepted drafts per drafting step). Empty when no head node was
    drafted."""
    steps = [e for e in steps if e.tree]
    probs = [_head_probs(e) for e in steps]
    if not steps or not any(probs):
        return {}
    src = [[e.tree[i].source for i in e.accepted_path[1:]] for e in steps]
    head_acc = sum(s.count("head") for s in src) / len(steps)
    look_acc = sum(s.count("lookup") for s in src) / len(steps)
    full = sum(sum(p) for p in probs) / len(steps)
    c = head_acc / full if full > 0 else 0.0
    tau = 1.0 + head_acc + look_acc if tau is None else tau
    most = max(len(p) for p in probs) + 1
    return {n: tau - c * sum(sum(p[n - 1:]) for p in probs) / len(steps) for n in sizes if n <= most}


def explain(lane: str, base: RunStats, stats: RunStats, steps: Sequence[StepEvent],
            profile: dict[int, float] | None = None, sizes: Sequence[int] = WHAT_IF_SIZES) -> Why | None:
    """The run's arithmetic for one drafting lane (`stats` and its `steps`) against the baseline `base`; None when
    either lane has no decode step yet. `profile`: verify ms by tree size on this machine, for the what-if."""
    plain_ms, step = sum(base.step_split_ms), stats.step_split_ms
    if plain_ms <= 0 or sum(step) <= 0:
        return None
    drafting = [e for e in steps if e.tree]
    width = sum(len(e.tree) for e in drafting) / len(drafting) if drafting else 1.0
    measured = speedup(stats, base)
    verify, draft, other = step
    decode = [e for e in steps if e.step > 0]  # the steps the split times (the prefill is another shape of work)
    forwards = sum(e.target_forwards for e in decode)
    tau = sum(len(e.new_token_ids) for e in decode) / forwards if forwards else stats.tau
    why = Why(lane, tau, plain_ms, draft, verify, other, width, measured)
    if not profile or not drafting:
        return why
    heads = sum(sum(n.source == "head" for n in e.tree) for e in drafting) / len(drafting)
    extra = width - 1 - heads  # lookup nodes per step, kept as they were
    own = interpolate(profile, width)
    most = max(sum(n.source == "head" for n in e.tree) for e in drafting) + 1  # the run: no step cut
    rows = []
    for n, tau_n in tau_at_sizes(drafting, [n for n in sizes if n < most], tau).items():
        v = verify * interpolate(profile, n + extra) / own if own > 0 else verify
        d = draft if n > 1 else 0.0  # the root alone: no head pass
        cost = d + v + other
        rows.append(WhatIf(n, tau_n, v, cost, tau_n * plain_ms / cost if cost > 0 else 0.0))
    rows.append(WhatIf(most, tau, verify, why.step_ms, why.predicted, run=True))  # the run as measured
    return Why(lane, tau, plain_ms, draft, verify, other, width, measured, tuple(rows))


def _esc(x) -> str:
    return html.escape(str(x))


def why_html(whys: Sequence[Why]) -> str:
    """The panel: per drafting lane, the arithmetic in a sentence and a table, then the what-if."""
    if not whys:
        return '<div class="why-empty">After a run, its arithmetic appears here: tokens per pass against what a ' \
               'pass costs.</div>'
    parts = []
    for w in whys:
        ps = w.in_plain_steps
        verdict = "faster" if w.predicted >= 1 else "slower"
        parts.append(
            f'<div class="why-lane"><h4>{_esc(w.lane)}</h4>'
            f'<p class="why-formula">τ <b>{w.tau:.2f}</b> × plain step <b>{w.plain_ms:.1f} ms</b> ÷ drafting step '
            f'<b>{w.step_ms:.1f} ms</b> = predicted <b class="why-predicted">{w.predicted:.2f}×</b> '
            f'· measured <b class="why-measured">{w.measured:.2f}×</b></p>'
            f'<table class="stats-table why-table"><thead><tr><th>one step</th><th>ms</th><th>plain steps</th></tr>'
            f'</thead><tbody>'
            f'<tr><th>plain decoding step</th><td>{w.plain_ms:.1f}</td><td>1.00</td></tr>'
            f'<tr><th>draft passes</th><td>{w.draft_ms:.1f}</td><td>{ps(w.draft_ms):.2f}</td></tr>'
            f'<tr><th>verify of {w.tree_size:.0f} tokens</th><td>{w.verify_ms:.1f}</td>'
            f'<td>{ps(w.verify_ms):.2f}</td></tr>'
            f'<tr><th>other (tree, accept, KV)</th><td>{w.other_ms:.1f}</td><td>{ps(w.other_ms):.2f}</td></tr>'
            f'<tr><th>drafting step</th><td>{w.step_ms:.1f}</td><td>{ps(w.step_ms):.2f}</td></tr>'
            f'</tbody></table>'
            f'<p class="why-verdict">A step costs {ps(w.step_ms):.2f} plain steps and yields τ = {w.tau:.2f} tokens, '
            f'so it is {verdict} than plain decoding: it breaks even at τ = {w.break_even_tau:.2f}.</p>')
        if w.what_if:
            rows = "".join(
                f'<tr class="{"why-run" if r.run else ""}"><td>{"this run: up to " if r.run else ""}{r.size}</td>'
                f"<td>{r.tau:.2f}</td><td>{r.verify_ms:.1f}</td><td>{r.step_ms:.1f}</td><td>{r.speedup:.2f}×</td></tr>"
                for r in w.what_if)
            parts.append('<details class="why-whatif" open><summary>What if the tree were smaller? (verify cost '
                         'from this machine\'s profile, τ from this run\'s draft scores)</summary>'
                         '<table class="stats-table"><thead><tr><th>head nodes</th><th>τ (est.)</th>'
                         '<th>verify ms</th><th>step ms</th><th>speedup (pred.)</th></tr></thead>'
                         f"<tbody>{rows}</tbody></table></details>")
        parts.append("</div>")
    return '<div class="why-panel">' + "".join(parts) + "</div>"
