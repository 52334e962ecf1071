"""app.py: every flag has an environment variable (EAGLE_<FLAG>), checked like the flag, and the command line wins.
A Space runs `python app.py` with no flags, so this is how one is configured."""
import importlib.util
from pathlib import Path

import pytest

from app.env import env_args, env_name

ROOT = Path(__file__).resolve().parents[2]


def app_py():
    spec = importlib.util.spec_from_file_location("app_entry", ROOT / "app.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def clean_env(monkeypatch):
    import os

    for k in list(os.environ):
        if k.startswith("EAGLE_"):
            monkeypatch.delenv(k)
    return monkeypatch


def test_environment_sets_flags_and_the_command_line_wins(clean_env):
    app = app_py()
    clean_env.setenv("EAGLE_TREE", "auto")
    clean_env.setenv("EAGLE_MAX_NEW_TOKENS_CAP", "256")
    clean_env.setenv("EAGLE_REQUEST_SECONDS", "45")
    clean_env.setenv("EAGLE_SHARE", "true")
    clean_env.setenv("EAGLE_PROMPT_MODE", "raw")
    clean_env.setenv("EAGLE_LOG_LEVEL", "debug")
    a = app.parse_args([])
    assert (a.tree, a.max_new_tokens_cap, a.request_seconds, a.share, a.prompt_mode, a.log_level) == \
        ("auto", 256, 45.0, True, "raw", "DEBUG")
    b = app.parse_args(["--tree", "16,5,4", "--max-new-tokens-cap", "64"])
    assert (b.tree, b.max_new_tokens_cap, b.request_seconds) == ("16,5,4", 64, 45.0)
    clean_env.setenv("EAGLE_SHARE", "0")
    assert app.parse_args([]).share is False


@pytest.mark.parametrize("name,value", [("EAGLE_PORT", "http"), ("EAGLE_PROMPT_MODE", "jinja"),
                                        ("EAGLE_QUEUE_SIZE", "0"), ("EAGLE_TRUST_REMOTE_CODE", "maybe")])
def test_bad_environment_values_are_refused_like_bad_flags(clean_env, capsys, name, value):
    app = app_py()
    clean_env.setenv(name, value)
    with pytest.raises(SystemExit) as e:
        app.parse_args([])
    assert e.value.code == 2 and capsys.readouterr().err.strip()


def test_every_flag_has_a_documented_variable(clean_env):
    """Each flag maps to EAGLE_<FLAG>, the variable alone sets it, and docs/usage.md lists it."""
    import argparse

    app = app_py()
    parser_holder = {}
    real = argparse.ArgumentParser.parse_args

    def spy(self, *a, **k):
        parser_holder["p"] = self
        return real(self, *a, **k)

    clean_env.setattr(argparse.ArgumentParser, "parse_args", spy)
    app.parse_args([])
    flags = [a.option_strings[0] for a in parser_holder["p"]._actions if a.option_strings[0] != "-h"]
    assert len(flags) >= 17
    usage = (ROOT / "docs" / "usage.md").read_text()
    missing = [env_name(f) for f in flags if f"`{env_name(f)}`" not in usage]
    assert not missing, missing
    words = env_args(parser_holder["p"], {env_name("--medusa-head"): "x", env_name("--trust-remote-code"): "1"})
    assert words == ["--medusa-head", "x", "--trust-remote-code"]
