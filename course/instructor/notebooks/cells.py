"""What of a notebook is the learner's lesson module, the same rule in the kernel and in `course grade`.

The module is every code cell the learner wrote or was given as part of the lesson (the imports,
the given helpers, the answer cells, cells the learner added), in order, without the course's
machinery cells: the setup, the earlier lessons' code, the grading and test cells. Machinery
cells start with ``TAG`` and carry a ``grade_id`` from ``MACHINERY``. IPython magics and shell
lines (``%timeit``, ``!pip``) become comments: a module cannot run them. IPython's builtins
(``display``, ``get_ipython``) are not a module's either: the file graded gets stand-ins that do
nothing for those its code names (``graded_source``), as a magic does nothing there.

In a kernel, ``record_cells`` keeps the source of every cell run (by the frontend's cell id, so
an edited cell run again replaces its earlier version; by its text when the frontend sends no
id), and the grading cell grades ``recorded_module()``. In `course grade`, ``notebook_module``
reads the cells of the submitted notebook file. A test cell shows what `course check` shows
about its exercise (``exercise_line``). This module is imported inside learners' kernels: it
imports nothing heavy.
"""

from __future__ import annotations

import ast
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

TAG = "# course:"
MACHINERY = ("setup", "earlier_lessons", "grading", "test_", "pictures")
_MAGIC = re.compile(r"^(\s*)([%!])")


def is_machinery(source: str, grade_id: str = "") -> bool:
    """A course cell that is not part of the lesson module (by its tag or its nbgrader grade_id)."""
    return source.lstrip().startswith(TAG) or any(
        grade_id == name or (name.endswith("_") and grade_id.startswith(name)) for name in MACHINERY
    )


def module_source(cells: Iterable[str]) -> str:
    """The lesson module made of these cell sources, in order; magic lines become comments."""
    parts = []
    for source in cells:
        lines = [_MAGIC.sub(r"\1# \2", line) for line in source.rstrip().splitlines()]
        if any(line.strip() for line in lines):
            parts.append("\n".join(lines))
    return "\n\n\n".join(parts) + "\n" if parts else ""


# IPython puts these in the builtins of a kernel; a module imported outside one lacks them. A
# stand-in goes at the top of the graded file, so that a definition or import of the learner's
# own replaces it. ``__IPYTHON__`` gets none: it says "running in IPython", which is not so here.
STAND_INS = {
    "display": '''\
def display(*objects, **options):
    """IPython's display(), which shows nothing when graded."""
''',
    "get_ipython": '''\
class _QuietShell:
    """What get_ipython() returns when graded: every method does nothing (as a magic does)."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def get_ipython():
    """IPython's get_ipython(): a shell that does nothing when graded."""
    return _QuietShell()
''',
}


def graded_source(code: str) -> str:
    """``code`` as the file graded: with the ``STAND_INS`` of the IPython builtins it names,
    after its docstring and ``from __future__`` imports (which must come first). Code that names
    none, or does not parse (the grader reports where), is left as it is."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return code
    named = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    stand_ins = [text for name, text in STAND_INS.items() if name in named]
    if not stand_ins:
        return code
    first = 0  # the lines that must stay first: a docstring, then `from __future__` imports
    for index, node in enumerate(tree.body):
        docstring = index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        if not (docstring or (isinstance(node, ast.ImportFrom) and node.module == "__future__")):
            break
        first = node.end_lineno or node.lineno
    lines = code.splitlines(keepends=True)
    head = "".join(lines[:first])
    head += "\n" if head and not head.endswith("\n") else ""
    preamble = (
        f"{TAG} stand-ins for IPython's builtins, which only a kernel has (yours below replace them).\n"
        + "\n\n".join(stand_ins)
    )
    return f"{head}{preamble}\n\n{''.join(lines[first:])}"


def cell_source(cell: Mapping[str, Any]) -> str:
    """A notebook cell's source as text (nbformat allows a string or a list of lines)."""
    source = cell.get("source", "")
    if isinstance(source, list):
        return "".join(str(part) for part in source)
    return source if isinstance(source, str) else ""


def notebook_module(notebook: Mapping[str, Any]) -> str:
    """The lesson module of a notebook read as JSON: its code cells that are not machinery."""
    cells = notebook.get("cells")
    chosen = []
    for cell in cells if isinstance(cells, list) else []:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata")
        nbgrader = meta.get("nbgrader") if isinstance(meta, dict) else None
        grade_id = nbgrader.get("grade_id") if isinstance(nbgrader, dict) else ""
        source = cell_source(cell)
        if not is_machinery(source, grade_id if isinstance(grade_id, str) else ""):
            chosen.append(source)
    return module_source(chosen)


# -- in the kernel --------------------------------------------------------------------------------
class _Recorder:
    def __init__(self) -> None:
        self.cells: dict[str, str] = {}

    def after(self, result: Any) -> None:
        info = getattr(result, "info", None)
        source = getattr(info, "raw_cell", None)
        if not isinstance(source, str) or getattr(info, "silent", False) or is_machinery(source):
            return
        key = getattr(info, "cell_id", None) or source
        self.cells[key] = source  # an id seen before keeps its place, with its latest source


_RECORDER: _Recorder | None = None


def record_cells(shell: Any) -> None:
    """Keep, from now on, the source of every cell the IPython ``shell`` runs (once per kernel)."""
    global _RECORDER
    if _RECORDER is None:
        _RECORDER = _Recorder()
        shell.events.register("post_run_cell", _RECORDER.after)


def recorded_module() -> str:
    """The lesson module made of the cells run since ``record_cells`` (empty before)."""
    return module_source(_RECORDER.cells.values()) if _RECORDER else ""


def grade_module(module: str, code: str, earlier: Mapping[str, str]) -> Any:
    """Grade ``code`` as the lesson ``module``, next to the ``earlier`` lessons' code, in a
    scratch folder removed afterwards; the course's LessonResult."""
    from course.content.catalog import load_catalog
    from course.engine.grading.runner import grade

    lesson = load_catalog().by_module(module)
    if lesson is None:
        raise LookupError(f"this course has no lesson {module!r}")
    with tempfile.TemporaryDirectory(prefix="course-notebook-") as scratch:
        Path(scratch, lesson.file_name).write_text(graded_source(code), encoding="utf-8")
        for name, text in earlier.items():
            Path(scratch, f"{name}.py").write_text(text, encoding="utf-8")
        return grade(lesson, scratch)


def exercise_line(result: Any, name: str) -> tuple[int, str]:
    """(points, text) for one exercise's test cell; the points are its passed checks. The text
    is one line; when a check failed (not merely not started), what `course check` shows about
    the most explaining one follows: its heading and its whole message (the named mistake, the
    NaN count, the expected and got slice), and how many more failed. (The name is the one the
    setup cell of notebooks built earlier imports.)"""
    from course.engine.results import HAND_CHECKED, NOT_STARTED, PASSED

    exercise = next((e for e in result.exercises if e.name == name), None)
    if exercise is None:
        return 0, f"✘ {name}: not graded ({_first_line(result.message) or 'no result'})"
    checks = exercise.checks
    passed = sum(check.status == PASSED for check in checks)
    if checks and passed == len(checks):
        return passed, f"✔ {name}: all {passed} checks passed."
    head = f"✘ {name}: {passed} of {len(checks)} checks passed ({exercise.status})"
    failing = sorted((c for c in checks if c.status != PASSED), key=lambda check: check.rank())
    shown = failing[0] if failing else None  # what `course check` shows first (``LessonResult.problems``)
    if shown is None or shown.status == NOT_STARTED:
        why = _first_line(shown.message if shown else result.message) or exercise.status
        return passed, f"{head}: {why}"
    heading = shown.heading() + (" (hand-checked)" if shown.kind == HAND_CHECKED else "")
    parts = [f"{head}.", heading, shown.message.rstrip() or "(no message)"]
    more = sum(check is not shown and check.status != NOT_STARTED for check in failing)
    if more:
        parts.append(f"{more} more check{'s' if more > 1 else ''} of {name} not passed.")
    return passed, "\n".join(parts)


def _first_line(text: str | None, limit: int = 200) -> str:
    line = next((part.strip() for part in (text or "").splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"
