"""The commands the project publishes still parse: every `python -m core.train` line of recipes/*.sh and every
`python -m core.train` / `core.bench` / `core.generate` command in README and docs/*.md, read as the shell would and
handed to the CLI's own parser and range checks (nothing runs, nothing loads). A renamed flag breaks this test, not
a user's run."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from core.bench import cli as bench
from core.bench.methods import METHODS
from core import generate
from core.train.__main__ import check_args, parse

ROOT = Path(__file__).resolve().parents[2]
SHELL_DEFAULTS = {"SHARDS": "55", "EPOCHS": "1", "DATA": "runs/g3-data"}


def commands(text: str, module: str) -> list[list[str]]:
    """`python -m MODULE ...` commands in shell or markdown text, continuation lines joined, variables expanded."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        m = re.search(rf"python -m {re.escape(module)}(?![\w.])(.*)", line)
        if not m:
            continue
        rest = m.group(1).split("#")[0].split("`")[0]
        rest = re.sub(r"\$\{?(\w+)(?::-([^}]*))?\}?",  # a known value, else the ${VAR:-default} the shell takes
                      lambda v: SHELL_DEFAULTS.get(v.group(1), v.group(2) if v.group(2) is not None else v.group(0)),
                      rest)
        argv = shlex.split(rest)
        if any(x.startswith("--") for x in argv):  # a command, not the module named in prose
            out.append(argv)
    return out


RECIPES = sorted((ROOT / "recipes").glob("*.sh"))
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = [(p.name, p.read_text(encoding="utf-8")) for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]]
TRAIN = [(p.name, argv) for p in RECIPES for argv in commands(p.read_text(encoding="utf-8"), "core.train")]
TRAIN += [(name, argv) for name, text in DOCS for argv in commands(text, "core.train")]
BENCH = [(name, argv) for name, text in DOCS for argv in commands(text, "core.bench")]


def test_the_recipes_and_readme_hold_commands():
    assert len(RECIPES) >= 2 and len(TRAIN) >= 6
    assert commands(README, "core.bench") and commands(README, "core.generate")
    assert any(name == "results-history.md" for name, _ in BENCH)  # the earlier results' commands are checked too


@pytest.mark.parametrize("where,argv", TRAIN, ids=[f"{w}-{i}" for i, (w, _) in enumerate(TRAIN)])
def test_train_commands_parse_and_pass_the_range_checks(where, argv):
    a = parse(argv)
    a.extra_shards, a.reprefill, a.exclude_shards, a.heldout_shards = [], [], [], []  # folders made first
    assert check_args(a) is None, (where, argv)


@pytest.mark.parametrize("where,argv", BENCH, ids=[f"{w}-{i}" for i, (w, _) in enumerate(BENCH)])
def test_published_bench_commands_parse(where, argv):
    a = bench.parse_args(argv)
    assert a.max_new_tokens >= 1 and all(m in METHODS for m in a.methods.split(","))


@pytest.mark.parametrize("argv", commands(README, "core.generate"))
def test_readme_generate_commands_parse(argv):
    assert generate.decode_config(generate.parse_args(argv)).max_new_tokens >= 1


SOURCES = [(p.name, argv) for p in RECIPES for argv in commands(p.read_text(encoding="utf-8"), "core.train.sources")]


@pytest.mark.parametrize("where,argv", SOURCES, ids=[f"{w}-{i}" for i, (w, _) in enumerate(SOURCES)])
def test_source_commands_parse_and_pass_the_range_checks(where, argv):
    from core.train import sources

    assert check_sources(sources, argv) is None, (where, argv)


def check_sources(sources, argv):
    return sources.check_args(sources.parse_args(argv))


def test_sources_range_checks_refuse_bad_values():
    from core.train import sources

    assert "--temperature" in check_sources(sources, ["--out", "x.jsonl", "--temperature", "0"])
    assert "--n" in check_sources(sources, ["--out", "x.jsonl", "--n", "0"])


PRUNES = [(p.name, argv) for p in RECIPES for argv in commands(p.read_text(encoding="utf-8"), "core.train.prune")]
PRUNES += [(name, argv) for name, text in DOCS for argv in commands(text, "core.train.prune")]


@pytest.mark.parametrize("where,argv", PRUNES, ids=[f"{w}-{i}" for i, (w, _) in enumerate(PRUNES)])
def test_prune_commands_parse(where, argv):
    from core.train import prune

    a = prune.parse_args(argv)
    assert a.size >= 1 and a.shards and a.head, (where, argv)


def test_the_shipped_recipes_prune_a_head():
    assert PRUNES, "the SmolLM2 recipe gives its full-vocabulary head an inference vocabulary"


REVOCABS = [(p.name, argv) for p in RECIPES for argv in commands(p.read_text(encoding="utf-8"), "core.train.revocab")]
REVOCABS += [(name, argv) for name, text in DOCS for argv in commands(text, "core.train.revocab")]


@pytest.mark.parametrize("where,argv", REVOCABS, ids=[f"{w}-{i}" for i, (w, _) in enumerate(REVOCABS)])
def test_revocab_commands_parse(where, argv):
    from core.train import revocab

    a = revocab.parse_args(argv)
    assert a.size >= 1 and a.shards and a.head and a.out, (where, argv)


def test_the_readme_reruns_its_vocabulary_measurement():
    assert REVOCABS, "README's measurement of a re-chosen draft vocabulary names the commands that made its heads"
