"""The tracked tree fits the GPU check machine: that machine receives every tracked file plus the wheels a device
call carries and refuses more than 64 MiB (docs/trust.md, "One GPU command for the day"), so the tracked files stay
under 48 MiB and leave room for the pinned transformers wheel (12.9 MiB). Shipped heads are stored compact
(core/drafters/storage.py) and results over 20 KB xz-compressed (core/bench/jsonfile.py) to stay under it."""
import subprocess
from pathlib import Path

from core.bench.jsonfile import COMPRESS_OVER
from core.drafters import storage

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 48 * 1024 * 1024


def tracked() -> list[Path]:
    """Every tracked file that is on disk (an unpacked archive without git: every file but runs/ and .git/)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
        return [ROOT / p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]
    except (OSError, subprocess.SubprocessError):
        return [p for p in ROOT.rglob("*") if p.is_file() and not {".git", "runs"} & set(p.relative_to(ROOT).parts)]


def test_the_tracked_tree_stays_under_48_mib():
    files = tracked()
    total = sum(p.stat().st_size for p in files)
    largest = sorted(files, key=lambda p: p.stat().st_size)[-5:]
    assert total < LIMIT, (f"tracked files hold {total / 2**20:.1f} MiB (limit 48 MiB); largest: "
                           + ", ".join(f"{p.relative_to(ROOT)} {p.stat().st_size / 2**20:.1f} MiB" for p in largest))


def test_shipped_heads_are_compact_and_results_compressed():
    files = tracked()
    heads = [p for p in files if p.parent.parent == ROOT / "static" / "heads"]
    assert heads and not [p for p in heads if p.name in (storage.FULL, storage.BIN)], \
        "a shipped head in the full layout: run python -m core.interop compact HEAD"
    big = [p for p in files if "results" in p.relative_to(ROOT).parts[:1] and p.suffix == ".json"
           and p.stat().st_size > COMPRESS_OVER]
    assert not big, f"uncompressed results over 20 KB: python -m core.bench.results_index --compress ({big[:3]})"
