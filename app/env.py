"""Every app.py flag as an environment variable: EAGLE_ and the flag's name in capitals (EAGLE_TREE=auto,
EAGLE_MAX_NEW_TOKENS_CAP=512, EAGLE_SHARE=1). A Hugging Face Space runs `python app.py` without flags, so its variables
are its settings. Pure: no model, no gradio.
"""
from __future__ import annotations

import argparse
import os

ENV_PREFIX = "EAGLE_"
TRUE, FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def env_name(flag: str) -> str:
    """--max-new-tokens-cap -> EAGLE_MAX_NEW_TOKENS_CAP: every flag's environment variable (a Space sets these)."""
    return ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_")


def env_args(parser: argparse.ArgumentParser, environ=os.environ) -> list[str]:
    """The flags set through environment variables, as command-line words placed before the real ones (so the
    command line wins and each value is checked like the flag's own); an on/off flag takes 1/true/yes/on or
    0/false/no/off."""
    words = []
    for action in parser._actions:
        flags = [f for f in action.option_strings if f.startswith("--") and f != "--help"]
        value = environ.get(env_name(flags[0])) if flags else None
        if value is None:
            continue
        if action.nargs == 0:  # store_true
            if value.strip().lower() not in TRUE + FALSE:
                parser.error(f"{env_name(flags[0])}={value!r}: use 1/true/yes/on or 0/false/no/off")
            words += [flags[0]] if value.strip().lower() in TRUE else []
        else:
            words += [flags[0], value]
    return words
