"""The one command-line convention every entry point keeps (eagle-playground / app.py, eagle-bench and the bench's
tools, eagle-train and its subtools, eagle-generate, core.interop, the product scripts in scripts/): bad input is ONE
line on stderr, `[PROG: ]error: message`, and exit status 2; no usage block, no traceback; `--help` is argparse's.

Flags are parsed by `Parser`, whose errors follow the same rule (or, with `raises=True`, become a `UsageError` that
the entry point's runner prints with its own prefix). `run` wraps a main that raises ValueError / OSError /
MemoryError for bad input (DecodeError and BenchError are ValueErrors); `fail` prints the line. Status 2 is written
here only (`USAGE`): an entry point returns `fail(...)` or goes through `run`. Hand-run probes in scripts/probes/ are
measurements, not product commands, and may keep plain argparse."""
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


class UsageError(ValueError):
    """A bad flag or flag value found by a `Parser(raises=True)`: a user error like any ValueError, so the entry
    point's runner prints it as its one line (with the entry point's own prefix)."""


class Parser(argparse.ArgumentParser):
    """argparse with the convention: a bad flag is one line and exit status 2 (`error: message (see --help)`), or a
    `UsageError` raised to the caller when built with `raises=True`. Subcommand parsers are Parsers too."""

    def __init__(self, *args, raises: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.raises = raises

    def error(self, message: str) -> None:
        if self.raises:
            raise UsageError(message)
        self.exit(USAGE, f"error: {message} (see --help)\n")


def run(prog: str, main: Callable[[list[str] | None], int | None], argv: list[str] | None = None,
        errors: tuple[type[BaseException], ...] = USER_ERRORS) -> int:
    """Call `main(argv)`; one of `errors` (the user errors unless told otherwise) becomes the one line and status 2,
    Ctrl-C status 130."""
    try:
        return main(argv) or 0
    except errors as e:
        return fail(prog, e)
    except KeyboardInterrupt:
        return 130
