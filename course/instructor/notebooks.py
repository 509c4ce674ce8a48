"""Jupyter notebooks built from the catalog and the lesson files, for instructors.

For each lesson three notebooks: ``student/`` (lesson text, skeleton cells, test cells, no
solution), ``instructor/`` (the same with every solution body between nbgrader's
``### BEGIN SOLUTION`` / ``### END SOLUTION`` markers and nbgrader schema-3 cell metadata) and
``solved/`` (the instructor notebook executed). The test cells write the notebook's functions to
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course.catalog import Catalog, Lesson

VARIANTS = ("student", "instructor", "solved")
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
CELL_TIMEOUT = 120  # seconds per cell; grading a lesson takes a few seconds
_EARLIER = re.compile(r"l\d\d_\w+$")
_EDIT_LINE = re.compile(r"^Edit this file, then run `course check (\d+)`\.$", re.MULTILINE)


class NotebookError(Exception):
    """A notebook could not be built or executed; the message is one screen for a person."""


@dataclass(frozen=True)
class Function:
    name: str
    skeleton: str  # the skeleton's def, docstring and `raise NotImplementedError`
    solution: str  # the same def and docstring, the solution's body in a solution region


@dataclass(frozen=True)
class LessonSource:
    text: str  # the module docstring
    header: str  # imports and constants: everything between the docstring and the first def
    functions: tuple[Function, ...]


def _parse(path: Path) -> tuple[list[str], ast.Module]:
    source = path.read_text(encoding="utf-8")
    return source.splitlines(), ast.parse(source)


def read_lesson(lesson: Lesson) -> LessonSource:
    """Split a lesson's skeleton and solution into text, header and functions."""
    lines, tree = _parse(lesson.skeleton)
    solution_lines, solution_tree = _parse(lesson.solution)
    defs = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    solved = {node.name: node for node in solution_tree.body if isinstance(node, ast.FunctionDef)}
    if not defs or tree.body[0] is defs[0] or ast.get_docstring(tree) is None:
        raise NotebookError(
            f"{lesson.skeleton} needs a module docstring, then its imports, then its functions."
        )
    header = "\n".join(lines[tree.body[0].end_lineno : defs[0].lineno - 1]).strip() + "\n"
    functions = []
    for node in defs:
        if node.name not in solved:
            raise NotebookError(f"{node.name} is in {lesson.skeleton} but not in {lesson.solution}.")
        start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        skeleton = "\n".join(lines[start : node.end_lineno])
        head = "\n".join(lines[start : node.body[0].end_lineno])
        functions.append(
            Function(
                node.name,
                skeleton,
                head
                + "\n"
                + _solution_region(solved[node.name], solution_lines, ast.get_docstring(node) or ""),
            )
        )
    return LessonSource(ast.get_docstring(tree, clean=True) or "", header, tuple(functions))


def _solution_region(node: ast.FunctionDef, lines: list[str], skeleton_doc: str) -> str:
    """The solution's body between the markers, its docstring's explanation as comments."""
    indent = " " * node.body[0].col_offset
    known = {p.strip() for p in skeleton_doc.split("\n\n")}
    extra = [p for p in (ast.get_docstring(node) or "").split("\n\n") if p.strip() not in known]
    comments = [f"{indent}# {line}".rstrip() for p in extra for line in p.splitlines() + [""]]
    first = 1 if ast.get_docstring(node) is not None else 0
    body = lines[node.body[first].lineno - 1 : node.end_lineno]
    return "\n".join([indent + BEGIN, *comments[:-1], *body, indent + END])


def earlier_modules(lesson: Lesson, catalog: Catalog) -> list[str]:
    """The earlier lessons' modules this lesson imports, directly or through each other."""
    found: list[str] = []
    pending = _imported(lesson.skeleton)
    while pending:
        module = pending.pop(0)
        earlier = catalog.by_module(module)
        if module in found or earlier is None:
            continue
        found.append(module)
        pending += _imported(earlier.solution)
    return sorted(found)


def _imported(path: Path) -> list[str]:
    """Modules named by the file's top-level `from ... import` statements (not its text)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module and _EARLIER.match(node.module)
    ]


def markdown_sections(text: str, lesson: Lesson) -> list[str]:
    """The lesson text as markdown: a title cell, then one cell per underlined section."""
    text = _EDIT_LINE.sub(
        f"Fill in the functions below, then run the test cells at the end: they run the same "
        f"checks as `course check {lesson.number}`.",
        text,
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
