"""Test helpers for the UI: a character tokenizer, decoders that replay canned StepEvents, hand-built EAGLE-2
steps, and a tiny random Llama stack (model + byte-level BPE tokenizer + untrained head) built offline in code."""
from __future__ import annotations

from typing import Callable, Iterator

from core.engine.config import DecodeConfig
from core.engine.events import StepEvent, TreeNode

EOS = 0


class CharTokenizer:
    """id = Unicode code point; id 0 is EOS (a special token, dropped by skip_special_tokens)."""

    all_special_ids = [EOS]

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join("" if (i == EOS and skip_special_tokens) else ("<eos>" if i == EOS else chr(i)) for i in ids)


class ReplayDecoder:
    """Yields canned events (step_ms as recorded), honouring should_stop between steps like the core decoders; a
    core.engine.events.Decoder with no model behind it (target None)."""

    target = None

    def __init__(self, method: str, events: list[StepEvent], note: str = "", log: list | None = None):
        self.method, self.events, self.note = method, events, note
        self.log = log if log is not None else []  # (method, step) in the order steps were produced
        self.calls: list[tuple[list[int], DecodeConfig]] = []
        self.closed = False
        self.yielded = 0

    def generate(self, prompt_ids: list[int], cfg: DecodeConfig,
                 should_stop: Callable[[], bool] | None = None) -> Iterator[StepEvent]:
        self.calls.append((list(prompt_ids), cfg))
        try:
            for ev in self.events:
                self.yielded += 1
                self.log.append((self.method, ev.step))
                yield ev
                if ev.finished or (should_stop and should_stop()):
                    return
        finally:
            self.closed = True


def baseline_events(text: str, ms: float = 10.0, eos: bool = False) -> list[StepEvent]:
    ids = [ord(c) for c in text] + ([EOS] if eos else [])
    return [StepEvent(step=i, method="baseline", new_token_ids=(t,), verify_ms=ms, step_ms=ms,
                      finished=i == len(ids) - 1) for i, t in enumerate(ids)]


def chain_tree(accepted: list[int], bonus_root: int, rejected: list[tuple[int, int, float]] = (),
               ) -> tuple[tuple[TreeNode, ...], tuple[int, ...]]:
    """A tree whose accepted path is root -> accepted[0] -> accepted[1] ...; extra rejected nodes as
    (parent_node_id, token_id, score). Scores along the path fall by log(0.8) per level."""
    import math

    nodes = [TreeNode(0, -1, bonus_root, 0, 0.0, True)]
    for i, tok in enumerate(accepted):
        nodes.append(TreeNode(i + 1, i, tok, i + 1, (i + 1) * math.log(0.8), True))
    for parent, tok, score in rejected:
        nid = len(nodes)
        nodes.append(TreeNode(nid, parent, tok, nodes[parent].depth + 1, score, False))
    return tuple(nodes), tuple(range(len(accepted) + 1))


def eagle_events(text: str, plan: list[int], ms: float = 12.0) -> list[StepEvent]:
    """Prefill token, then steps that accept plan[k] drafts plus one target token each, spelling `text`."""
    ids = [ord(c) for c in text]
    events = [StepEvent(0, "eagle2", (ids[0],), verify_ms=ms, step_ms=ms, finished=len(ids) == 1)]
    pos, step = 1, 0
    while pos < len(ids):
        step += 1
        k = plan[(step - 1) % len(plan)]
        drafts = ids[pos:pos + k]
        bonus = ids[pos + len(drafts)] if pos + len(drafts) < len(ids) else None
        tree, path = chain_tree(drafts, ids[pos - 1], rejected=[(0, ord("#"), -2.0), (0, ord("~"), -3.0)])
        new = tuple(drafts) + ((bonus,) if bonus is not None else ())
        pos += len(new)
        events.append(StepEvent(step, "eagle2", new, tree, path, draft_ms=ms / 3, verify_ms=2 * ms / 3,
                                step_ms=ms, draft_forwards=3, finished=pos >= len(ids)))
    return events


# ------------------------------------------------------------------------------------------ tiny real stack

TINY_CORPUS = [
    "Once upon a time there was a little fox who lived in the forest.",
    "def add(a, b):\n    return a + b\n",
    "The capital of France is Paris. The capital of Italy is Rome.",
    "1. eggs\n2. milk\n3. flour\n",
    "héllo wörld, naïve café, 日本語のテキスト, emoji 🦅🚀",
]


def tiny_tokenizer():
    """Byte-level BPE (so multi-byte characters span several tokens) trained in memory; no files, no network."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TINY_CORPUS * 4, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")


def tiny_target_for(tok, seed: int = 0):
    """A tiny random Llama (2 layers, hidden 64, fp32, CPU) over `tok`'s vocabulary; the shared conftest builder
    scales its init so greedy output does not collapse into a short loop."""
    from conftest import tiny_target

    return tiny_target("llama", vocab=len(tok), seed=seed)


def tiny_stack(seed: int = 0, reference: list[int] | None = None):
    """(tokenizer, BaselineDecoder, Eagle2Decoder) over a tiny random Llama with an untrained head. With `reference`
    (prompt + expected output ids) the drafter plants it (conftest.OracleDrafter), so drafts of every depth get
    accepted: still lossless, and the colours have something to show."""
    from conftest import OracleDrafter, tiny_head

    from core.engine.baseline import BaselineDecoder
    from core.drafters.eagle import EagleDrafter
    from core.engine.eagle import Eagle2Decoder

    tok = tiny_tokenizer()
    target = tiny_target_for(tok, seed)
    head = tiny_head(target, seed=seed)
    drafter = OracleDrafter(head, target, reference, seed=seed) if reference else EagleDrafter(head, target)
    return tok, BaselineDecoder(target), Eagle2Decoder(target, drafter)


class Paced:
    """Wraps a decoder and sleeps between its steps (outside the measured step time), so a browser test can press
    Stop while a tiny model is still generating."""

    def __init__(self, decoder, seconds: float = 0.02):
        self.decoder, self.seconds = decoder, seconds
        self.method = decoder.method
        self.note, self.target = decoder.note, decoder.target

    def generate(self, prompt_ids, cfg, should_stop=None):
        import time

        for ev in self.decoder.generate(prompt_ids, cfg, should_stop):
            time.sleep(self.seconds)
            yield ev
