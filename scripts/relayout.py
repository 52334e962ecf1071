"""Move core/'s flat modules into the layer packages and rewrite every reference to them.

    python scripts/relayout.py            # apply (git mv + rewrite), report what changed
    python scripts/relayout.py --check    # change nothing; exit 1 when something is still in the old layout

The layout (docs/ARCHITECTURE.md §2): core/engine/ (the loop and its pure parts), core/models/ (target adapter,
presets, weights, kernels), core/drafters/ (drafters, heads, the head registry), core/bench/ (the benchmark), with
core/pipeline.py, core/prompt.py, core/generate.py, core/interop.py and core/train/ where they are.

The script is mechanical and idempotent, so it can be run again after other branches that still use the flat names
are merged: it `git mv`s each module in MOVES that is still at its old path, then rewrites, in every tracked or
untracked (not ignored) *.py, *.sh, *.md, *.ini, *.toml, *.cfg, *.txt, *.yml file and everything under .ci/ (results/
and this file excepted):

- `from core.OLD import a, b` / `from core import OLD` statements (split when the names now live in several
  modules; SYMBOLS sends single names moved out of their old module to their new home),
- dotted references: `import core.OLD`, `python -m core.OLD`, mock/patch targets such as "core.OLD.name",
- paths: core/OLD.py.

A name that is already new (`core.models.target`, `from core.models import presets`) is left alone: an old module
whose name became a package (core.models, core.bench) is only rewritten when what follows it is not one of the
package's new modules, and a line that says "relayout: keep" is never touched. `core.bench` alone stays as it is: `python -m core.bench` runs the package (core/bench/
__main__.py).
"""
from __future__ import annotations

import argparse
import functools
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# old module -> new module
MOVES: dict[str, str] = {
    # the engine: the loop, its contracts and its pure parts; imports nothing else from core
    "core.config": "core.engine.config",
    "core.events": "core.engine.events",
    "core.tree": "core.engine.tree",
    "core.verify": "core.engine.verify",
    "core.sampling": "core.engine.sampling",
    "core.kv_cache": "core.engine.kv_cache",
    "core.timing": "core.engine.timing",
    "core.lookup": "core.engine.lookup",
    "core.tree_logits": "core.engine.tree_logits",
    "core.exactness": "core.engine.exactness",
    "core.contract": "core.engine.contract",
    "core.eagle": "core.engine.eagle",
    "core.baseline": "core.engine.baseline",
    "core.autotree": "core.engine.autotree",
    "core.stops": "core.engine.stops",
    "core.loops": "core.engine.loops",
    "core.metrics_names": "core.engine.metrics_names",
    # the target side: transformers adapter, presets, weights on disk, CPU kernels
    "core.models": "core.models.target",
    "core.presets": "core.models.presets",
    "core.weights": "core.models.weights",
    "core.kernels": "core.models.kernels",
    "core.choices": "core.models.choices",
    "core.invariance": "core.models.invariance",
    # drafters and their heads
    "core.drafter": "core.drafters.eagle",
    "core.lookup_drafter": "core.drafters.lookup",
    "core.draft_head": "core.drafters.draft_head",
    "core.eagle3_head": "core.drafters.eagle3_head",
    "core.medusa": "core.drafters.medusa",
    "core.heads": "core.drafters.heads",
    # the benchmark
    "core.bench": "core.bench.cli",
    "core.bench_plan": "core.bench.plan",
    "core.bench_runners": "core.bench.runners",
    "core.bench_report": "core.bench.report",
    "core.bench_questions": "core.bench.questions",
    "core.bench_turns": "core.bench.turns",
    "core.bench_specbench": "core.bench.specbench",
}

# (old module, name) -> new module, for names that left their old module (the contracts beside the loop, the
# prompt boundary)
SYMBOLS: dict[tuple[str, str], str] = {
    ("core.drafter", "Drafter"): "core.engine.contract",
    ("core.drafter", "DraftPool"): "core.engine.contract",
    ("core.drafter", "grow_beam"): "core.engine.contract",
    ("core.drafter", "unsure"): "core.engine.contract",
    ("core.drafter", "LookupDrafter"): "core.drafters.lookup",
    ("core.bench", "Plan"): "core.bench.plan",
    **{("core.pipeline", name): "core.prompt" for name in
       ("PROMPT_MODES", "check_prompt_fits", "decode", "encode", "encode_prompt", "prompt_mode")},
}
SYMBOL_HOMES = {old for old, _ in SYMBOLS}  # modules that stay but lost some names

KEEP_MARK = "relayout: keep"  # a line carrying this comment names new packages on purpose and is left alone
KEEP_BARE = {"core.bench"}  # `python -m core.bench` runs the package

PACKAGES: dict[str, str] = {
    "core/engine/__init__.py": '"""The decode engine: the loop (eagle.py, baseline.py), the contracts it reads (contract.py: Drafter, '
    'Target), trees,\nacceptance, sampling, the KV cache, step records, exactness and tree planning. Imports nothing '
    'else from core\n(docs/ARCHITECTURE.md §2; tests/test_layers.py)."""\n',
    "core/models/__init__.py": '"""The target side: the transformers adapter (target.py), presets, weights on disk and '
    'the CPU kernels. Imports\nonly core/engine/."""\n',
    "core/drafters/__init__.py": '"""Drafters and their heads: EAGLE-1/2 and EAGLE-3 (eagle.py), Medusa, lookup, and the '
    'head registry (heads.py).\nImports only core/engine/ and core/models/."""\n',
    "core/bench/__init__.py": '"""The benchmark (`python -m core.bench`): plan, runners, pure report arithmetic, '
    'questions."""\n',
    "core/bench/__main__.py": '"""`python -m core.bench`: the benchmark CLI (core/bench/cli.py)."""\nfrom '
    'core.bench.cli import main\n\nraise SystemExit(main())\n',
}

SUFFIXES = {".py", ".sh", ".md", ".ini", ".toml", ".cfg", ".txt", ".yml", ".yaml"}
SKIP_DIRS = ("results/",)
SELF = "scripts/relayout.py"

NAME = r"\w+(?:[ \t]+as[ \t]+\w+)?"
STATEMENT = (r"(?<![\w.])from[ \t]+(?P<mod>core(?:\.\w+)*)[ \t]+import[ \t]+"
             r"(?P<names>\([^()]*\)|" + NAME + r"(?:[ \t]*,[ \t]*" + NAME + r")*)")
DOTTED = r"(?<![\w.])(?P<dmod>core\.\w+)(?:\.(?P<attr>\w+))?"
PATH = r"(?<![\w.])core/(?P<pmod>\w+)\.py\b"
PATTERN = re.compile(f"{STATEMENT}|{DOTTED}|{PATH}")


@functools.cache
def children(package: str) -> set[str]:
    """The new modules directly inside `package` (e.g. core.models -> {target, presets, weights, kernels}), with the
    modules written inside the package since (core/bench/stack.py): a name that is one of them is already new."""
    moved = {new[len(package) + 1:].split(".")[0] for new in MOVES.values() if new.startswith(package + ".")}
    folder = ROOT / package.replace(".", "/")
    return moved | ({f.stem for f in folder.glob("*.py")} if folder.is_dir() else set())


def destination(old: str, name: str) -> str:
    return SYMBOLS.get((old, name), MOVES.get(old, old))


def parse_names(text: str) -> list[tuple[str, str | None]]:
    """'a, b as c' or '(a,\\n b,  # note\\n)' -> [(a, None), (b, c)]."""
    text = re.sub(r"#[^\n]*", "", text.strip().strip("()"))
    out = []
    for item in (i.strip() for i in text.split(",")):
        if item:
            parts = item.split()
            out.append((parts[0], parts[2] if len(parts) == 3 else None))
    return out


def new_statement(m: re.Match, source: str) -> str:
    mod, names = m["mod"], parse_names(m["names"])
    groups: dict[str, list[str]] = {}
    if mod == "core":
        for name, alias in names:
            old = f"core.{name}"
            if old in MOVES:
                parent, leaf = MOVES[old].rsplit(".", 1)
                bound = alias or name
                groups.setdefault(parent, []).append(leaf if leaf == bound else f"{leaf} as {bound}")
            else:
                groups.setdefault("core", []).append(name if alias is None else f"{name} as {alias}")
    elif mod in MOVES or mod in SYMBOL_HOMES:
        if mod in MOVES and all(name in children(mod) for name, _ in names):
            return m.group(0)  # already the package's new modules
        for name, alias in names:
            groups.setdefault(destination(mod, name), []).append(name if alias is None else f"{name} as {alias}")
    else:
        return m.group(0)
    if list(groups) == [mod]:
        return m.group(0)
    if len(groups) == 1 and mod != "core":
        (target,) = groups
        return m.group(0).replace(mod, target, 1)  # one home: keep the statement's own formatting
    line_start = source.rfind("\n", 0, m.start()) + 1
    prefix = source[line_start:m.start()]
    sep = "\n" + prefix if prefix.strip() == "" else "; "
    return sep.join(f"from {target} import {', '.join(items)}" for target, items in groups.items())


def rewrite(text: str) -> tuple[str, int]:
    count = 0

    def sub(m: re.Match) -> str:
        nonlocal count
        line_end = text.find("\n", m.end())
        if KEEP_MARK in text[text.rfind("\n", 0, m.start()) + 1:line_end if line_end >= 0 else None]:
            return m.group(0)
        if m["mod"] is not None:
            out = new_statement(m, text)
        elif m["dmod"] is not None:
            old, attr = m["dmod"], m["attr"]
            if old not in MOVES:
                out = f"{SYMBOLS[old, attr]}.{attr}" if (old, attr) in SYMBOLS else m.group(0)
            elif attr is None:
                out = m.group(0) if old in KEEP_BARE else MOVES[old]
            elif attr in children(old):
                out = m.group(0)
            else:
                out = f"{destination(old, attr)}.{attr}"
        else:
            old = f"core.{m['pmod']}"
            out = MOVES[old].replace(".", "/") + ".py" if old in MOVES else m.group(0)
        count += out != m.group(0)
        return out

    return PATTERN.sub(sub, text), count


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def files() -> list[str]:
    listed = git("ls-files", "-co", "--exclude-standard").splitlines()
    return sorted(f for f in listed
                  if (Path(f).suffix in SUFFIXES or f.startswith(".ci/")) and f != SELF
                  and not f.startswith(SKIP_DIRS) and (ROOT / f).is_file())


def move(check: bool) -> list[str]:
    done = []
    for old, new in MOVES.items():
        src, dst = ROOT / (old.replace(".", "/") + ".py"), ROOT / (new.replace(".", "/") + ".py")
        if not src.exists():
            continue
        if dst.exists():
            sys.exit(f"relayout: both {src.relative_to(ROOT)} and {dst.relative_to(ROOT)} exist; merge them by hand")
        done.append(f"git mv {src.relative_to(ROOT)} {dst.relative_to(ROOT)}")
        if not check:
            dst.parent.mkdir(parents=True, exist_ok=True)
            git("mv", str(src.relative_to(ROOT)), str(dst.relative_to(ROOT)))
    for rel, body in PACKAGES.items():
        if not (ROOT / rel).exists():
            done.append(f"create {rel}")
            if not check:
                (ROOT / rel).parent.mkdir(parents=True, exist_ok=True)
                (ROOT / rel).write_text(body)
                git("add", rel)
    return done


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 when the tree is not relaid")
    a = p.parse_args(argv)
    changes = move(a.check)
    for line in changes:
        print(line)
    edited = 0
    for rel in files():
        path = ROOT / rel
        text = path.read_text(encoding="utf-8")
        new, n = rewrite(text)
        if n:
            edited += 1
            print(f"rewrite {rel}: {n} reference(s)")
            if not a.check:
                if rel.endswith(".py"):
                    compile(new, rel, "exec")  # a rewrite must never leave a file that does not parse
                path.write_text(new, encoding="utf-8")
    if not changes and not edited:
        print("relayout: nothing to do (the tree is in the package layout)")
        return 0
    print(f"relayout: {len(changes)} file operation(s), {edited} file(s) rewritten"
          + (" (check only: nothing changed)" if a.check else ""))
    return 1 if a.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
