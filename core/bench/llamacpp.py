"""llama.cpp as a bench peer (method `llamacpp`): plain greedy decoding of a GGUF file through llama-cpp-python,
timed beside our lanes in the same interleaved run (core/bench/protocol.py).

Each `--gguf FILE` races as its own row, `llamacpp-LABEL`, LABEL being the quantisation the file name spells (Q4_K_M,
Q8_0, BF16, ...; else the file's stem). The runner decodes the very prompt ids our lanes decode (`Llama.generate` on
ids, never on text), once the GGUF's tokenizer is seen to give our tokenizer's ids on a probe text, and stops where our
decoders stop: after the first EOS (kept) or at max new tokens. Every run starts from an empty cache (`reset()`), so
a repeated prompt is prefilled again, as our lanes prefill it.

A GGUF holds its own weights: a quantised file is another model than the target, so its rows name the file
(`weights`) and a difference from baseline is information, not a divergence to explain (no margins are read).

llama-cpp-python is an optional extra (requirements-extra.txt): pip builds llama.cpp from source, minutes of
compiling, so it is imported only when the method runs, and a missing package is a one-line error at validation.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch

from core.bench.questions import BenchError
from core.bench.runners import Digest, Outcome, Runner
from core.engine.config import DecodeConfig

METHOD = "llamacpp"
INSTALL = ("method llamacpp needs llama-cpp-python: pip install -r requirements-extra.txt "
           "(it compiles llama.cpp from source, which takes minutes)")
CONTEXT = 8192  # n_ctx: the longest prompt (a second turn) plus max new tokens fits
# The quantisation at the end of a GGUF file name: -Q4_K_M, .Q4_1, -q8_0, -IQ4_XS, -bf16, -f16, -f32.
QUANT = re.compile(r"[-_.]((?:I?Q\d+(?:_[A-Z0-9]+)*)|BF16|F16|F32)$", re.IGNORECASE)
# Code, accents, CJK, a symbol and runs of spaces: a byte-level BPE of another family splits it differently.
TOKENIZER_PROBE = "def fib(n):\n    return n if n < 2 else fib(n - 1)  # Größe, 東京 ✓\n\n"

# (path, threads, n_ctx) -> an engine with Llama's tokenize / reset / generate (tests pass a fake one)
Loader = Callable[[str, int, int], Any]


def available() -> bool:
    """Whether llama-cpp-python is installed (found without importing it)."""
    return importlib.util.find_spec("llama_cpp") is not None


def version() -> str | None:
    """llama-cpp-python's version, None when it is not installed."""
    if not available():
        return None
    import llama_cpp

    return str(llama_cpp.__version__)


def gguf_label(path: str) -> str:
    """The quantisation a GGUF's file name spells (upper case), else the file's stem."""
    stem = Path(path).name
    stem = stem[: -len(".gguf")] if stem.lower().endswith(".gguf") else stem
    m = QUANT.search(stem)
    return m.group(1).upper() if m else stem


def gguf_rows(paths: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """(row name, path) per --gguf file, in order: `llamacpp-LABEL`, or `llamacpp-STEM` where two files share a
    label. BenchError when a file is missing or two rows would share a name."""
    for p in paths:
        if not Path(p).is_file():
            raise BenchError(f"--gguf file {p!r} not found")
    labels = [gguf_label(p) for p in paths]
    names = [f"{METHOD}-{label if labels.count(label) == 1 else Path(p).stem}" for p, label in zip(paths, labels)]
    if len(set(names)) != len(names):
        raise BenchError(f"--gguf names one file twice, or two files of one name: {', '.join(paths)}")
    return tuple(zip(names, paths))


def load_llama(path: str, threads: int, n_ctx: int) -> Any:
    """llama_cpp.Llama on `path`: `threads` for decoding and prefill, logits of the last position only."""
    try:
        from llama_cpp import Llama
    except ImportError as e:
        raise BenchError(INSTALL) from e
    return Llama(model_path=path, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, logits_all=False,
                 verbose=False, seed=0)


def check_tokenizer(engine: Any, tok: Any, path: str) -> None:
    """BenchError unless the GGUF's tokenizer gives our tokenizer's ids on TOKENIZER_PROBE: the ids we feed it must
    mean to it what they mean to the target."""
    ours = list(tok.encode(TOKENIZER_PROBE, add_special_tokens=False))
    theirs = [int(t) for t in engine.tokenize(TOKENIZER_PROBE.encode("utf-8"), add_bos=False, special=True)]
    if ours != theirs:
        raise BenchError(f"{Path(path).name} tokenizes differently from the target ({len(theirs)} ids against "
                         f"{len(ours)} on a probe text): it is not a GGUF of this model")


def greedy_tokens(engine: Any, ids: list[int], max_new: int, eos_ids: Iterable[int]) -> list[int]:
    """Greedy new tokens after `ids` from an empty cache: up to and including the first EOS, at most `max_new`."""
    if len(ids) + max_new > CONTEXT:
        raise ValueError(f"llamacpp: a prompt of {len(ids)} tokens plus {max_new} new exceeds its context {CONTEXT}")
    eos = frozenset(eos_ids)
    engine.reset()  # no cache reuse across prompts or rounds: every run prefills its whole prompt
    out: list[int] = []
    for t in engine.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
        out.append(int(t))
        if out[-1] in eos or len(out) >= max_new:
            break
    return out


def llamacpp_runner(engine: Any, eos_ids: Iterable[int], max_new: int, weights: str) -> tuple[Runner, Digest]:
    """The timed runner (one whole greedy generation) and its digest: one target forward per new token (the prefill
    gives the first), as for any plain decoder."""
    eos = frozenset(eos_ids)

    def run(ids: list[int], seed: int) -> list[int]:  # greedy: the seed changes nothing
        return greedy_tokens(engine, ids, max_new, eos)

    def digest(raw: object, seconds: float) -> Outcome:
        tokens = tuple(raw)  # type: ignore[arg-type]
        return Outcome(tokens, seconds, len(tokens), step_tokens=(1,) * len(tokens), weights=weights)

    return run, digest


def runner_for(path: str, load: Loader = load_llama) -> Callable[[Any, Any, DecodeConfig], tuple[Runner, Digest]]:
    """The peer's runner builder for one GGUF file: loads it with the bench's thread count (torch's, which --threads
    sets), checks its tokenizer against the target's, and races it greedy with the run's max new tokens and EOS."""

    def build(target: Any, tok: Any, cfg: DecodeConfig) -> tuple[Runner, Digest]:
        if not cfg.sampling.greedy:
            raise BenchError("method llamacpp races at temperature 0 only")
        engine = load(path, torch.get_num_threads(), CONTEXT)
        check_tokenizer(engine, tok, path)
        return llamacpp_runner(engine, target.eos_ids, cfg.max_new_tokens, Path(path).name)

    return build
