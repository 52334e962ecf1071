"""The layer rules of docs/ARCHITECTURE.md §2, read from the source's imports (ast, nothing is imported).

Layers, lowest first: core/engine/ (the loop, its contracts, pure parts) < core/models/ (target side) <
core/drafters/ (drafters, heads, registry) < core's own modules (pipeline, prompt, generate) < core/train/ <
core/bench/ and core/interop.py < app/ and app.py. A module imports only its own layer and those below; app never
imports the benchmark or training; core never imports gradio, plotly or app; and no module imports itself back
through a circle. Every import counts, including those inside functions and under TYPE_CHECKING.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LAYERS = (  # (module prefix, layer); the longest matching prefix decides
    ("core.engine", 0),
    ("core.models", 1),
    ("core.drafters", 2),
    ("core", 3),
    ("core.train", 4),
    ("core.bench", 5),
    ("core.interop", 5),
    ("app", 6),
)
UI_ONLY = ("gradio", "plotly", "app", "spaces")  # core never imports these
APP_NEVER = ("core.bench", "core.train", "core.interop")  # tools the app must not depend on
# the one exception: the benchmark's optional standalone HTML report (`--html`) draws with plotly, imported inside
# write_html only; nothing the app or the decoders load imports it
UI_ALLOWED = {("core.bench.report", "plotly")}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources() -> dict[str, Path]:
    files = [*ROOT.glob("core/**/*.py"), *ROOT.glob("app/**/*.py"), ROOT / "app.py"]
    return {module_name(p): p for p in files}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Every module `path` imports (top-level names as written; `from pkg import mod` counts as pkg.mod)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known)
    return out


def graph() -> dict[str, set[str]]:
    src = sources()
    return {m: imports_of(p, set(src)) for m, p in src.items()}


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer(name: str) -> int | None:
    best = max((p for p, _ in LAYERS if within(name, p)), key=len, default=None)
    return dict(LAYERS)[best] if best else None


def violations(g: dict[str, set[str]]) -> list[str]:
    """Each broken rule as one line 'importer -> imported: rule'."""
    bad = []
    for m, deps in sorted(g.items()):
        for d in sorted(deps):
            if within(m, "core") and any(within(d, u) for u in UI_ONLY) \
                    and not any(m == a and within(d, b) for a, b in UI_ALLOWED):
                bad.append(f"{m} -> {d}: core never imports the UI")
            if within(m, "app") and any(within(d, t) for t in APP_NEVER):
                bad.append(f"{m} -> {d}: the app never imports the benchmark, training or interop")
            lm, ld = layer(m), layer(d)
            if lm is not None and ld is not None and within(d, "core") and ld > lm:
                bad.append(f"{m} -> {d}: upward import (layer {lm} imports layer {ld})")
    return bad


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Import circles among the modules of `g` (Tarjan's strongly connected components of size > 1, or self-loops)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in g.get(v, ()):
                found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer():
    assert [m for m in sources() if layer(m) is None] == []


def test_no_upward_import_and_no_ui_in_core():
    assert violations(graph()) == []


def test_no_import_circle():
    assert cycles(graph()) == []


def test_engine_imports_only_the_engine():
    g = graph()
    outside = {f"{m} -> {d}" for m, deps in g.items() if within(m, "core.engine")
               for d in deps if within(d, "core") and not within(d, "core.engine")}
    assert outside == set()
    assert any(within(m, "core.engine") for m in g)  # the engine is where the rule says


@pytest.mark.parametrize("importer,imported,rule", [
    ("core.engine.eagle", "core.drafters.eagle", "upward import"),
    ("core.engine.eagle", "core.models.target", "upward import"),
    ("core.models.target", "core.drafters.heads", "upward import"),
    ("core.drafters.heads", "core.pipeline", "upward import"),
    ("core.pipeline", "core.bench.cli", "upward import"),
    ("app.startup", "core.bench.cli", "the app never imports"),
    ("app.startup", "core.train.fit", "the app never imports"),
    ("core.engine.events", "gradio", "core never imports the UI"),
    ("core.pipeline", "app.render", "core never imports the UI"),
    ("core.bench.cli", "plotly", "core never imports the UI"),
])
def test_the_rules_catch_a_broken_import(importer, imported, rule):
    g = {importer: {imported}, imported: set()}
    assert any(rule in line and line.startswith(f"{importer} -> {imported}") for line in violations(g))


def test_a_circle_is_found():
    g = {"core.bench.cli": {"core.bench.runners"}, "core.bench.runners": {"core.bench.cli"}, "core.pipeline": set()}
    assert cycles(g) == [["core.bench.cli", "core.bench.runners"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_downward_and_sideways_imports_are_allowed():
    g = {"app.startup": {"core.pipeline", "core.engine.eagle"}, "core.drafters.heads": {"core.models.target"},
         "core.bench.questions": {"core.train.evaluate"}, "core.engine.eagle": {"core.engine.tree", "torch"}}
    assert violations(g) == []


def test_one_place_builds_a_speculative_decoder():
    """Outside the engine, only core/pipeline.py `decoder_for` constructs Eagle2Decoder (app, bench, training and
    interop all call it)."""
    builders = set()
    for m, p in sources().items():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Eagle2Decoder":
                builders.add(m)
    assert {m for m in builders if not within(m, "core.engine")} == {"core.pipeline"}


def test_no_test_reads_the_processor():
    """A test asks the probes the code asks (core.models.kernels), never the processor itself: an expectation read
    off one machine's flags fails on the next machine (docs/ARCHITECTURE.md, section 6, rule 10)."""
    words = ("/proc/" + "cpuinfo", "ls" + "cpu", "get_cpu_" + "capability")  # split so this file is not a hit
    hits = [f"{p.name}: {w}" for p in sorted((ROOT / "tests").rglob("*.py")) for w in words if w in p.read_text()]
    assert hits == []
