"""The `course` command.

``main`` hands the learner's everyday commands (list, next, check, with the options they
declare) to ``course.cli.quick``, which runs them without importing typer; everything else goes
to the typer app (``course.cli.commands``, also reachable here as ``course.cli.app``). Commands
call ``course.workspace.actions`` and the instructor services, and print what ``course.render``
builds.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer


def main() -> None:
    """Console-script entry point. The current folder (a workspace, possibly with a learner's
    numpy.py in it) never belongs on the grader's import path."""
    here = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", here)]
    from course.cli import quick

    try:
        handled = quick.run(sys.argv[1:])
    except SystemExit as ending:
        quick.leave(ending.code)
    if handled:
        quick.leave(0)
    from course.cli.commands import app

    app()


def __getattr__(name: str) -> typer.Typer:
    """``course.cli.app``: the typer app, built (typer and every command module imported) on
    first use."""
    if name == "app":
        from course.cli.commands import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
