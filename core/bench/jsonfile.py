"""Result files as JSON text, xz-compressed when the name ends in `.xz` (`bench.json.xz`), read and written in one
place so every reader takes either form.

Why: results/ travels with the repository to the GPU check machine, which refuses a working tree over 64 MiB, and
its larger files (per-prompt outputs of a bench run, 20 KB to 300 KB of text) shrink about 8x under xz. The index
and the leaderboard (core/bench/results_index.py) read both forms; `python -m core.bench.results_index --compress`
keeps every result over COMPRESS_OVER bytes compressed and points the repository's references at the new names.
"""
from __future__ import annotations

import json
import lzma
import re
from pathlib import Path

XZ = ".xz"
COMPRESS_OVER = 20_000  # bytes: a result file larger than this is kept compressed
REFERRING = ("*.md", "docs/**/*.md", "recipes/*.sh", "core/**/*.py", "scripts/**/*.py", "app/**/*.py")  # naming results


def is_json(path: Path) -> bool:
    """A JSON result file, plain or compressed."""
    return path.name.endswith((".json", ".json" + XZ))


def read_text(path: str | Path) -> str:
    """A result file's text (decompressed when its name ends in .xz)."""
    p = Path(path)
    return lzma.decompress(p.read_bytes()).decode() if p.name.endswith(XZ) else p.read_text()


def read_json(path: str | Path) -> object:
    """A JSON result file; ValueError (json.JSONDecodeError) or OSError as json and open raise them."""
    try:
        return json.loads(read_text(path))
    except lzma.LZMAError as e:
        raise ValueError(f"{path}: not xz data ({e})") from None


def write_json(path: str | Path, obj: object, indent: int | None = 1) -> Path:
    """Write `obj` as JSON text, compressed when the name ends in .xz."""
    p = Path(path)
    text = json.dumps(obj, indent=indent) + "\n"
    if p.name.endswith(XZ):
        p.write_bytes(lzma.compress(text.encode(), preset=9))
    else:
        p.write_text(text)
    return p


def compress_results(results: Path, repo: Path, over: int = COMPRESS_OVER) -> list[tuple[str, str]]:
    """Compress every plain JSON file under `results` larger than `over` bytes into NAME.xz (the plain file is
    removed) and rewrite each reference to its path ("results/bench/x.json", also inside "../results/...") in the
    repository's docs, recipes and code under `repo`. Returns (old, new) paths relative to `repo`."""
    moved: list[tuple[str, str]] = []
    for path in sorted(results.rglob("*.json")):
        if path.stat().st_size <= over:
            continue
        new = path.with_name(path.name + XZ)
        new.write_bytes(lzma.compress(path.read_bytes(), preset=9))
        path.unlink()
        moved.append((path.relative_to(repo).as_posix(), new.relative_to(repo).as_posix()))
    if not moved:
        return moved
    patterns = [(re.compile(re.escape(old) + r"(?!\w|\.xz)"), new) for old, new in moved]
    for glob in REFERRING:
        for doc in repo.glob(glob):
            if not doc.is_file() or results in doc.parents:
                continue
            text = doc.read_text()
            changed = text
            for pattern, new in patterns:
                changed = pattern.sub(new, changed)
            if changed != text:
                doc.write_text(changed)
    return moved
