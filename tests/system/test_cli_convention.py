"""One CLI convention (core/cli.py): the commands README, docs/ and recipes/ write work as written, and every entry
point reports bad input as one line and exit status 2.

Every `python -m X`, `python app.py`, `python scripts/...` and `eagle-*` command shape in README.md, docs/*.md and
recipes/*.sh is collected; each entry point's `--help` runs (in this process, through its own main: exit 0), and every
`--flag` a document writes for it appears in that help. Each entry point also gets one cheap real run on bad input
(one line on stderr, status 2), a few as real subprocesses. No model weights are loaded.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import io
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import pytest

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())

# what a command word runs: "module:function" or "scripts/file.py:function" (called with argv, like the console)
ENTRY: dict[str, str] = {
    "app.py": "app.main:cli",
    "eagle-playground": "app.main:cli",
    "eagle-bench": "core.bench.cli:main",
    "eagle-train": "core.train.__main__:cli",
    "eagle-generate": "core.generate:main",
    "core.generate": "core.generate:main",
    "core.bench": "core.bench.cli:main",
    "core.bench.results_index": "core.bench.results_index:main",
    "core.bench.measure_defaults": "core.bench.measure_defaults:main",
    "core.bench.head_curve": "core.bench.head_curve:main",
    "core.train": "core.train.__main__:cli",
    "core.train.tokens": "core.train.tokens:main",
    "core.train.prune": "core.train.prune:main",
    "core.train.revocab": "core.train.revocab:main",
    "core.train.evaluate": "core.train.evaluate:main",
    "core.train.followups": "core.train.followups:main",
    "core.train.documents": "core.train.documents:main",
    "core.train.sources": "core.train.sources:main",
    "core.interop": "core.interop:main",
    "scripts.deploy_space": "scripts/deploy_space.py:main",
    "scripts/deploy_space.py": "scripts/deploy_space.py:main",
    "scripts/load_test.py": "scripts/load_test.py:main",
    "scripts/gpu_check.py": "scripts/gpu_check.py:main",
    "scripts/gpu_day.py": "scripts/gpu_day.py:main",
    # hand-run probes (plain argparse, outside the convention: measurements, not product commands)
    "scripts/probes/profile_draft.py": "scripts/probes/profile_draft.py:main",
    "scripts/probes/oracle_tau.py": "scripts/probes/oracle_tau.py:main",
    "scripts/probes/profile_train_step.py": "scripts/probes/profile_train_step.py:main",
    "scripts/probes/attention_speed.py": "scripts/probes/attention_speed.py:main",
    "scripts.probes.why_check": "scripts/probes/why_check.py:main",
}
SUBCOMMANDS = {"core.interop": ("check", "export", "ours", "compare"), "core.train.tokens": ("pack", "rebuild")}
NO_FLAGS = {"scripts/probes/data_throughput.py"}  # positional CHECKOUT BATCH, runs at import: nothing to --help
OTHERS = {"pytest", "venv", "pip", "sglang.launch_server"}  # third-party commands the docs show


def _retired() -> set[str]:
    """The command words of the probes docs/ARCHITECTURE.md's "Probes retired" table lists (kept in git history)."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text().split("### Probes retired", 1)[1].split("\n#", 1)[0]
    paths = re.findall(r"^\| ((?:core|scripts)/[\w/]+\.py) \|", text, re.M)
    return {p if p.startswith("scripts/") else p[:-3].replace("/", ".") for p in paths}


RETIRED = _retired()
PRODUCT = sorted({v for k, v in ENTRY.items() if "probes" not in v})

COMMAND = re.compile(r"(?:python3? -m (?P<mod>[A-Za-z_]\w*(?:\.\w+)*)|python3? (?P<file>app\.py|scripts/[\w/]+\.py)"
                     r"|(?<![\w/-])(?P<console>eagle-(?:playground|bench|train|generate))\b)")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
END = re.compile(r"[`|;&>]|\s#|\$\(")


def _commands_in(text: str) -> list[tuple[str, str]]:
    """(command word, the rest of its command line) for every command in a piece of shell text."""
    out = []
    matches = list(COMMAND.finditer(text))
    for m, after in zip(matches, matches[1:] + [None]):
        word = m.group("mod") or m.group("file") or m.group("console")
        rest = text[m.end():after.start() if after else len(text)]
        cut = END.search(rest)
        out.append((word, rest[:cut.start()] if cut else rest))
    return out


def _shell(text: str) -> str:
    """Shell text as logical lines: continuations joined, comment lines dropped."""
    text = text.replace("\\\n", " ")
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def documented() -> list[tuple[str, str, str]]:
    """(file, command word, arguments) for every command shape in README.md, docs/*.md and recipes/*.sh."""
    found = []
    for path in sorted(ROOT.glob("recipes/*.sh")):
        for line in _shell(path.read_text()).splitlines():
            found += [(path.name, w, a) for w, a in _commands_in(line)]
    for path in [ROOT / "README.md", *sorted(ROOT.glob("docs/*.md"))]:
        fenced, prose = [], []
        inside = False
        for line in path.read_text().splitlines():
            if line.lstrip().startswith("```"):
                inside = not inside
                prose.append("")
                continue
            (fenced if inside else prose).append(line)
        for line in _shell("\n".join(fenced)).splitlines():
            found += [(path.name, w, a) for w, a in _commands_in(line)]
        for para in "\n".join(prose).split("\n\n"):
            for span in re.findall(r"`([^`]+)`", para.replace("\n", " ")):
                found += [(path.name, w, a) for w, a in _commands_in(span)]
    return found


@functools.lru_cache(maxsize=None)
def entry(target: str) -> Callable[[list[str]], int | None]:
    """The function a command word runs."""
    where, name = target.split(":")
    if where.endswith(".py"):
        spec = importlib.util.spec_from_file_location(Path(where).stem + "_cli_test", ROOT / where)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


def call(target: str, argv: list[str]) -> tuple[int, str, str]:
    """Run an entry point in this process: (status, stdout, stderr); argparse's exits included."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = entry(target)(argv) or 0
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return rc, out.getvalue(), err.getvalue()


DOCUMENTED = documented()


def _shapes() -> dict[tuple[str, str], set[str]]:
    """(command word, subcommand or "") -> the flags the documents write for it."""
    shapes: dict[tuple[str, str], set[str]] = {}
    for _, word, args in DOCUMENTED:
        if word in OTHERS or word in RETIRED or word in NO_FLAGS:
            continue
        words = args.split()
        sub = words[0] if words and word in SUBCOMMANDS and words[0] in SUBCOMMANDS[word] else ""
        shapes.setdefault((word, sub), set()).update(FLAG.findall(args))
    return shapes


SHAPES = _shapes()


def test_every_documented_command_is_known():
    """A command the documents write is an entry point here, a third-party one, or a probe retired to git history
    (docs/ARCHITECTURE.md names each)."""
    words = {w for _, w, _ in DOCUMENTED}
    assert {"core.bench", "core.train", "app.py", "eagle-playground", "core.interop"} <= words  # the collector works
    unknown = sorted(w for w in words if w not in ENTRY and w not in OTHERS | RETIRED | NO_FLAGS)
    assert not unknown, f"documented commands with no entry point here: {unknown}"
    arch = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    for word in RETIRED:
        path = word if word.endswith(".py") else word.replace(".", "/") + ".py"
        assert not (ROOT / path).exists() and path in arch, word
    for word in NO_FLAGS:
        assert (ROOT / word).exists() and not any(FLAG.findall(a) for _, w, a in DOCUMENTED if w == word)


@pytest.mark.parametrize("shape", sorted(SHAPES), ids=lambda s: " ".join(filter(None, s)))
def test_help_names_every_documented_flag(shape):
    """`--help` exits 0 and lists every flag the documents use with this command."""
    word, sub = shape
    rc, out, err = call(ENTRY[word], ([sub] if sub else []) + ["--help"])
    assert rc == 0 and "usage:" in out, err
    missing = sorted(f for f in SHAPES[shape] if not re.search(re.escape(f) + r"(?![\w-])", out))
    assert not missing, f"{word} {sub}: the docs write {missing}, --help has no such flag"


# one cheap bad-input run per product entry point: (target, argv, text the one line must hold)
BAD_RUNS = [
    ("app.main:cli", ["--max-new-tokens-cap", "0"], "--max-new-tokens-cap"),
    ("core.generate:main", ["--prompt", "x", "--no-such-flag"], "unrecognized arguments"),
    ("core.bench.cli:main", ["--max-new-tokens", "1", "--json", "x.json", "--questions", "no-such.jsonl"],
     "core.bench: error: questions file"),
    ("core.bench.results_index:main", ["--write", "LICENSE"], "core.bench.results_index: error:"),
    ("core.bench.measure_defaults:main", ["--questions", "no-such.jsonl"], "core.bench.measure_defaults: error:"),
    ("core.bench.head_curve:main", ["no-such-head", "--eval", "x"], "[head_curve] error: --eval wants HEAD=FILE"),
    ("core.train.__main__:cli", ["--out", "unused", "--no-fc-bias", "--head-type", "medusa"], "core.train: error:"),
    ("core.train.tokens:main", ["pack", "no-such", "out", "--settings", "no-such.json"], "[core.train.tokens] error:"),
    ("core.train.prune:main", ["--head", "no-such-head", "--shards", "s", "--size", "8"], "error: "),
    ("core.train.revocab:main", ["--head", "no-such-head", "--shards", "s", "--size", "8", "--out", "o"], "error: "),
    ("core.train.evaluate:main", [], "error: give --questions FILE or --card"),
    ("core.train.followups:main", ["--model", "m", "--prompts", "p", "--first-turns", "f", "--out", "o",
                                   "--generic-share", "2"], "[core.train.followups] error: --generic-share"),
    ("core.train.documents:main", ["--out", "o.jsonl", "--n", "0"], "error: need --n > 0"),
    ("core.train.sources:main", ["--out", "o.jsonl", "--n", "0"], "error: --n and --batch must be positive"),
    ("core.interop:main", ["compare", "no-such.json", "no-such-either.json"], "core.interop: error:"),
    ("scripts/deploy_space.py:main", ["not-a-space", "--hardware", "cpu", "--dry-run"], "scripts.deploy_space: error:"),
    ("scripts/load_test.py:main", ["--models", "9"], "error: --models must be 1 to"),
    ("scripts/gpu_check.py:main", ["--n", "many"], "error: argument --n"),
    ("scripts/gpu_day.py:main", ["--device", "tpu"], "--device must be cuda or cpu"),
]


def test_bad_runs_cover_every_product_entry_point():
    assert sorted({t for t, _, _ in BAD_RUNS}) == PRODUCT


@pytest.mark.parametrize("target,argv,text", BAD_RUNS, ids=[f"{t.split(':')[0]}" for t, _, _ in BAD_RUNS])
def test_bad_input_is_one_line_and_status_2(tmp_path, monkeypatch, target, argv, text):
    monkeypatch.chdir(tmp_path)  # relative outputs land here; nothing is written anyway
    rc, out, err = call(target, argv)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err and "usage:" not in err, err
    assert text in lines[0], lines[0]


def test_flag_errors_are_one_line_everywhere():
    """An unknown flag: one line, status 2, no usage block, at every product entry point."""
    for target in PRODUCT:
        rc, _, err = call(target, ["--no-such-flag"])
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "usage:" not in err, (target, err)


def test_help_is_unchanged_for_the_app():
    rc, out, _ = call("app.main:cli", ["--help"])
    assert rc == 0 and out.startswith("usage:") and "EAGLE_" in out  # argparse's help with the epilog


def test_prune_and_revocab_share_their_flags():
    from core.train import prune, revocab

    rc_p, out_p, _ = call("core.train.prune:main", ["--help"])
    rc_r, out_r, _ = call("core.train.revocab:main", ["--help"])
    assert rc_p == rc_r == 0
    for flag in ("--head", "--shards", "--size"):
        assert flag in out_p and flag in out_r
    assert "vocab_parser" in revocab.parse_args.__code__.co_names or "vocab_parser" in \
        (ROOT / "core/train/revocab.py").read_text()
    assert prune.vocab_parser("p", "d", "s").parse_args(["--head", "h", "--shards", "a", "--shards", "b",
                                                          "--size", "3"]).shards == ["a", "b"]


def test_bench_error_is_a_value_error():
    from core.bench.questions import BenchError
    from core.cli import UsageError

    assert issubclass(BenchError, ValueError) and issubclass(UsageError, ValueError)


def test_status_2_is_written_only_in_core_cli():
    """No `return 2` / `exit(2)` by hand outside core/cli.py in core/, app/ and the product scripts (probes aside)."""
    by_hand = re.compile(r"\breturn\s+2\s*(#.*)?$|\bexit\(\s*2\b|SystemExit\(\s*2\b", re.M)
    files = [*ROOT.glob("core/**/*.py"), *ROOT.glob("app/**/*.py"), *ROOT.glob("scripts/*.py"), ROOT / "app.py"]
    found = [f"{p.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
             for p in files if p != ROOT / "core" / "cli.py"
             for text in [p.read_text()] for m in by_hand.finditer(text)]
    assert not found, found


SUBPROCESS_RUNS = [  # real command lines, as a user types them (the light ones: the rest load torch, 2-100 s each
    # on a busy machine, and run above in this process)
    (["app.py", "--queue-wait", "0"], "--request-seconds and --queue-wait"),
    (["app.py", "--no-such-flag"], "error: unrecognized arguments: --no-such-flag"),
]


def test_real_command_lines(tmp_path):
    """A few entry points as real processes: one line on stderr, status 2; and one short real run (the leaderboard
    from the committed results)."""
    def go(args: list[str]) -> subprocess.CompletedProcess:
        cmd = [sys.executable] + [str(ROOT / a) if a == "app.py" else a for a in args]
        return subprocess.run(cmd, cwd=tmp_path if args[0] != "-m" or "results_index" not in args[1] else ROOT,
                              capture_output=True, text=True, timeout=300,
                              env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})

    with ThreadPoolExecutor(4) as pool:
        bad = list(pool.map(go, [a for a, _ in SUBPROCESS_RUNS]))
        good = pool.submit(go, ["-m", "core.bench.results_index", "--results", "results"]).result()
    for (args, text), proc in zip(SUBPROCESS_RUNS, bad):
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and text in lines[0], (args, proc.stderr)
    assert good.returncode == 0 and good.stdout.lstrip().startswith("|"), good.stderr
