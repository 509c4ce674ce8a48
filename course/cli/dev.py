"""`course dev ...`: commands for the course's maintainers (`course dev check`, run in CI).

``register(app)`` adds the ``dev`` group to the main `course` app. Exit codes as in ``cli``:
0 all consistent, 1 problems found (one per line), 2 a usage error.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from course.cli.common import fail, new_app

dev = new_app("dev", "Commands for the course's maintainers.")


@dev.command(name="check")
def check(
    root: Annotated[
        Path | None,
        typer.Option(
            "--root",
            metavar="DIR",
            help="The course repository to check (default: the one this `course` is installed from).",
        ),
    ] = None,
    no_grading: Annotated[
        bool, typer.Option("--no-grading", help="Skip grading the skeletons and solutions (the slow part).")
    ] = False,
) -> None:
    """Check that the catalog, lessons/, solutions/ and tests/ agree; exit 1 on any problem."""
    from course.instructor import devcheck

    folder = (root or devcheck.REPO).resolve()
    if not (folder / "course" / "catalog.toml").is_file() or not (folder / "lessons").is_dir():
        fail(
            f"{folder} is not a clone of the course repository (no course/catalog.toml and "
            "lessons/ there): `course dev check` checks the course's sources, so run it from "
            "a clone or pass --root."
        )
    started = time.monotonic()
    problems = devcheck.check(folder, grade=not no_grading)
    seconds = time.monotonic() - started
    if not problems:
        graded = "" if no_grading else "; skeletons grade not-started and solutions pass"
        typer.echo(f"course dev check: the catalog and the course's files agree{graded} ({seconds:.1f} s).")
        return
    for problem in problems:
        typer.echo(str(problem))
    typer.echo(f"course dev check: {len(problems)} problem(s) in {folder} ({seconds:.1f} s).")
    raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the `dev` command group to the main app."""
    app.add_typer(dev, name="dev")
