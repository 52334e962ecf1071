"""Pure rendering: token ids -> exact text pieces -> HTML for the two output panels and the statistics table.

Text comes only from the tokenizer (never reconstructed from strings the engine did not produce). Each generated
token owns the piece of text its id added to the cumulative decode, so concatenating the pieces always equals
`tokenizer.decode(ids)`; a character split over several byte tokens is attributed to the token that completes it.

Colours follow the engine's facts, not text search (docs/ARCHITECTURE.md §3): in an EAGLE-2 step the first
`len(accepted_path) - 1` tokens are accepted drafts at depths 1, 2, ... and the next one is the target's own token
(the bonus token, "d0"). The prefill token is the target's own too.
"""
from __future__ import annotations

import html
from typing import Iterable, Protocol, Sequence

from app.lanes import BASELINE, EAGLE, speedup
from core.engine.events import RunStats, StepEvent
from core.engine.exactness import NEAR_TIE_ULPS, Divergence
from core.engine.metrics_names import mean_acceptance_length

CONTEXT_TOKENS = 16  # prompt tokens decoded in front of the output, so word-initial spaces render as in context
MAX_DEPTH_CLASS = 12  # style.css defines .d0 .. .d12; deeper drafts share the last colour


class Tokenizer(Protocol):
    def decode(self, ids: list[int], skip_special_tokens: bool = ...) -> str: ...


# ------------------------------------------------------------------------------------------ incremental decoding


class Detokenizer:
    """Incremental decode: one text piece per token id, with ''.join(pieces) == decode(context + ids) - decode(context).

    Decodes the cumulative ids after every token and keeps the difference. A trailing U+FFFD (an unfinished multi-byte
    character) is held back until the bytes that complete it arrive. If a tokenizer rewrites earlier text (space
    clean-up), earlier pieces are trimmed back to the common prefix so the invariant still holds.
    """

    def __init__(self, tokenizer: Tokenizer, context_ids: Sequence[int] = ()):
        self.tok = tokenizer
        self.context = list(context_ids)[-CONTEXT_TOKENS:]
        self.base = self._decode(self.context)
        self.ids: list[int] = []
        self.pieces: list[str] = []
        self.text = ""

    def _decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    def add(self, ids: Iterable[int]) -> None:
        for tid in ids:
            self.ids.append(tid)
            self.pieces.append("")
            self._sync(hold=True)

    def flush(self) -> None:
        """Release any held-back partial character (end of generation)."""
        if self.ids:
            self._sync(hold=False)

    def _sync(self, hold: bool) -> None:
        full = self._decode(self.context + self.ids)
        new = full[len(self.base):] if full.startswith(self.base) else full[_common_prefix(full, self.base):]
        if hold:
            new = new.rstrip("\ufffd")
        keep = _common_prefix(self.text, new)
        extra = len(self.text) - keep
        i = len(self.pieces) - 1
        while extra > 0:  # the tokenizer rewrote earlier text: trim pieces from the end back to the common prefix
            cut = min(extra, len(self.pieces[i]))
            self.pieces[i] = self.pieces[i][: len(self.pieces[i]) - cut]
            extra -= cut
            i -= 1
        self.pieces[-1] += new[keep:]
        self.text = new


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


# ------------------------------------------------------------------------------------------ per-token facts


def token_depths(events: Iterable[StepEvent]) -> list[int]:
    """Per generated token: draft depth 1.. for accepted drafts, 0 for the target's own (bonus / prefill) token."""
    out: list[int] = []
    for e in events:
        n_drafts = e.accepted_drafts
        out.extend(i + 1 if i < n_drafts else 0 for i in range(len(e.new_token_ids)))
    return out


def token_lookup(events: Iterable[StepEvent]) -> list[bool]:
    """Per generated token: True when it was an accepted node copied from the context (core/engine/lookup.py)."""
    out: list[bool] = []
    for e in events:
        src = {n.node_id: n.source for n in e.tree}
        path = e.accepted_path[1:]
        out.extend(i < len(path) and src.get(path[i]) == "lookup" for i in range(len(e.new_token_ids)))
    return out


def token_steps(events: Iterable[StepEvent]) -> list[int]:
    """Per generated token: the step that produced it."""
    return [e.step for e in events for _ in e.new_token_ids]


def token_label(text: str, limit: int = 14) -> str:
    """Short, whitespace-visible label for a token in the tree plot."""
    if text == "":
        return "∅"
    shown = text.replace("\n", "↵").replace("\t", "⇥").replace(" ", "␣")
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


# ------------------------------------------------------------------------------------------ HTML


def _esc(s: str) -> str:
    return html.escape(s, quote=True)


def depth_class(depth: int) -> str:
    return f"d{min(depth, MAX_DEPTH_CLASS)}"


def legend_html(max_depth: int) -> str:
    """Colour key: the target's own token, then draft depths 1..max_depth."""
    items = ['<span class="tok d0">target</span>']
    items += [f'<span class="tok {depth_class(d)}">depth {d}</span>' for d in range(1, max(max_depth, 1) + 1)]
    items.append('<span class="tok d1 lookup">copied from context</span>')
    return '<div class="legend"><span class="legend-title">token source:</span>' + "".join(items) + "</div>"


def _meta(parts: Sequence[str]) -> str:
    return '<div class="panel-meta">' + " · ".join(_esc(p) for p in parts) + "</div>" if parts else ""


def baseline_html(prompt: str, text: str, meta: Sequence[str] = ()) -> str:
    """Plain continuation after the (muted) prompt."""
    return (
        _meta(meta)
        + '<div class="gen-text"><span class="prompt">' + _esc(prompt) + "</span>"
        + '<span class="plain">' + _esc(text) + "</span></div>"
    )


def eagle_html(
    prompt: str,
    pieces: Sequence[str],
    ids: Sequence[int],
    depths: Sequence[int],
    steps: Sequence[int] = (),
    meta: Sequence[str] = (),
    legend_depth: int = 0,
    lookup: Sequence[bool] = (),
) -> str:
    """Every token a span coloured by how it was produced (draft depth; underlined when the accepted node came from
    context lookup rather than the head); title shows id, depth, source and step."""
    spans = []
    for i, (piece, tid, d) in enumerate(zip(pieces, ids, depths)):
        copied = i < len(lookup) and lookup[i]
        how = (f"depth {d}, copied from context (accepted)" if copied else f"draft depth {d} (accepted)") if d \
            else "target's own token"
        step = f" · step {steps[i]}" if i < len(steps) else ""
        cls = f"tok {depth_class(d)}" + (" lookup" if copied else "") + (" empty" if piece == "" else "")
        spans.append(f'<span class="{cls}" title="id {tid} · {how}{step}">{_esc(piece)}</span>')
    legend = legend_html(legend_depth) if legend_depth else ""
    return (
        _meta(meta) + legend
        + '<div class="gen-text"><span class="prompt">' + _esc(prompt) + "</span>" + "".join(spans) + "</div>"
    )


def panel_meta(stats: RunStats, running: bool, finished: bool) -> list[str]:
    """One line over each panel: tokens, speed, state."""
    state = "generating…" if running else ("done" if finished else "stopped")
    if not stats.new_tokens:
        return [state]
    return [f"{stats.new_tokens} tokens", f"{stats.tokens_per_s:.1f} tok/s", f"{stats.seconds:.2f} s", state]


def identical_badge(base_ids: Sequence[int], eagle_ids: Sequence[int], greedy: bool, complete: bool,
                    divergence: Divergence | None = None, dtype: str = "fp32", bit_exact: bool | None = None) -> str:
    """Losslessness check shown at temperature 0: are the two outputs the same token ids? When they part ways,
    `divergence` (core/engine/exactness.py, from the margins the decoders recorded) says whether a numerical near tie
    explains it. `bit_exact` (both runs' RunStats.bit_exact: every forward inside the rows the start-up probe found
    row-invariant, docs/trust.md §6): identical outputs are then identical by construction, said so, and a
    divergence is a mismatch, never a near tie, since no rounding differed."""
    if not greedy:
        return ('<span class="badge neutral">sampling (T &gt; 0): the seed fixes each output; the two methods draw '
                "differently but from the target's own distribution</span>")
    n = min(len(base_ids), len(eagle_ids))
    first_diff = next((i for i in range(n) if base_ids[i] != eagle_ids[i]), None)
    if first_diff is not None:
        if bit_exact:
            return (f'<span class="badge bad">✗ outputs differ at token {first_diff + 1} in a bit-exact {dtype} run: '
                    "rounding cannot explain it (a bug; please report the prompt and settings)</span>")
        return divergence_badge(divergence, dtype) if divergence else (
            f'<span class="badge bad">✗ outputs differ at token {first_diff + 1}</span>')
    if complete and len(base_ids) == len(eagle_ids):
        exact = (f", bit-exact in {dtype}" if bit_exact else "")
        tip = (' title="every tree verify computed each row exactly as the one-token step of plain decoding does '
               '(row-invariant attention and kernels, docs/trust.md §6)"' if bit_exact else "")
        return f'<span class="badge good"{tip}>✓ token-identical{exact} ({n} tokens)</span>'
    return f'<span class="badge neutral">identical so far ({n} tokens compared)</span>'


def _margin(x: float | None) -> str:
    return "–" if x is None else f"{x:.3g}"


def divergence_badge(d: Divergence, dtype: str) -> str:
    """The badge for two greedy outputs that part ways at token d.index + 1: "numerical near tie (<dtype>)" when the
    two margins together are within the dtype's rounding change of a logit difference, "mismatch" otherwise; a <details> holds the short explanation."""
    where = f"at token {d.index + 1}"
    margins = (f"top-2 margin {_margin(d.baseline_margin)} (baseline) vs {_margin(d.method_margin)} (EAGLE-2), "
               f"sum vs rounding tolerance {_margin(d.tolerance)} = {NEAR_TIE_ULPS} {dtype} ulps at the top logit")
    if d.near_tie:
        summary = f"≈ numerical near tie ({dtype}) {where}"
        why = (f"{margins}. EAGLE-2 scores many tokens in one target forward, plain decoding one at a time; in "
               f"{dtype} the two shapes round differently, so the same logit can differ by a few units in the last "
               "place. Here the target's top two tokens were that close, so both picks are the target's greedy "
               "choice up to rounding, and the texts part ways from there. In fp32 the outputs are token-identical "
               "(README, Exactness).")
        cls = "tie"
    else:
        summary = f"✗ mismatch {where}"
        why = (f"{margins}. The two margins together exceed what {dtype} rounding can change in a logit "
               "difference (or a margin was not recorded), so rounding does not explain this "
               "divergence: it would be a bug in the engine. Please report the prompt and settings.")
        cls = "bad"
    return (f'<details class="divergence {cls}" id="divergence"><summary class="badge {cls}">{_esc(summary)} '
            f'<span class="why-link">why?</span></summary><div class="why">{_esc(why)}</div></details>')


def is_identical(base_ids: Sequence[int], eagle_ids: Sequence[int]) -> bool:
    return list(base_ids) == list(eagle_ids)


def _ms(x: float) -> str:
    return f"{x * 1000:.0f} ms" if x < 1 else f"{x:.2f} s"


def _drafted(st: RunStats) -> str:
    return f"{st.accept_rate:.1%} ({st.accepted_drafts} of {st.drafted_tokens} drafted)"


def _copied(st: RunStats) -> str:
    """Accepted drafts copied from the context vs drafted by the head: token-level vs feature-level gains."""
    share = f" ({st.lookup_share:.0%} copied)" if st.lookup_share is not None else ""
    return f"{st.accepted_lookup} / {st.accepted_head}{share}"


def _looped(st: RunStats) -> str:
    return "no" if st.loop_period is None else f"yes: a {st.loop_period}-token block repeats (core/engine/loops.py)"


def stat_rows(lanes: Sequence[RunStats]) -> list[tuple[str, list[str]]]:
    """The statistics table's rows, (metric, one cell per lane), the baseline first: the drafting metrics are "–"
    for it."""
    base, drafting = lanes[0], lanes[1:]
    return [
        ("new tokens", [str(s.new_tokens) for s in lanes]),
        ("tokens / s", [f"{s.tokens_per_s:.1f}" for s in lanes]),
        ("compute time", [_ms(s.seconds) for s in lanes]),
        ("time to first token", [_ms(s.ttft_s) for s in lanes]),
        ("target forward passes", [str(s.target_forwards) for s in lanes]),
        ("τ (tokens per target forward)", [f"{s.tau:.2f}" for s in lanes]),
        ("mean acceptance length (vLLM)", ["–"] + [f"{mean_acceptance_length(s.steps, s.accepted_drafts):.2f}"
                                                   for s in drafting]),
        ("drafts · draft tokens · accepted tokens",
         ["–"] + [f"{s.steps} · {s.drafted_tokens} · {s.accepted_drafts}" for s in drafting]),
        ("draft / verify / other time", [f"– / {_ms(base.verify_s)} / {_ms(base.other_s)}"]
         + [f"{_ms(s.draft_s)} / {_ms(s.verify_s)} / {_ms(s.other_s)}" for s in drafting]),
        ("draft acceptance", ["–"] + [_drafted(s) for s in drafting]),
        ("accepted from lookup / head", ["–"] + [_copied(s) for s in drafting]),
        ("ends in a loop", [_looped(s) for s in lanes]),
    ]


def stats_headline(base: RunStats, eagle: RunStats, badge: str, compare: RunStats | None, compare_label: str) -> str:
    """EAGLE-2's speedup over the baseline (marked slower under 1x), a third lane's own speedup and EAGLE-2's over
    it, then `badge`; the badge alone while no speedup is known."""
    gain = speedup(eagle, base)
    if not gain:
        return f'<div class="stats-head">{badge}</div>'
    extra = ""
    if compare is not None and speedup(compare, base):
        extra = (f'<span class="speedup compare-speedup">{_esc(compare_label)} {speedup(compare, base):.2f}×</span>'
                 f'<span class="speedup vs-compare">EAGLE-2 vs {_esc(compare_label)} {speedup(eagle, compare):.2f}×'
                 "</span>")
    return (f'<div class="stats-head"><span class="speedup{" slower" if gain < 1 else ""}">{gain:.2f}× speedup'
            f"</span>{extra}{badge}</div>")


def stats_html(base: RunStats, eagle: RunStats, badge: str = "", compare: RunStats | None = None,
               compare_label: str = "") -> str:
    """Side-by-side table of request statistics (metric names as in docs/ARCHITECTURE.md §4): baseline, the
    token-level lane when one races (`compare`, titled `compare_label`), and EAGLE-2. The headline is EAGLE-2's
    speedup over the baseline; a third lane adds its own speedup and EAGLE-2's over it."""
    lanes = [base] + ([compare] if compare is not None else []) + [eagle]
    body = "".join(f"<tr><th>{_esc(a)}</th>" + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>"
                   for a, cells in stat_rows(lanes))
    titles = [BASELINE.title] + ([compare_label] if compare is not None else []) + [EAGLE.title]
    return (
        stats_headline(base, eagle, badge, compare, compare_label)
        + f'<table class="stats-table{" lanes-3" if compare is not None else ""}"><thead><tr><th></th>'
        + "".join(f"<th>{_esc(t)}</th>" for t in titles)
        + f"</tr></thead><tbody>{body}</tbody></table>"
        + '<div class="stats-note">Times are compute time measured inside the engine (UI work excluded). '
        "Acceptance rate counts every drafted tree node, so tree rates look low; τ counts the bonus token. vLLM's "
        "names: mean acceptance length = 1 + accepted tokens / drafts (verify steps; τ also counts the prefill "
        "pass), draft acceptance rate = accepted / draft tokens.</div>"
    )
