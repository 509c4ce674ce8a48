"""What of a notebook is the learner's lesson module, the same rule in the kernel and in `course grade`.

The module is every code cell the learner wrote or was given as part of the lesson (the imports,
the given helpers, the answer cells, cells the learner added), in order, without the course's
machinery cells: the setup, the earlier lessons' code, the grading and test cells. Machinery
cells start with ``TAG`` and carry a ``grade_id`` from ``MACHINERY``. IPython magics and shell
lines (``%timeit``, ``!pip``) become comments: a module cannot run them.

In a kernel, ``record_cells`` keeps the source of every cell run (by the frontend's cell id, so
an edited cell run again replaces its earlier version; by its text when the frontend sends no
id), and the grading cell grades ``recorded_module()``. In `course grade`, ``notebook_module``
reads the cells of the submitted notebook file. This module is imported inside learners'
kernels: it imports nothing heavy.
"""

from __future__ import annotations

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
        Path(scratch, lesson.file_name).write_text(code, encoding="utf-8")
        for name, text in earlier.items():
            Path(scratch, f"{name}.py").write_text(text, encoding="utf-8")
        return grade(lesson, scratch)


def exercise_line(result: Any, name: str) -> tuple[int, str]:
    """(points, one line) for one exercise of a graded lesson: the points are its passed checks."""
    exercise = next((e for e in result.exercises if e.name == name), None)
    if exercise is None:
        return 0, f"✘ {name}: not graded ({_first_line(result.message) or 'no result'})"
    checks = exercise.checks
    passed = sum(check.status == "passed" for check in checks)
    if checks and passed == len(checks):
        return passed, f"✔ {name}: all {passed} checks passed."
    problem = next((c.message for c in checks if c.status != "passed" and c.message), "")
    why = _first_line(problem or result.message) or exercise.status
    return passed, f"✘ {name}: {passed} of {len(checks)} checks passed ({exercise.status}): {why}"


def _first_line(text: str | None, limit: int = 200) -> str:
    line = next((part.strip() for part in (text or "").splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"
