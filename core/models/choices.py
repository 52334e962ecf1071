"""Pinned start-up choices: the dtype and the kernel routes that timing picks on a CPU, written by one run and read
by another, so two launches compute the same way and give the same tokens.

On a CPU, start-up times bf16 against fp32 (`--dtype auto`), the LM-head product (core/models/kernels.py `head_choice`:
linear, vocabulary-major or oneDNN, and whether a verify computes rows on demand), the row counts at which the
target's body and the draft head's layers run through oneDNN (`body_choice`), and the draft rows' product. The
routes round differently, so the same prompt and seed can give different bf16 text after a restart, and a test
runs whichever path timing noise picked. A choices file fixes them:

    python app.py --choices run.json          # first launch: times as usual and writes run.json
    python app.py --choices run.json          # later launches: read it, time nothing, compute the same way
    EAGLE_CHOICES=run.json python -m core.bench ...   # the same through the environment (any entry point)

The file is JSON: {"dtype", "lm_head", "lazy_rows", "body_onednn_rows", "draft_head", "draft_onednn_rows",
"medusa_head", "attention", "invariant_rows", "pinned_layers"}; a key left out is timed (`invariant_rows` and
`pinned_layers`, the body layers computed at a fixed row count: probed, core/models/invariance.py and pinned.py;
`attention`: the one in force, sdpa or invariant, used when no --attention is given).
Pins apply on CPU only (elsewhere nothing is timed). Every result records the choices in force (`describe`): the
bench JSON's config, `/run`'s result and the app's info line.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

from core.models.pinned import pinned_names

ENV = "EAGLE_CHOICES"
KEYS = ("dtype", "lm_head", "lazy_rows", "body_onednn_rows", "draft_head", "draft_onednn_rows", "medusa_head",
        "attention", "invariant_rows", "pinned_layers")
ATTENTIONS = ("sdpa", "invariant")  # the attention in force (core/models/target.py TargetModel.use_attention)
DTYPES = ("bfloat16", "float32", "float16")

_path: Path | None = None  # the choices file in use (set by use(), or EAGLE_CHOICES on first need)
_pins: dict | None = None  # what it pinned (None: nothing pinned, everything timed)
_from_env = False


def use(path: str | Path | None) -> dict | None:
    """Pin from `path` when it exists (ValueError when it is not a valid choices file); when it does not exist yet,
    remember it so `save` writes this run's choices there. None clears any pin. Returns the pins read."""
    global _path, _pins, _from_env
    _path, _pins, _from_env = (Path(path) if path else None), None, True
    if _path is not None and _path.exists():
        _pins = read(_path)
    return _pins


def read(path: Path) -> dict:
    """A choices file's pins, checked (ValueError with the file name and the problem)."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"choices file {path}: not readable JSON ({type(e).__name__})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"choices file {path}: not a JSON object")
    pins = {k: v for k, v in raw.items() if k in KEYS and v is not None}
    if "dtype" in pins and pins["dtype"] not in DTYPES:
        raise ValueError(f"choices file {path}: dtype must be one of {', '.join(DTYPES)}, got {pins['dtype']!r}")
    for k in ("lm_head", "draft_head", "medusa_head"):
        if k in pins and not isinstance(pins[k], str):
            raise ValueError(f"choices file {path}: {k} must be a kernel name")
    if "lazy_rows" in pins and not isinstance(pins["lazy_rows"], bool):
        raise ValueError(f"choices file {path}: lazy_rows must be true or false")
    if "attention" in pins and pins["attention"] not in ATTENTIONS:
        raise ValueError(f"choices file {path}: attention must be one of {', '.join(ATTENTIONS)}")
    if "invariant_rows" in pins and not (type(pins["invariant_rows"]) is int and pins["invariant_rows"] >= 0):
        raise ValueError(f"choices file {path}: invariant_rows must be a row count")
    if "pinned_layers" in pins and not (isinstance(pins["pinned_layers"], list)
                                        and all(isinstance(n, str) and n for n in pins["pinned_layers"])):
        raise ValueError(f"choices file {path}: pinned_layers must be a list of layer names")
    for k in ("body_onednn_rows", "draft_onednn_rows"):
        if k in pins and not (isinstance(pins[k], list) and all(type(r) is int and r > 0 for r in pins[k])):
            raise ValueError(f"choices file {path}: {k} must be a list of row counts")
    return pins


def _current() -> dict:
    """The pins in force: set by use(), else read once from $EAGLE_CHOICES."""
    if not _from_env and os.environ.get(ENV):
        use(os.environ[ENV])
    return _pins or {}


def pinned(key: str):
    """The pinned value of `key`, or None when it is timed."""
    return _current().get(key)


def pick(key: str, compute: Callable[[], object], allowed=None):
    """The pinned value of `key` (checked against `allowed` when given), else compute() (the timing)."""
    value = pinned(key)
    if value is None:
        return compute()
    if allowed is not None and value not in allowed:
        raise ValueError(f"pinned {key} {value!r} is not available here (choose from {', '.join(map(str, allowed))})")
    return value


def source() -> str:
    """How this process's choices were made, for records."""
    _current()
    if _pins:
        return f"pinned: {_path}"
    return f"timed at start-up (written to {_path})" if _path else "timed at start-up"


def describe(target, drafter=None) -> dict:
    """The dtype and kernel routes in force for `target` (a TargetModel) and `drafter` (any drafter; its LM-head
    rows and layer routes when it has them), plus `source`: the record every result carries."""
    out = {"dtype": str(getattr(target, "dtype", "")).removeprefix("torch."),
           "lm_head": getattr(target, "head_kernel", None), "lazy_rows": getattr(target, "lazy_rows", None),
           "body_onednn_rows": sorted(getattr(target, "onednn_rows", ()) or ()),
           "attention": getattr(target, "attention", None)}
    if out["attention"] == "invariant":  # the start-up probe's answer (core/models/invariance.py)
        out["invariant_rows"] = getattr(target, "exact_rows", 0)
        decoder = getattr(target, "decoder", None)
        out["pinned_layers"] = pinned_names(decoder) if decoder is not None else []
    if getattr(target, "attention_note", ""):
        out["attention_note"] = target.attention_note
    if drafter is not None and getattr(drafter, "kind", "") == "medusa":
        out["medusa_head"] = getattr(drafter, "head_kernel", None)
    elif drafter is not None:
        out["draft_head"] = getattr(drafter, "head_kernel", None)
        out["draft_onednn_rows"] = sorted(getattr(drafter, "onednn_rows", ()) or ())
    return {**out, "source": source()}


def save(target, drafter=None) -> Path | None:
    """Write this run's choices to the file given to use() / $EAGLE_CHOICES when it did not exist yet, so the
    next launch reads them; returns the path written, else None."""
    _current()
    if _path is None or _path.exists():
        return None
    d = {k: v for k, v in describe(target, drafter).items() if k in KEYS and v is not None}
    _path.parent.mkdir(parents=True, exist_ok=True)
    _path.write_text(json.dumps(d, indent=1) + "\n")
    return _path


def short(d: dict) -> str:
    """One line for the app's info line: "kernels: LM head onednn · body oneDNN at 1,2,4 rows · attention invariant,
    bit-exact up to 64 rows · pinned"."""
    rows = d.get("body_onednn_rows") or []
    parts = [f"LM head {d.get('lm_head')}" + (" (rows on demand)" if d.get("lazy_rows") else ""),
             f"body oneDNN at {','.join(map(str, rows))} rows" if rows else "body plain"]
    if d.get("attention") == "invariant":
        parts.append(f"attention invariant, bit-exact up to {d.get('invariant_rows')} rows"
                     + (f" ({', '.join(d['pinned_layers'])} at fixed rows)" if d.get("pinned_layers") else ""))
    elif d.get("attention_note"):
        parts.append(d["attention_note"])
    return "kernels: " + " · ".join(parts) + (" · pinned" if d.get("source", "").startswith("pinned") else " · timed")
