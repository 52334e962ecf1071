"""The command-line convention the entry points keep (eagle-playground, eagle-bench, eagle-train, eagle-generate):
bad input is ONE line on stderr, `[PROG: ]error: message`, and exit status 2; no usage block, no traceback. Flags
are parsed by `Parser`, whose errors follow the same rule; `run` wraps a main that raises ValueError / OSError /
MemoryError for bad input (DecodeError is a ValueError). `python -m core.interop` and the core.train subtools
print the same line and exit 2 as well."""
from __future__ import annotations

import argparse
import sys
from typing import Callable

USER_ERRORS = (ValueError, OSError, MemoryError)
USAGE = 2  # the exit status of every user error


def one_line(e: BaseException | str, limit: int = 400) -> str:
    """An error as one line (whitespace folded, at most `limit` characters), its type when it has no message."""
    text = " ".join(str(e).split()) or (type(e).__name__ if isinstance(e, BaseException) else "error")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def fail(prog: str, e: BaseException | str) -> int:
    """Print the one line to stderr ("PROG: error: message", or "error: message" when `prog` is empty); returns the
    exit status."""
    tag = "" if not prog else f"{prog} " if prog.startswith("[") else f"{prog}: "  # "[eagle-playground] error: ..."
    print(f"{tag}error: {one_line(e)}", file=sys.stderr)
    return USAGE


class Parser(argparse.ArgumentParser):
    """argparse with the convention: a bad flag is one line and exit status 2."""

    def error(self, message: str) -> None:
        self.exit(USAGE, f"error: {message} (see --help)\n")


def run(prog: str, main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> int:
    """Call `main(argv)`; a user error becomes the one line and status 2, Ctrl-C status 130."""
    try:
        return main(argv) or 0
    except USER_ERRORS as e:
        return fail(prog, e)
    except KeyboardInterrupt:
        return 130
