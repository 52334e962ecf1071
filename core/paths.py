"""Where the data sets live: $EAGLE_DATA_DIR, else ../shared/data beside the repository (the layout the recipes
and results were made with). Every CLI flag that reads data takes its default from here, so a machine with the
data elsewhere sets the variable (or the flag) instead of editing code."""
from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "EAGLE_DATA_DIR"
DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def data_dir() -> Path:
    """$EAGLE_DATA_DIR when set (and not empty), else ../shared/data next to the repository."""
    given = os.environ.get(DATA_ENV, "").strip()
    return Path(given).expanduser() if given else DEFAULT_DATA
