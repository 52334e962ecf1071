"""Source text the training pool lacks, written by the target itself: German sentences for translation prompts.

Translation is the head's weakest kind of text. The base model continues "Translate German to English: <German>" in
German, and the training pool (prompts.jsonl, text.jsonl) holds no German, so the head has never seen what the
target writes there. No German corpus ships with the project, so the target writes its own: it samples a sentence
after a German opening word (below T=1, where a small model stays fluent), a filter keeps what reads as German,
and each sentence becomes the source of a translation prompt. The main data stage (`python -m core.train --prompts
<this file>`) then lets the target continue those prompts on-policy, which is what the head meets at inference.

    python -m core.train.sources --out runs/de-sources/prompts.jsonl --n 1152

Batches are written one file each under <out>.parts/ and skipped when present, so an interrupted run resumes.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import time
from pathlib import Path
from typing import Callable

from core.cli import Parser, fail

PREFIX = "Translate German to English: "
OPENERS = ("Die", "Der", "Das", "Ich", "Wir", "Es", "In der", "Im", "Nach", "Am", "Seit", "Auch", "Bei der", "Ein",
           "Eine", "Viele", "Er", "Sie", "Man", "Heute", "Dies", "Diese", "Dieser", "Zudem", "Allerdings", "Doch",
           "Laut", "Mit", "Vor", "Nur", "Wenn", "Als", "Trotz", "Für", "Unter", "Zwar", "Damit", "Bereits", "So",
           "Nun", "Jetzt", "Dabei", "Hier", "Wie", "Was", "Warum", "Deutschland", "Berlin", "Experten", "Die Polizei")
STOPWORDS = frozenset(
    "der die das und ist nicht ein eine einen einem einer zu in den mit von sich auf für dem des im es sie wir ich "
    "er auch wird werden hat haben sind war waren bei nach aus als an am zum zur noch wie über oder aber so nur "
    "dass kann können muss mehr sehr schon wenn man vor um durch gegen unter seit dies diese dieser dieses hier".split())
# (template, weight): the WMT/T5 wording the base model knows, and two other ways users ask
TEMPLATES = ((PREFIX + "{s}", 0.6), ("German: {s}\nEnglish:", 0.2), ("Übersetze ins Englische: {s}", 0.2))


def first_sentences(text: str, max_sentences: int = 2, min_words: int = 6, max_words: int = 60) -> str | None:
    """The first line's first complete sentences (up to `max_sentences`), or None when it holds no usable one."""
    line = text.strip().split("\n", 1)[0].strip()
    ends = [m.end() for m in re.finditer(r"[.!?](?=\s|$)", line)]
    if not ends:
        return None
    s = line[: ends[min(max_sentences, len(ends)) - 1]].strip()
    n = len(s.split())
    return s if min_words <= n <= max_words else None


def reads_german(s: str, min_share: float = 0.2) -> bool:
    """At least `min_share` of the words are common German function words, and nothing looks like markup, code or a
    translation request of its own (the model likes to chain them)."""
    if re.search(r"[<>{}\[\]|_*#@\\]|https?:|www\.|[Tt]ranslat", s):
        return False
    words = re.findall(r"[A-Za-zÄÖÜäöüß]+", s)
    if len(words) < 6 or sum(len(w) for w in words) < 0.7 * len(s.replace(" ", "")):
        return False
    return sum(w.lower() in STOPWORDS for w in words) / len(words) >= min_share


def pick_template(templates: tuple[tuple[str, float], ...], rng: random.Random) -> str:
    """One template of (template, weight) pairs, drawn by weight (the first when the weights sum under 1)."""
    r, acc = rng.random(), 0.0
    for template, weight in templates:
        acc += weight
        if r < acc:
            return template
    return templates[0][0]


def translation_prompt(sentence: str, rng: random.Random) -> str:
    """One of TEMPLATES (by weight) around the German sentence."""
    return pick_template(TEMPLATES, rng).format(s=sentence)


def write_sources(target, tok, n: int, out: Path, batch: int = 96, new_tokens: int = 48, temperature: float = 0.7,
                  seed: int = 0, log=print) -> dict:
    """Sample German sentences batch by batch until `n` pass the filters; write `n` prompt rows to `out` (jsonl:
    id, source, prompt, sentence). Returns counts: rows sampled, kept, seconds."""
    from core.train.generation import generate_batch

    parts = Path(str(out) + ".parts")
    parts.mkdir(parents=True, exist_ok=True)
    kept: list[str] = []
    seen: set[str] = set()
    sampled, seconds, i = 0, 0.0, 0
    while len(kept) < n:
        path = parts / f"batch_{i:04d}.json"
        if not path.exists():
            rng = random.Random(seed * 100_003 + i)
            openers = [rng.choice(OPENERS) for _ in range(batch)]
            enc = [tok(PREFIX + o, add_special_tokens=True).input_ids for o in openers]
            t0 = time.time()
            seqs = generate_batch(target, enc, new_tokens, True, seed * 100_003 + i, temperature=temperature)
            texts = [o + tok.decode(ids[len(e):], skip_special_tokens=True) for o, e, (ids, *_) in
                     zip(openers, enc, seqs)]
            path.write_text(json.dumps({"texts": texts, "seconds": round(time.time() - t0, 1)}))
        rec = json.loads(path.read_text())
        sampled += len(rec["texts"])
        seconds += rec["seconds"]
        good = 0
        for t in rec["texts"]:
            s = first_sentences(t)
            if s and reads_german(s) and s not in seen:
                seen.add(s)
                kept.append(s)
                good += 1
        log(f"batch {i}: kept {good} of {len(rec['texts'])} ({len(kept)}/{n}) in {rec['seconds']}s")
        i += 1
        if i >= 8 and len(kept) < 0.05 * sampled:  # the model does not write German here: stop, say so
            raise ValueError(f"only {len(kept)} of {sampled} samples read as German; is this a multilingual model?")
    rng = random.Random(seed)
    rows = [{"id": f"de_source:{seed}:{k}", "source": "target-written German", "sentence": s,
             "prompt": translation_prompt(s, rng)} for k, s in enumerate(kept[:n])]
    tmp = out.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.rename(out)
    return {"sampled": sampled, "kept": len(rows), "seconds": round(seconds, 1)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = Parser(prog="python -m core.train.sources", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="default model, local folder or hub id")
    p.add_argument("--out", required=True, help="prompts file to write (jsonl rows with a 'prompt' field)")
    p.add_argument("--n", type=int, default=1152, help="prompts to write")
    p.add_argument("--batch", type=int, default=96)
    p.add_argument("--new-tokens", type=int, default=48, help="tokens sampled per opener (one or two sentences)")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="auto")
    return p.parse_args(argv)


def check_args(a: argparse.Namespace) -> str | None:
    """The first range problem as one line, else None."""
    if a.n <= 0 or a.batch <= 0:
        return f"--n and --batch must be positive, got {a.n} and {a.batch}"
    if a.new_tokens < 2:
        return f"--new-tokens must be >= 2, got {a.new_tokens}"
    if not 0 < a.temperature <= 2:
        return f"--temperature must be in (0, 2], got {a.temperature}"
    return None


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    problem = check_args(a)
    if problem:
        return fail("", problem)
    out = Path(a.out)

    def write() -> dict:
        from core.models.target import load_target

        target, tok = load_target(a.model, None, a.dtype)
        return write_sources(target, tok, a.n, out, a.batch, a.new_tokens, a.temperature, a.seed)

    return write_once(out, write)


def write_once(out: Path, write: Callable[[], dict], errors: tuple[type[Exception], ...] = (ValueError,)) -> int:
    """A prompt writer's command-line tail: nothing to do when `out` exists, else `write()` (which writes `out`) and
    print its counts as JSON; one of `errors` becomes one line on stderr and exit status 2 (core/cli.py)."""
    if out.exists():
        print(f"{out} exists; nothing to do")
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        counts = write()
    except errors as e:
        return fail("", e)  # one line, status 2 (core/cli.py's convention)
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
