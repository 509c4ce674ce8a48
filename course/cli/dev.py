"""`course dev ...`: commands for the course's maintainers (`course dev check`, run in CI, and
`course dev skeletons`, which writes lessons/ from solutions/).

``register(app)`` adds the ``dev`` group to the main `course` app. Exit codes as in ``cli``:
0 all consistent, 1 problems found (one per line), 2 a usage error.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from course.cli.common import fail
from course.cli.options import new_app

dev = new_app("dev", "Commands for the course's maintainers.")
RootOption = Annotated[
    Path | None,
    typer.Option(
        "--root",
        metavar="DIR",
        help="The course repository (default: the one this `course` is installed from).",
    ),
]


def _clone(root: Path | None, command: str) -> Path:
    from course.devcheck.repository import REPO

    folder = (root or REPO).resolve()
    if not (folder / "course" / "content" / "catalog.toml").is_file() or not (folder / "lessons").is_dir():
        fail(
            f"{folder} is not a clone of the course repository (no course/content/catalog.toml and "
            f"lessons/ there): `course dev {command}` works on the course's sources, so run it from "
            "a clone or pass --root."
        )
    return folder


@dev.command(name="check")
def check(
    root: RootOption = None,
    no_grading: Annotated[
        bool, typer.Option("--no-grading", help="Skip grading the skeletons and solutions (the slow part).")
    ] = False,
    no_hints: Annotated[
        bool, typer.Option("--no-hints", help="Skip grading each code hint in place of its solution.")
    ] = False,
) -> None:
    """Check that the catalog, lessons/, solutions/ and tests/ agree; exit 1 on any problem."""
    from course.devcheck.check import check as problems_in

    folder = _clone(root, "check")
    started = time.monotonic()
    problems = problems_in(folder, grade=not no_grading, hints=not (no_grading or no_hints))
    seconds = time.monotonic() - started
    if not problems:
        graded = "" if no_grading else "; skeletons grade not-started and solutions pass"
        graded += "" if no_grading or no_hints else ", and so does every code hint"
        typer.echo(f"course dev check: the catalog and the course's files agree{graded} ({seconds:.1f} s).")
        return
    for problem in problems:
        typer.echo(str(problem))
    typer.echo(f"course dev check: {len(problems)} problem(s) in {folder} ({seconds:.1f} s).")
    raise typer.Exit(1)


@dev.command(name="skeletons")
def skeletons(root: RootOption = None) -> None:
    """Write each lesson's skeleton in lessons/ from its solution (the solution regions become
    `raise NotImplementedError`); lists the files it changed."""
    from course.content.lesson_source import LessonSourceError
    from course.devcheck.sources import write_skeletons

    folder = _clone(root, "skeletons")
    try:
        changed = write_skeletons(folder)
    except LessonSourceError as error:
        fail(str(error), 1)
    for name in changed:
        typer.echo(f"wrote {name}")
    typer.echo(f"course dev skeletons: {len(changed) or 'no'} skeleton(s) changed in {folder}.")


def register(app: typer.Typer) -> None:
    """Add the `dev` command group to the main app."""
    app.add_typer(dev, name="dev")
