"""Jupyter notebooks built from the catalog and the lesson's single source, for instructors.

For each lesson three notebooks, all from the solution file split by ``course.lesson_source``:
``student/`` (lesson text, skeleton cells, test cells, no solution), ``instructor/`` (the same
with every solution body between nbgrader's ``### BEGIN SOLUTION`` / ``### END SOLUTION`` markers,
as in the solution file, and nbgrader schema-3 cell metadata) and ``solved/`` (the instructor
notebook executed). The test cells write the notebook's functions to
``<module>.py`` in a scratch folder, next to the course's reference solutions of the earlier
lessons it imports, and grade it with ``course.engine.runner.grade``: the same tests as
``course check``. Cell ids come from the lesson and the cell's index, so a rebuild is identical.
nbformat is needed to build; nbclient and ipykernel to execute.
"""

from __future__ import annotations

import ast
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from course import lesson_source
from course.catalog import Catalog, Lesson
from course.lesson_source import BEGIN, END, LessonSource

VARIANTS = ("student", "instructor", "solved")
CELL_TIMEOUT = 120  # seconds per cell; grading a lesson takes a few seconds


class NotebookError(Exception):
    """A notebook could not be built or executed; the message is one screen for a person."""


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
        f"run the same checks as `course check {lesson.number}`."
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


def _literal(text: str) -> str:
    return f"'''\\\n{text}'''" if "'''" not in text and "\\" not in text else repr(text)


def grading_cell(lesson: Lesson, source: LessonSource, catalog: Catalog) -> str:
    """The cell that writes the notebook's functions to a module file and grades it."""
    names = ", ".join(repr(f.name) for f in source.functions)
    earlier = "".join(f"{m!r}, " for m in earlier_modules(lesson, catalog))
    return f'''\
# Grading: the functions above go into {lesson.file_name} in a scratch folder, next to the
# course's reference solutions of the earlier lessons it imports, and the course's own tests
# grade it: the same checks as `course check {lesson.number}`. The cells below need `result`.
import inspect
import shutil
import tempfile
from pathlib import Path
from typing import Any

from course import resources
from course.catalog import load_catalog
from course.engine.runner import grade

HEADER = {_literal(source.header)}
FUNCTIONS = ({names},)
missing = [name for name in FUNCTIONS if name not in globals()]
assert not missing, f"Run the cells that define {{', '.join(missing)}} first."
lesson = load_catalog().by_module({lesson.module!r})
with tempfile.TemporaryDirectory(prefix="{lesson.module}-") as scratch:
    code = HEADER + "".join("\\n\\n" + inspect.getsource(globals()[name]) for name in FUNCTIONS)
    Path(scratch, lesson.file_name).write_text(code, encoding="utf-8")
    for earlier in ({earlier}):
        shutil.copy(resources.solution_path(earlier), scratch)
    result = grade(lesson, scratch)
print(f"Lesson {{lesson.id}} · {{lesson.title}}: {{result.status}}")
for exercise in result.exercises:
    passed = sum(check.status == "passed" for check in exercise.checks)
    print(f"  {{exercise.status:<12}} {{exercise.name:<32}} {{passed}}/{{len(exercise.checks)}}")
for line in filter(None, [result.message, result.note]):
    print(line)


def check_exercise(name):
    """Assert that every check of one exercise passed; say what the first problem is."""
    exercise = next(e for e in result.exercises if e.name == name)
    problems = [check for check in exercise.checks if check.status != "passed"]
    detail = (problems[0].message if problems else "") or result.message
    assert not problems, f"{{name}} is {{exercise.status}}: {{detail}}"
    print(f"{{name}}: all {{len(exercise.checks)}} checks passed.")
'''


def _earlier_cell(modules: list[str]) -> str:
    names = ", ".join(modules)
    return f"""\
# The earlier lessons this one imports ({names}): the course's reference solutions, copied
# to a scratch folder on the import path, so that this notebook runs on its own.
import shutil
import sys
import tempfile

from course import resources

EARLIER = tempfile.mkdtemp(prefix="earlier-lessons-")
for module in ({"".join(f"{m!r}, " for m in modules)}):
    shutil.copy(resources.solution_path(module), EARLIER)
sys.path.insert(0, EARLIER)"""


def _meta(grade_id: str, *, solution: bool = False, grade: bool = False, points: int = 0) -> dict:
    meta = {
        "grade_id": grade_id,
        "solution": solution,
        "grade": grade,
        "locked": not solution,
        "schema_version": 3,
    }
    if grade:
        meta["points"] = points
    return {"nbgrader": meta}


def build(lesson: Lesson, catalog: Catalog, variant: str) -> dict:
    """The student or instructor notebook of one lesson, validated, without outputs."""
    import nbformat
    from nbformat import v4

    source = read_lesson(lesson)
    instructor = variant != "student"
    cells = []
    for index, text in enumerate(markdown_sections(source.text, lesson)):
        cells.append(v4.new_markdown_cell(text, metadata=_meta(f"text_{index}")))
    earlier = earlier_modules(lesson, catalog)
    if earlier:
        cells.append(v4.new_code_cell(_earlier_cell(earlier), metadata=_meta("earlier_lessons")))
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
    cells.append(
        v4.new_markdown_cell(
            "## Tests\n\nRun these cells once the functions above are written. Each exercise's cell "
            "passes when every check of that exercise passes.",
            metadata=_meta("tests_text"),
        )
    )
    cells.append(
        v4.new_code_cell(grading_cell(lesson, source, catalog).rstrip("\n"), metadata=_meta("grading"))
    )
    for exercise in lesson.exercises:
        cells.append(
            v4.new_code_cell(
                f"check_exercise({exercise.name!r})",
                metadata=_meta(f"test_{exercise.name}", grade=True, points=1),
            )
        )
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
