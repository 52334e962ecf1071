"""The installable package's doors: pyproject's console commands resolve to the CLIs' mains, every CLI reports bad
input as one line with exit status 2 (core/cli.py), and data paths come from $EAGLE_DATA_DIR with ../shared/data
only as the default (core/paths.py)."""
from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest

from core.cli import Parser, fail, one_line, run
from core.paths import DATA_ENV, DEFAULT_DATA, data_dir

ROOT = Path(__file__).resolve().parents[2]


def test_console_commands_name_the_clis_mains():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    scripts = project["scripts"]
    assert set(scripts) == {"eagle-playground", "eagle-bench", "eagle-train", "eagle-generate"}
    for target in scripts.values():
        module, name = target.split(":")
        assert callable(getattr(importlib.import_module(module), name)), target
    assert project["dynamic"] == ["dependencies"]  # read from requirements.txt: the pins live in one place
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert tool["dynamic"]["dependencies"]["file"] == ["requirements.txt"]


def test_every_requirement_is_pinned_exactly():
    lines = [ln.strip() for ln in (ROOT / "requirements.txt").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines and all(ln.count("==") == 1 for ln in lines), lines


def test_a_user_error_is_one_line_and_status_2(capsys):
    def main(argv):
        raise ValueError("bad\n  input")

    assert run("core.x", main, []) == 2
    assert capsys.readouterr().err == "core.x: error: bad input\n"
    assert run("[eagle-playground]", main, []) == 2
    assert capsys.readouterr().err == "[eagle-playground] error: bad input\n"
    assert fail("", OSError()) == 2 and capsys.readouterr().err == "error: OSError\n"
    assert run("core.x", lambda argv: None, []) == 0
    assert one_line("x" * 500).endswith("...") and len(one_line("x" * 500)) == 400


def test_a_bad_flag_is_one_line_and_status_2(capsys):
    p = Parser(prog="eagle-x")
    p.add_argument("--n", type=int)
    with pytest.raises(SystemExit) as e:
        p.parse_args(["--n", "abc"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("error: argument --n: invalid int value")


def test_data_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(DATA_ENV, raising=False)
    assert data_dir() == DEFAULT_DATA and DEFAULT_DATA.parts[-2:] == ("shared", "data")
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    assert data_dir() == tmp_path
    monkeypatch.setenv(DATA_ENV, "  ")
    assert data_dir() == DEFAULT_DATA
