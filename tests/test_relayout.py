"""scripts/relayout.py, the mechanical move to the package layout: what it rewrites, that a second run changes
nothing, and that the repository itself is in the package layout (a file written against the flat names fails here).

The flat names below are spelled `CORE.` so that the script, which rewrites the tests too, leaves this file alone.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import load_script

relayout = load_script("relayout")

FLAT = """from CORE import kv_cache, tree
    from CORE import kernels, models
from CORE import tree as tree_lib
from CORE import bench, generate
from CORE.drafter import DraftPool, DraftState, EagleDrafter
from CORE.bench_report import (  # noqa: F401  (re-exported)
    a, b,
)
import CORE.heads as heads
x = "CORE.models.load_target"; y = "CORE.bench.now"
python -m CORE.bench --json x; python -m CORE.train.prune --help
see CORE/drafter.py, CORE/bench.py and CORE/train/data.py
python -c "from CORE.models import load_target; print(1)"
""".replace("CORE", "core")

PACKAGED = """from core.engine import kv_cache, tree
    from core.models import kernels, target as models
from core.engine import tree as tree_lib
from core.bench import cli as bench
from core import generate
from core.engine.contract import DraftPool
from core.drafters.eagle import DraftState, EagleDrafter
from core.bench.report import (  # noqa: F401  (re-exported)
    a, b,
)
import core.drafters.heads as heads
x = "core.models.target.load_target"; y = "core.bench.cli.now"
python -m core.bench --json x; python -m core.train.prune --help
see core/drafters/eagle.py, core/bench/cli.py and core/train/data.py
python -c "from core.models.target import load_target; print(1)"
"""


def test_flat_names_become_package_names():
    out, n = relayout.rewrite(FLAT)
    assert out == PACKAGED
    assert n == 12  # one per reference rewritten


def test_a_second_run_changes_nothing():
    assert relayout.rewrite(PACKAGED) == (PACKAGED, 0)
    assert relayout.rewrite("from core.models import presets, weights  # already new\n")[1] == 0


def test_a_kept_line_is_left_alone():
    line = 'LAYER = ("CORE.models", 1)  # relayout: keep\n'.replace("CORE", "core")
    assert relayout.rewrite(line) == (line, 0)


def test_every_table_entry_names_a_module_that_exists():
    root = Path(__file__).resolve().parents[1]
    missing = [new for new in {*relayout.MOVES.values(), *relayout.SYMBOLS.values()}
               if not (root / (new.replace(".", "/") + ".py")).is_file()]
    assert missing == []


def test_the_repository_is_in_the_package_layout():
    done = subprocess.run([sys.executable, "scripts/relayout.py", "--check"], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
    assert "nothing to do" in done.stdout


def test_paths_relative_to_a_moved_module_still_reach_the_repository():
    """A module that moved one folder deeper must climb one more level to the repository (static/heads, the data)."""
    from core import paths
    from core.models import presets

    root = Path(__file__).resolve().parents[1]
    assert presets.HEADS_DIR == root / "static" / "heads" and presets.HEADS_DIR.is_dir()
    assert paths.DEFAULT_DATA == root.parent / "shared" / "data"
    moved = [root / (new.replace(".", "/") + ".py") for new in relayout.MOVES.values()]
    climbing = [str(p.relative_to(root)) for p in moved if "__file__" in p.read_text()]
    assert climbing == ["core/models/presets.py"]  # the only one; a new one gets a line in this test
