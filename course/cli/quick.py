"""`course list`, `course next`, `course check` and `course --version` without typer.

A learner runs these all day, so they skip importing typer and building the app from every
command module. ``run`` recognises the arguments these commands declare
(``course.cli.learner``) in the spellings typer accepts for them, calls the same functions the
typer commands call (``course.cli.everyday``), and ends the way typer would. Whatever it does
not recognise (``--help``, an unknown or repeated option, ``-wDIR``, ``--``, a value that looks
like an option, a second lesson, any other command, a shell-completion request) it leaves to
the typer app, which answers with its usual messages.
tests/test_cli_quick.py holds that typer reads every spelling accepted here into the same
arguments.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, NoReturn

# Per command: its flags (spelling -> parameter) and whether it takes a lesson argument.
# Every command also takes --workspace DIR / --workspace=DIR / -w DIR.
COMMANDS: dict[str, tuple[dict[str, str], bool]] = {
    "list": ({"--json": "as_json"}, False),
    "next": ({"--fresh": "fresh"}, False),
    "check": (
        {
            "--all": "all_",
            "--json": "as_json",
            "--verbose": "verbose",
            "-v": "verbose",
            "--debug": "debug",
            "--fresh": "fresh",
        },
        True,
    ),
}
WORKSPACE = ("--workspace", "-w")


def parse(argv: list[str]) -> tuple[str, dict[str, Any]] | None:
    """``(command, keyword arguments)`` for argv in a form recognised here, else None. An
    option left out is left out (the function's default; the workspace falls back to
    COURSE_WORKSPACE in ``course.workspace.folder.find``, as typer's envvar would give it)."""
    if not argv or argv[0] not in COMMANDS or _completing():
        return None
    flags, takes_lesson = COMMANDS[argv[0]]
    given: dict[str, Any] = {}
    words = iter(argv[1:])
    for word in words:
        value: str | bool
        if word in flags:
            key, value = flags[word], True
        elif word in WORKSPACE:
            following = next(words, None)
            if following is None or following.startswith("-"):
                return None
            key, value = "workspace", following
        elif word.startswith("--workspace="):
            key, value = "workspace", word.partition("=")[2]
        elif takes_lesson and not word.startswith("-"):
            key, value = "lesson", word
        else:
            return None
        if key in given:
            return None
        given[key] = value
    return argv[0], given


def _completing() -> bool:
    """A shell-completion request (click's ``_<PROG>_COMPLETE`` variable), which typer answers."""
    return any(name.startswith("_") and name.endswith("_COMPLETE") for name in os.environ)


def print_version() -> None:
    """`course --version`: the package's version (``course.__version__``), as ``course X.Y.Z``."""
    from course import __version__

    sys.stdout.write(f"course {__version__}\n")


def run(argv: list[str]) -> bool:
    """Run the command argv names when ``parse`` recognises it, or print the version for
    ``--version`` alone (exiting as typer would: 130 on Ctrl-C, 1 with "Aborted!" on end of
    input, 1 quietly when the reader of our output has gone); False, having done nothing, when
    it does not."""
    if argv == ["--version"] and not _completing():
        print_version()
        return True
    parsed = parse(argv)
    if parsed is None:
        return False
    name, arguments = parsed
    from course.cli import everyday

    commands: dict[str, Callable[..., None]] = {
        "list": everyday.list_,
        "next": everyday.next_,
        "check": everyday.check,
    }
    command = commands[name]
    try:
        command(**arguments)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except EOFError:
        sys.stderr.write("\nAborted!\n")
        raise SystemExit(1) from None
    except OSError as error:
        if error.errno != errno.EPIPE:
            raise
        sys.stdout = _Pacified(sys.stdout)
        sys.stderr = _Pacified(sys.stderr)
        raise SystemExit(1) from None
    return True


def leave(code: object) -> NoReturn:
    """End the process now, with ``code`` as ``SystemExit`` would (None: 0, a text: printed,
    then 1), once our output is flushed.

    These commands hold no file, lock or child of theirs when they return (the state is
    written and unlocked, workers are stopped, a warm grader started for the next check runs
    in a session of its own), so Python's shutdown would only tear down every module they
    loaded (numpy, pytest and hypothesis too after a grade in this process), after the screen
    is complete."""
    if isinstance(code, str):
        sys.stderr.write(code + "\n")
        code = 1
    status = 0 if code is None else code if isinstance(code, int) else 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError as error:  # the reader of our output has gone: as typer would, quietly
            if error.errno != errno.EPIPE:
                raise
            status = status or 1
    os._exit(status)


class _Pacified:
    """A stream whose flush ignores a broken pipe (the final flush at exit), as click's
    PacifyFlushWrapper; everything else is the stream's own."""

    def __init__(self, wrapped: Any) -> None:
        self.wrapped = wrapped

    def flush(self) -> None:
        try:
            self.wrapped.flush()
        except OSError as error:
            if error.errno != errno.EPIPE:
                raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)
