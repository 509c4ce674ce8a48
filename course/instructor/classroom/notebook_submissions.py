"""`course grade` on notebooks: nbgrader's ``submitted/<student>/<assignment>/*.ipynb`` layout
(the course folder, or its ``submitted/`` folder), or a folder of ``.ipynb`` files.

Nothing a kernel printed is trusted: outputs are never read. Each notebook's lesson module is
taken from the file's cells by ``course.instructor.notebooks.cells.notebook_module`` (the rule
the in-kernel grading cell applies), written to a fresh folder next to the course's reference
code of the earlier lessons it imports (the code the notebook gives, on both routes), and
graded by the isolated, sealed grader, like a bundle's file. A row is one student (nbgrader)
or one notebook file (a flat folder); its shape is the bundle rows' (``gradebook``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from course.content.catalog import Catalog, Lesson, load_catalog
from course.instructor.classroom import similarity
from course.instructor.classroom.submissions import lesson_summary
from course.instructor.notebooks.build import earlier_modules
from course.instructor.notebooks.cells import notebook_module
from course.instructor.notebooks.text import reference_code

MAX_NOTEBOOK_BYTES = 8 * 1024**2
TIMESTAMP = "timestamp.txt"  # nbgrader writes one next to each submitted assignment


@dataclass
class NotebookSubmission:
    """One row's notebooks: ``key`` is the student id (nbgrader) or the notebook's file name."""

    key: str
    name: str
    notebooks: list[tuple[str, str]] = field(default_factory=list)  # (nbgrader assignment or "", path)


def _visible(path: Path) -> bool:
    return not path.name.startswith(".") and not path.is_symlink()


def submissions_in(folder: Path) -> list[NotebookSubmission]:
    """The notebook submissions of ``folder``: its ``*.ipynb`` files, one row each, else
    nbgrader's ``[submitted/]<student>/<assignment>/*.ipynb``, one row per student."""
    root = folder / "submitted" if (folder / "submitted").is_dir() else folder
    flat = sorted(p for p in root.glob("*.ipynb") if _visible(p) and p.is_file())
    if flat:
        return [NotebookSubmission(p.name, p.stem, [("", str(p))]) for p in flat]
    found = []
    for student in sorted(p for p in root.iterdir() if p.is_dir() and _visible(p)):
        books = sorted(
            p for p in student.glob("*/*.ipynb") if _visible(p) and _visible(p.parent) and p.is_file()
        )
        if books:
            pairs = [(p.parent.name, str(p)) for p in books]
            found.append(NotebookSubmission(student.name, student.name, pairs))
    return found


def _read(path: Path) -> dict:
    if path.stat().st_size > MAX_NOTEBOOK_BYTES:
        raise ValueError(f"larger than {MAX_NOTEBOOK_BYTES // 1024**2} MiB")
    notebook = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(notebook, dict):
        raise ValueError("not a JSON object")
    return notebook


def _course_meta(notebook: dict) -> dict:
    meta = notebook.get("metadata")
    course = meta.get("course") if isinstance(meta, dict) else None
    return course if isinstance(course, dict) else {}


def lesson_of(notebook: dict, path: Path, catalog: Catalog) -> Lesson | None:
    """The lesson a notebook is for: its file name (nbgrader keeps it), else its metadata."""
    named = _course_meta(notebook).get("lesson")
    return catalog.by_module(path.stem) or (catalog.by_module(named) if isinstance(named, str) else None)


def grade_submission(submission: NotebookSubmission, modules: list[str]) -> dict:
    """One gradebook row for one submission's notebooks. Runs in a pool process."""
    from course.engine.grading.runner import grade

    catalog = load_catalog()
    row: dict = {
        "file": submission.key,
        "name": submission.name[:80],
        "course_version": "",
        "outcome": "graded",
        "lessons": {},
        "problems": [],
        "assignments": {},
    }
    sources: dict[str, bytes] = {}
    for assignment, text in submission.notebooks:
        path = Path(text)
        try:
            notebook = _read(path)
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
            row["problems"].append(f"{path.name}: not a readable notebook ({str(error)[:100]})")
            continue
        lesson = lesson_of(notebook, path, catalog)
        if lesson is None or lesson.module not in modules:
            if lesson is None:
                row["problems"].append(f"{path.name}: not a notebook of one of this course's lessons")
            continue
        if lesson.module in row["lessons"]:
            row["problems"].append(f"{path.name}: a second notebook for {lesson.module} (ignored)")
            continue
        row["course_version"] = row["course_version"] or str(_course_meta(notebook).get("version", ""))[:40]
        code = notebook_module(notebook)
        sources[lesson.file_name] = code.encode("utf-8")
        folder = Path(tempfile.mkdtemp(prefix="course-notebook-"))
        try:
            (folder / lesson.file_name).write_text(code, encoding="utf-8")
            for module in earlier_modules(lesson, catalog):
                earlier = catalog.by_module(module)
                if earlier is not None:
                    (folder / earlier.file_name).write_text(reference_code(earlier), encoding="utf-8")
            result = grade(lesson, folder, sealed=True)  # nothing from the kernel is read
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        full = result.to_dict()
        full["output"] = full["output"][-500:]
        row["lessons"][lesson.module] = dict(lesson_summary(result), result=full)
        row["assignments"][lesson.module] = {
            "assignment": assignment or lesson.module,  # a flat folder: the lesson
            "timestamp": _timestamp(path),
        }
    for module in modules:
        missing = {"lesson": module, "status": "missing", "points": 0, "max_points": 0, "exercises": []}
        row["lessons"].setdefault(module, dict(missing, result=None))
    if not sources:
        row["problems"].append("no notebook of the graded lessons")
    chosen = [lesson for lesson in map(catalog.by_module, modules) if lesson is not None]
    row["fingerprints"] = similarity.fingerprints(sources, chosen)
    return row


def _timestamp(path: Path) -> str:
    stamp = path.parent / TIMESTAMP
    try:
        return stamp.read_text(encoding="utf-8", errors="replace")[:64].strip() if stamp.is_file() else ""
    except OSError:
        return ""
