"""`course notebooks OUT_DIR`: the student, instructor (nbgrader) and solved notebooks.

Wire it with ``register(app)`` from course/cli.py. Needs nbformat; the solved set also needs
nbclient and ipykernel (a real Jupyter kernel runs every cell).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


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
        typer.Option(help="Execute the instructor notebooks into solved/ (needs nbclient and ipykernel)."),
    ] = True,
) -> None:
    """Build each lesson's notebooks: student (skeleton and test cells), instructor (nbgrader
    source format with solutions) and solved (the instructor notebook executed)."""
    from course.catalog import UnknownLesson, load_catalog
    from course.cli import _fail, _show

    catalog = load_catalog()
    try:
        lessons = [catalog.resolve(lesson)] if lesson else list(catalog.available())
    except UnknownLesson as problem:
        _fail(str(problem))
    missing = [each for each in lessons if not each.available]
    if missing:
        _fail(f"Lesson {missing[0].id} ({missing[0].title}) is coming soon: its files are not written yet.")
    needed = ["nbformat"] + (["nbclient", "ipykernel"] if execute else [])
    absent = [name for name in needed if not _importable(name)]
    if absent:
        _fail(
            f"Building notebooks needs {', '.join(absent)}: `pip install {' '.join(absent)}` "
            "(or `--no-execute` to skip the solved set, which needs a Jupyter kernel)."
        )
    from course import notebooks as nb

    try:
        written = nb.generate(
            out_dir,
            lessons,
            catalog,
            execute_solved=execute,
            timeout=timeout,
            progress=lambda path: _show(f"wrote {path}"),
        )
    except nb.NotebookError as problem:
        _fail(f"Notebook generation stopped: {problem}", 1)
    sets = "student/, instructor/ and solved/" if execute else "student/ and instructor/"
    _show(f"{len(written)} notebooks for {len(lessons)} lesson(s) in {out_dir}/ ({sets}).")


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def register(app: typer.Typer) -> None:
    """Add `course notebooks` to the main app."""
    app.command(name="notebooks")(notebooks)
