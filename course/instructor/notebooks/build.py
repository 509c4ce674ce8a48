"""Jupyter notebooks built from the catalog and the lesson's single source, for instructors.

For each lesson three notebooks, all from the solution file split by
``course.content.lesson_source``: ``student/`` (lesson text, skeleton cells, test cells, no
solution; the course's cells cannot be edited or deleted), ``instructor/`` (the same with every
solution body between nbgrader's ``### BEGIN SOLUTION`` / ``### END SOLUTION`` markers, as in
the solution file, and nbgrader schema-3 cell metadata) and ``solved/`` (the instructor
notebook executed).

The earlier lessons a lesson imports are given as visible code (the course's reference) that
becomes modules in the kernel's memory: the notebook needs no file and, to run, no course
package. The setup cell records the cells the learner runs; the grading cell grades them as
the lesson module (``course.instructor.notebooks.cells``: the rule `course grade` applies to
the notebook file) with ``course.engine.grading.runner.grade``, and each test cell shows a
line, with what `course check` shows about a failed check below it, and has as value the
exercise's points: its passed checks, which nbgrader reads as
partial credit (the cell's ``points`` are the exercise's number of checks). Cell ids come from
the lesson and the cell's index, so a rebuild is identical. nbformat is needed to build;
nbclient and ipykernel to execute.
"""

from __future__ import annotations

import ast
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from course.content import lesson_source
from course.content.catalog import Catalog, Lesson
from course.content.lesson_source import BEGIN, END, LessonSource
from course.instructor.notebooks.cells import TAG
from course.instructor.notebooks.text import (
    SETUP_CELL,
    NotebookError,
    earlier_cell,
    given_text,
    grading_cell,
    pictures_cell,
)

VARIANTS = ("student", "instructor", "solved")
CELL_TIMEOUT = 120  # seconds per cell; grading a lesson takes a few seconds


def read_lesson(lesson: Lesson) -> LessonSource:
    """Split a lesson's solution (the single source) into text, header and functions."""
    try:
        return lesson_source.parse(lesson.solution.read_text(encoding="utf-8"), str(lesson.solution))
    except (OSError, lesson_source.LessonSourceError) as error:
        raise NotebookError(str(error)) from None


def earlier_modules(lesson: Lesson, catalog: Catalog) -> list[str]:
    """The earlier lessons' modules this lesson imports, directly or through each other."""
    found: list[str] = []
    pending = _imported(lesson.solution)
    while pending:
        module = pending.pop(0)
        earlier = catalog.by_module(module)
        if module in found or earlier is None:
            continue
        found.append(module)
        pending += _imported(earlier.solution)
    return sorted(found)


def _imported(path: Path) -> list[str]:
    """Modules named by the file's top-level `from ... import` statements (not its text);
    ``earlier_modules`` keeps those that are lessons of the catalog."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.module]


def markdown_sections(text: str, lesson: Lesson) -> list[str]:
    """The lesson text as markdown: a title cell, then one cell per underlined section; the
    last section ends with what to do in a notebook (where the skeleton says which file to edit)."""
    text = (
        f"{text.rstrip()}\n\nFill in the functions below, then run the test cells at the end: they "
        f"run the same checks as `course check {lesson.number}`, one point per passed check."
    )
    lines = text.splitlines()
    sections: list[list[str]] = [[f"# {lines[0].rstrip('.')}", ""]]
    for index, line in enumerate(lines[1:], start=1):
        underline = index + 1 < len(lines) and re.fullmatch(r"-{3,}", lines[index + 1].strip())
        if underline and line.strip():
            sections.append([f"## {line.strip()}", ""])
        elif not re.fullmatch(r"-{3,}", line.strip()) or not lines[index - 1].strip():
            sections[-1].append(line)
    return ["\n".join(_escape(line) for line in section).strip() for section in sections]


def _escape(line: str) -> str:
    """Keep `*` literal in prose (markdown reads h*K:(h+1)*K as emphasis); code stays as is."""
    if line.startswith("    ") or line.startswith("# ") or line.startswith("## "):
        return line
    parts = line.split("`")
    return "`".join(p if i % 2 else p.replace("*", r"\*") for i, p in enumerate(parts))


_CHECKS: dict[str, dict[str, int]] = {}


def exercise_checks(lesson: Lesson) -> dict[str, int]:
    """Each exercise's number of checks (its points in nbgrader and in `course grade`), counted
    once per process by grading the pristine skeleton (every check stops at NotImplementedError)."""
    if lesson.module not in _CHECKS:
        from course.engine.grading.runner import grade

        result = grade(lesson, lesson.skeleton.parent)
        _CHECKS[lesson.module] = {exercise.name: len(exercise.checks) for exercise in result.exercises}
    return _CHECKS[lesson.module]


def _meta(
    grade_id: str, *, solution: bool = False, grade: bool = False, points: int = 0, frozen: bool = False
) -> dict:
    meta = {
        "grade_id": grade_id,
        "solution": solution,
        "grade": grade,
        "locked": not solution,
        "schema_version": 3,
    }
    if grade:
        meta["points"] = points
    extra = {"editable": False, "deletable": False} if frozen else {}
    return {**extra, "nbgrader": meta}


def build(lesson: Lesson, catalog: Catalog, variant: str) -> dict:
    """The student or instructor notebook of one lesson, validated, without outputs."""
    import nbformat
    from nbformat import v4

    source = read_lesson(lesson)
    instructor = variant != "student"
    frozen = not instructor  # the student's course cells cannot be edited or deleted in Jupyter
    cells = []
    for index, text in enumerate(markdown_sections(source.text, lesson)):
        cells.append(v4.new_markdown_cell(text, metadata=_meta(f"text_{index}")))
    cells.append(v4.new_code_cell(SETUP_CELL, metadata=_meta("setup", frozen=frozen)))
    earlier = earlier_modules(lesson, catalog)
    if earlier:
        cells.append(v4.new_markdown_cell(given_text(earlier, catalog), metadata=_meta("given_text")))
        cells.append(
            v4.new_code_cell(earlier_cell(earlier, catalog), metadata=_meta("earlier_lessons", frozen=frozen))
        )
    cells.append(v4.new_code_cell(source.header.rstrip("\n"), metadata=_meta("imports")))
    exercises = {exercise.name for exercise in lesson.exercises}
    for function in source.functions:  # functions that are not exercises come written
        solved = instructor and function.name in exercises
        cells.append(
            v4.new_code_cell(
                function.solution if solved else function.skeleton,
                metadata=_meta(function.name, solution=function.name in exercises),
            )
        )
    checks = exercise_checks(lesson)
    cells.append(
        v4.new_markdown_cell(
            "## Tests\n\nRun these cells once the functions above are written (Run All runs them "
            "too). Each shows a line for its exercise, and what `course check` shows about a check "
            "that failed; the cell's value is the points it earns, one per passed check, the same "
            "points as `course grade`.",
            metadata=_meta("tests_text"),
        )
    )
    cells.append(
        v4.new_code_cell(grading_cell(lesson).rstrip("\n"), metadata=_meta("grading", frozen=frozen))
    )
    for exercise in lesson.exercises:
        count = checks.get(exercise.name, 0)
        cells.append(
            v4.new_code_cell(
                f"{TAG} test of {exercise.name}: {count} checks, a point each.\n"
                f"check_exercise({exercise.name!r})",
                metadata=_meta(f"test_{exercise.name}", grade=True, points=count, frozen=frozen),
            )
        )
    if lesson.pictures.is_file():
        cells.append(v4.new_code_cell(pictures_cell(lesson), metadata=_meta("pictures", frozen=frozen)))
    for index, cell in enumerate(cells):
        cell["id"] = f"{lesson.module}-{index:02d}"
    notebook = v4.new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
            "course": {"lesson": lesson.module, "variant": variant, "version": catalog.version},
        },
    )
    notebook.nbformat, notebook.nbformat_minor = 4, 5
    nbformat.validate(notebook)
    return notebook


def execute(notebook: Any, name: str, timeout: float = CELL_TIMEOUT, allow_errors: bool = False) -> dict:
    """Run every cell in a fresh ipykernel; NotebookError names the notebook and the cell."""
    from jupyter_client import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellControlSignal, CellExecutionError, DeadKernelError

    with tempfile.TemporaryDirectory(prefix="course-notebook-") as folder:
        manager = KernelManager(kernel_name="python3", transport="ipc", ip=str(Path(folder) / "kernel"))
        client = NotebookClient(
            notebook,
            km=manager,
            timeout=timeout,
            kernel_name="python3",
            allow_errors=allow_errors,
            record_timing=False,
            resources={"metadata": {"path": folder}},
        )
        try:
            client.execute()
        except (CellExecutionError, CellControlSignal, DeadKernelError, TimeoutError) as error:
            raise NotebookError(_failure(notebook, name, error, timeout)) from None
        finally:
            if manager.has_kernel:
                manager.shutdown_kernel(now=True)
    return notebook


def _failure(notebook: Any, name: str, error: Exception, timeout: float) -> str:
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", ()):
            if output.get("output_type") == "error":
                lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in output["traceback"]]
                tail = "\n".join("\n".join(lines).splitlines()[-12:])
                return (
                    f"{name}: cell {index} ({cell.get('id')}) raised {output['ename']}: "
                    f"{output['evalue']}\n{tail}"
                )
    kind = "timed out" if isinstance(error, TimeoutError) else "stopped"
    return (
        f"{name}: a cell {kind} (per-cell timeout {timeout:g} s) or the kernel died: "
        f"{str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__}"
    )


def write(notebook: dict, path: Path) -> Path:
    import nbformat

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(notebook), encoding="utf-8")
    return path


def generate(
    out_dir: Path,
    lessons: list[Lesson],
    catalog: Catalog,
    execute_solved: bool = True,
    timeout: float = CELL_TIMEOUT,
    progress: Callable[[Path], None] | None = None,
) -> list[Path]:
    """Write the student, instructor and (executed) solved notebooks of ``lessons``."""
    written = []
    for lesson in lessons:
        for variant in VARIANTS[:2] + (VARIANTS[2:] if execute_solved else ()):
            notebook = build(lesson, catalog, variant)
            path = Path(out_dir) / variant / f"{lesson.module}.ipynb"
            if variant == "solved":
                notebook = execute(notebook, f"solved/{path.name}", timeout)
            written.append(write(notebook, path))
            if progress:
                progress(path)
    return written


def solution_lines(notebook: Any) -> list[str]:
    """Every non-blank, non-comment line inside a solution region of a notebook."""
    found, inside = [], False
    for cell in notebook.cells:
        for line in cell.source.splitlines():
            if line.strip() in (BEGIN, END):
                inside = line.strip() == BEGIN
            elif inside and line.strip() and not line.strip().startswith("#"):
                found.append(line.strip())
    return found
