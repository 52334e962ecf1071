"""Rendering: exact incremental decoding, per-token depth colouring, escaping, badges (pure, no Gradio server)."""
from __future__ import annotations

import html as htmlmod
import re

import pytest

from app.render import (
    Detokenizer,
    baseline_html,
    eagle_html,
    identical_badge,
    stats_html,
    token_depths,
    token_lookup,
    token_label,
)
from core.engine.events import StepEvent, summarize
from fakes import CharTokenizer, baseline_events, eagle_events, tiny_tokenizer


@pytest.fixture(scope="module")
def bpe():
    return tiny_tokenizer()


TEXTS = [
    "héllo wörld, naïve café",
    "日本語のテキスト 🦅🚀 done",
    "def add(a, b):\n    return a + b\n\n\tx = '<b>&amp;</b>'",
]


@pytest.mark.parametrize("text", TEXTS)
def test_pieces_concatenate_to_exact_decode_with_split_characters(bpe, text):
    """Byte-level BPE splits CJK and emoji over several tokens; pieces must never contain half characters."""
    prompt = bpe.encode("Once upon a time")
    ids = bpe.encode(text)
    assert len(ids) > len(text.split())  # several multi-token characters in play
    det = Detokenizer(bpe, prompt)
    for i in ids:
        det.add([i])
        assert "".join(det.pieces) == det.text
        assert "\ufffd" not in det.text  # partial characters are held back, not shown as replacement chars
    det.flush()
    assert len(det.pieces) == len(ids)
    assert "".join(det.pieces) == bpe.decode(prompt + ids)[len(bpe.decode(prompt)):]
    assert "".join(det.pieces) == text


def test_a_character_belongs_to_the_token_that_completes_it(bpe):
    ids = bpe.encode("🦅")
    assert len(ids) >= 2
    det = Detokenizer(bpe)
    det.add(ids)
    assert det.pieces[:-1] == [""] * (len(ids) - 1) and det.pieces[-1] == "🦅"


class CleanupTokenizer(CharTokenizer):
    """Rewrites earlier text like clean_up_tokenization_spaces does (' .' -> '.')."""

    def decode(self, ids, skip_special_tokens=True):
        return super().decode(ids, skip_special_tokens).replace(" .", ".")


def test_pieces_stay_exact_when_the_tokenizer_rewrites_earlier_text():
    tok = CleanupTokenizer()
    det = Detokenizer(tok)
    det.add(tok.encode("end ."))
    det.flush()
    assert "".join(det.pieces) == "end." == tok.decode(tok.encode("end ."))
    assert len(det.pieces) == 5


def test_token_depths_follow_accepted_path_and_bonus():
    events = eagle_events("Hello world!", plan=[2, 3, 0])
    depths = token_depths(events)
    # prefill H (target) | e l (d1 d2) + l (target) | o ' ' w (d1 d2 d3) + o | r | l d (d1 d2) + !
    assert depths == [0, 1, 2, 0, 1, 2, 3, 0, 0, 1, 2, 0]


def test_clipped_step_keeps_draft_depths_for_every_token():
    """A step cut at max_new_tokens may end on a draft token: it is still a draft, not the target's token."""
    from fakes import chain_tree

    tree, path = chain_tree([ord("a"), ord("b"), ord("c")], ord("x"))
    ev = StepEvent(1, "eagle2", (ord("a"), ord("b")), tree, path, step_ms=1.0, finished=True)
    assert token_depths([ev]) == [1, 2]


def test_eagle_html_puts_each_token_in_its_depth_class():
    tok = CharTokenizer()
    events = eagle_events("Hello world!", plan=[2, 3, 0])
    ids = [t for e in events for t in e.new_token_ids]
    det = Detokenizer(tok)
    det.add(ids)
    html = eagle_html("Say: ", det.pieces, ids, token_depths(events), legend_depth=3)
    spans = re.findall(r'<span class="tok (d\d+)[^"]*" title="id (\d+) · ([^"]*)">([^<]*)</span>', html)
    body = [s for s in spans if s[3] not in ("target",) and not s[3].startswith("depth")]
    assert [(cls, chr(int(i)), text) for cls, i, _, text in body] == [
        ("d0", "H", "H"), ("d1", "e", "e"), ("d2", "l", "l"), ("d0", "l", "l"), ("d1", "o", "o"),
        ("d2", " ", " "), ("d3", "w", "w"), ("d0", "o", "o"), ("d0", "r", "r"), ("d1", "l", "l"),
        ("d2", "d", "d"), ("d0", "!", "!")]
    assert 'class="legend"' in html and "depth 3" in html and "depth 4" not in html


def test_html_is_escaped_and_whitespace_kept():
    text = "<script>alert('x')</script> & \"q\"\n\n    indented"
    tok = CharTokenizer()
    det = Detokenizer(tok)
    det.add(tok.encode(text))
    eh = eagle_html("<b>prompt</b>", det.pieces, tok.encode(text), [0] * len(text))
    bh = baseline_html("<b>prompt</b>", text)
    for h in (eh, bh):
        assert "<script>" not in h and "<b>prompt" not in h and "&lt;b&gt;prompt" in h
    # raw newlines and spaces survive (white-space: pre-wrap renders them); unescaping gives the text back
    plain = re.search(r'<span class="plain">(.*)</span></div>$', bh, re.S).group(1)
    assert "\n\n    " in plain and htmlmod.unescape(plain) == text
    spans = re.findall(r'<span class="tok [^"]*" title="[^"]*">([^<]*)</span>', eh)
    assert htmlmod.unescape("".join(spans)) == text


def test_empty_pieces_get_a_visible_marker_class():
    tok = CharTokenizer()
    det = Detokenizer(tok)
    det.add([ord("a"), 0])  # 0 = EOS, decodes to nothing
    html = eagle_html("", det.pieces, [ord("a"), 0], [0, 1])
    assert 'class="tok d1 empty"' in html


def test_divergence_badge_labels_a_near_tie_and_a_mismatch():
    """Issue 15: a planted near tie (margin 0.125 at a top logit of 20 in bf16) and a planted real mismatch (both
    margins 3.0) get their labels, the token number, both margins and the explanation."""
    from core.engine.exactness import classify

    base, other = [1, 2, 3, 4], [1, 2, 9, 4]
    tie = classify(base, other, [1, 1, 0.125, 1], [1, 1, 0.5, 1], [20.0] * 4, [20.0] * 4, "bfloat16")
    bug = classify(base, other, [1, 1, 3.0, 1], [1, 1, 3.0, 1], [20.0] * 4, [20.0] * 4, "bfloat16")
    html = identical_badge(base, other, greedy=True, complete=True, divergence=tie, dtype="bf16")
    assert "numerical near tie (bf16) at token 3" in html and "badge tie" in html and "<details" in html
    assert "0.125 (baseline) vs 0.5 (EAGLE-2)" in html and "tolerance 2 = 16 bf16 ulps" in html
    assert "round differently" in html
    html = identical_badge(base, other, greedy=True, complete=True, divergence=bug, dtype="bf16")
    assert "✗ mismatch at token 3" in html and "badge bad" in html and "bug" in html and "near tie" not in html
    assert "differ at token 3" in identical_badge(base, other, greedy=True, complete=True)  # no record: plain
    assert "token-identical" in identical_badge(base, base, greedy=True, complete=True, divergence=None)


def test_identical_badge():
    assert "token-identical" in identical_badge([1, 2, 3], [1, 2, 3], greedy=True, complete=True)
    assert "differ at token 2" in identical_badge([1, 2, 3], [1, 5, 3], greedy=True, complete=True)
    assert "so far" in identical_badge([1, 2, 3], [1, 2], greedy=True, complete=False)
    assert "sampling" in identical_badge([1], [2], greedy=False, complete=True)


def test_a_bit_exact_run_says_so_and_never_calls_a_divergence_a_near_tie():
    """Both runs bit-exact (docs/trust.md §6): identical outputs say "bit-exact in bf16"; a divergence is a bug, even
    where the margins would have made it a near tie in an ordinary run."""
    from core.engine.exactness import classify

    html = identical_badge([1, 2, 3], [1, 2, 3], greedy=True, complete=True, dtype="bf16", bit_exact=True)
    assert "token-identical, bit-exact in bf16 (3 tokens)" in html and "row-invariant" in html
    assert "bit-exact" not in identical_badge([1, 2], [1, 2], greedy=True, complete=True, dtype="bf16",
                                              bit_exact=False)
    base, other = [1, 2, 3, 4], [1, 2, 9, 4]
    tie = classify(base, other, [1, 1, 0.125, 1], [1, 1, 0.5, 1], [20.0] * 4, [20.0] * 4, "bfloat16")
    html = identical_badge(base, other, greedy=True, complete=True, divergence=tie, dtype="bf16", bit_exact=True)
    assert "badge bad" in html and "bit-exact bf16 run" in html and "near tie" not in html


def test_stats_html_reports_speedup_tau_and_split():
    b = summarize(baseline_events("Hello world!", ms=10))
    e = summarize(eagle_events("Hello world!", plan=[2, 3, 0], ms=12))
    html = stats_html(b, e, identical_badge([1], [1], True, True))
    assert "2.00× speedup" in html
    assert "2.40" in html  # tau = 12 tokens / 5 target forwards
    assert "time to first token" in html and "draft / verify / other time" in html and "token-identical" in html
    assert "accepted from lookup / head" in html and "ends in a loop" in html


def test_stats_html_says_what_copying_did_and_flags_a_loop():
    """The statistics split accepted drafts into copied (lookup) and drafted (head) and flag a looping output."""
    from core.engine.events import TreeNode

    nodes = (TreeNode(0, -1, 1, 0, 0.0, True, "root"), TreeNode(1, 0, 2, 1, -0.1, True),
             TreeNode(2, 1, 3, 2, 0.0, True, "lookup"), TreeNode(3, 2, 4, 3, 0.0, True, "lookup"))
    loop = [StepEvent(0, "eagle2", (1,), step_ms=1.0)] + [
        StepEvent(i, "eagle2", (2, 3, 4, 1), nodes, (0, 1, 2, 3), step_ms=1.0) for i in range(1, 40)]
    base = summarize([StepEvent(i, "baseline", ((i % 4) + 1,), step_ms=1.0) for i in range(157)])
    html = stats_html(base, summarize(loop))
    assert "78 / 39 (67% copied)" in html  # 39 steps x (2 copied + 1 head)
    assert "yes: a 4-token block repeats" in html


def test_token_label_shows_whitespace():
    assert token_label(" the") == "␣the"
    assert token_label("\n") == "↵"
    assert token_label("") == "∅"
    assert len(token_label("x" * 40)) == 14


def test_lookup_tokens_are_marked_copied():
    """Accepted nodes that came from context lookup carry the 'lookup' class and say so in their title."""
    from core.engine.events import TreeNode

    nodes = (TreeNode(0, -1, 1, 0, 0.0, True, "root"), TreeNode(1, 0, ord("a"), 1, -0.1, True),
             TreeNode(2, 1, ord("b"), 2, 0.0, True, "lookup"), TreeNode(3, 0, ord("z"), 1, 0.0, False, "lookup"))
    ev = StepEvent(1, "eagle2", (ord("a"), ord("b"), ord("c")), nodes, (0, 1, 2), step_ms=1.0)
    assert token_lookup([ev]) == [False, True, False]
    assert token_depths([ev]) == [1, 2, 0]
    html = eagle_html("", ["a", "b", "c"], list(ev.new_token_ids), [1, 2, 0], lookup=token_lookup([ev]))
    assert re.search(r'class="tok d2 lookup" title="id 98 · depth 2, copied from context', html)
    assert 'class="tok d1" title="id 97 · draft depth 1' in html
