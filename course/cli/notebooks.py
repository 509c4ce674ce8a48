"""`course notebooks OUT_DIR`: the student, instructor (nbgrader) and solved notebooks.

``register(app)`` adds it to the `course` app. Needs nbformat (the course's own dependency);
the solved set also needs nbclient and ipykernel (a real Jupyter kernel runs every cell), which
the ``KERNEL_EXTRA`` brings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from course.cli.common import fail, lesson_named, show

KERNEL_EXTRA = "instructor"  # the extra of pyproject.toml with nbclient and ipykernel


def notebooks(
    out_dir: Annotated[Path, typer.Argument(help="Where to write student/, instructor/ and solved/.")],
    lesson: Annotated[
        str | None,
        typer.Option("--lesson", "-l", help="Only this lesson (3, 03, l03_attention or attention)."),
    ] = None,
    timeout: Annotated[
        float, typer.Option(help="Seconds each cell may run when the solved notebooks are executed.")
    ] = 120.0,
    execute: Annotated[
        bool,
        typer.Option(help=f"Execute the instructor notebooks into solved/ (needs the {KERNEL_EXTRA} extra)."),
    ] = True,
) -> None:
    """Build each lesson's notebooks: student (skeleton and test cells; runs without the course,
    as a class release), instructor (nbgrader source format with solutions) and solved (the
    instructor notebook executed). Grade submitted notebooks with `course grade`."""
    from course.content.catalog import load_catalog

    catalog = load_catalog()
    lessons = [lesson_named(catalog, lesson)] if lesson else list(catalog.available())
    if not _importable("nbformat"):  # a dependency of the course: its installation is broken
        fail("Building notebooks needs nbformat, which the course depends on: `pip install nbformat`.")
    absent = [name for name in ("nbclient", "ipykernel") if execute and not _importable(name)]
    if absent:
        fail(
            f"The solved notebooks run in a Jupyter kernel, which needs {' and '.join(absent)}: "
            f'`pip install "attention-course[{KERNEL_EXTRA}]"` (or `--no-execute` to build only '
            "student/ and instructor/, which needs nothing more)."
        )
    from course.instructor.notebooks import build

    try:
        written = build.generate(
            out_dir,
            lessons,
            catalog,
            execute_solved=execute,
            timeout=timeout,
            progress=lambda path: show(f"wrote {path}"),
        )
    except build.NotebookError as problem:
        fail(f"Notebook generation stopped: {problem}", 1)
    sets = "student/, instructor/ and solved/" if execute else "student/ and instructor/"
    show(f"{len(written)} notebooks for {len(lessons)} lesson(s) in {out_dir}/ ({sets}).")


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def register(app: typer.Typer) -> None:
    """Add `course notebooks` to the main app."""
    app.command(name="notebooks")(notebooks)
