"""`course grade` on notebooks: nbgrader's ``submitted/<student>/<assignment>/*.ipynb`` layout
(the course folder, or its ``submitted/`` folder), or a folder of ``.ipynb`` files.

Nothing a kernel printed is trusted: outputs are never read. Each notebook's lesson module is
taken from the file's cells by ``course.instructor.notebooks.cells.notebook_module`` (the rule
the in-kernel grading cell applies), written with stand-ins for the IPython builtins it names
(``cells.graded_source``) to a fresh folder next to the course's reference code of the earlier
lessons it imports (the code the notebook gives, on both routes), and graded by the isolated,
sealed grader, like a bundle's file. A row is one student (nbgrader) or one notebook file (a
flat folder); its shape is the bundle rows' (``gradebook``).

A student's folder is hostile input like a bundle: nothing in it is read through a symbolic
link. Each file is opened component by component below the submissions folder with
``O_NOFOLLOW`` (``_read_below``), so a ``timestamp.txt``, a notebook or an assignment folder that
is a link is treated as absent and the row says so; a FIFO or a device is refused unread. Every
text a folder gives a row (the student folder's name, undecodable bytes included, the assignment's
name, the timestamp, problems quoting file names) is made safe to show and to write
(``safe_text``).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from course.content.catalog import Catalog, Lesson, load_catalog
from course.instructor.classroom import lesson_problems, literals, similarity
from course.instructor.classroom.safe_text import safe_text
from course.instructor.classroom.submissions import lesson_summary
from course.instructor.notebooks.build import earlier_modules
from course.instructor.notebooks.cells import graded_source, notebook_module
from course.instructor.notebooks.text import reference_code

MAX_NOTEBOOK_BYTES = 8 * 1024**2
MAX_TIMESTAMP_BYTES = 1024  # nbgrader writes one line of about 30
TIMESTAMP = "timestamp.txt"  # nbgrader writes one next to each submitted assignment
LINKED = "a symbolic link: not followed"


@dataclass
class NotebookSubmission:
    """One row's notebooks: ``key`` is the student id (nbgrader) or the notebook's file name.
    ``below``: the submissions folder the notebooks' paths are read below, without following a
    link (``_read_below``); ``problems``: what was found and not read (links)."""

    key: str
    name: str
    notebooks: list[tuple[str, str]] = field(default_factory=list)  # (nbgrader assignment or "", path)
    below: str = ""
    problems: list[str] = field(default_factory=list)


def _hidden(path: Path) -> bool:
    return path.name.startswith(".")


def submissions_in(folder: Path) -> list[NotebookSubmission]:
    """The notebook submissions of ``folder``: its ``*.ipynb`` files, one row each, else
    nbgrader's ``[submitted/]<student>/<assignment>/*.ipynb``, one row per student. A link
    where a notebook, an assignment folder or a student folder should be is never followed: it
    is a problem on its row (a notebook that is a link is refused as its row's notebook)."""
    root = folder / "submitted" if (folder / "submitted").is_dir() else folder
    flat = sorted(p for p in root.glob("*.ipynb") if not _hidden(p) and _file_or_link(p))
    if flat:
        return [NotebookSubmission(p.name, p.stem, [("", str(p))], str(root)) for p in flat]
    found = []
    for student in sorted(p for p in root.iterdir() if not _hidden(p)):
        if student.is_symlink():
            if student.is_dir():  # a link to a folder: a student's, for all we know
                found.append(
                    NotebookSubmission(
                        student.name, student.name, [], str(root), [f"{student.name}/: {LINKED}"]
                    )
                )
            continue
        if not student.is_dir():
            continue
        books, problems = [], []
        for assignment in sorted(p for p in student.iterdir() if not _hidden(p)):
            if assignment.is_symlink():
                problems.append(f"{assignment.name}/: {LINKED}")
            elif assignment.is_dir():
                books += sorted(p for p in assignment.glob("*.ipynb") if not _hidden(p) and _file_or_link(p))
        if books or problems:
            pairs = [(p.parent.name, str(p)) for p in books]
            found.append(NotebookSubmission(student.name, student.name, pairs, str(root), problems))
    return found


def _file_or_link(path: Path) -> bool:
    """A file, or a link (reported on its row when it is read, never followed)."""
    return path.is_symlink() or path.is_file()


def _read_below(path: Path, below: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``, else ValueError), each of its
    components below ``below`` opened without following a symbolic link: a link anywhere there
    raises OSError ELOOP; a FIFO or a device is refused unread (ValueError)."""
    parts = path.relative_to(below).parts
    folder = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    handle = os.open(below, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the instructor's own
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC if last else folder
            inner = os.open(part, flags, dir_fd=handle)
            os.close(handle)
            handle = inner
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > limit:
            raise ValueError(f"larger than {limit} bytes")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(handle, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise ValueError(f"larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(handle)


def _why(error: Exception) -> str:
    if isinstance(error, OSError) and error.errno == errno.ELOOP:
        return LINKED
    return str(error)[:100]


def _read(path: Path, below: Path) -> dict:
    data = _read_below(path, below, MAX_NOTEBOOK_BYTES)
    notebook = json.loads(data.decode("utf-8"))
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
        "file": safe_text(submission.key),
        "name": safe_text(submission.name[:80]),
        "course_version": "",
        "outcome": "graded",
        "lessons": {},
        "problems": list(submission.problems),
        "assignments": {},
    }
    sources: dict[str, bytes] = {}
    below = Path(submission.below) if submission.below else None
    for assignment, text in submission.notebooks:
        path = Path(text)
        try:
            notebook = _read(path, below or path.parent)
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
            row["problems"].append(f"{path.name}: not a readable notebook ({_why(error)})")
            continue
        lesson = lesson_of(notebook, path, catalog)
        if lesson is None or lesson.module not in modules:
            if lesson is None:
                row["problems"].append(f"{path.name}: not a notebook of one of this course's lessons")
            continue
        if lesson.module in row["lessons"]:
            row["problems"].append(f"{path.name}: a second notebook for {lesson.module} (ignored)")
            continue
        version = str(_course_meta(notebook).get("version", ""))[:40]
        row["course_version"] = row["course_version"] or safe_text(version)
        code = notebook_module(notebook)
        sources[lesson.file_name] = code.encode("utf-8")
        folder = Path(tempfile.mkdtemp(prefix="course-notebook-"))
        try:
            (folder / lesson.file_name).write_text(graded_source(code), encoding="utf-8")
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
        stamp, problem = _timestamp(path, below or path.parent)
        row["problems"] += [problem] if problem else []
        row["assignments"][lesson.module] = {
            "assignment": safe_text(assignment or lesson.module),  # a flat folder: the lesson
            "timestamp": stamp,
        }
    for module in modules:
        missing = {"lesson": module, "status": "missing", "points": 0, "max_points": 0, "exercises": []}
        row["lessons"].setdefault(module, dict(missing, result=None))
    if not sources:
        row["problems"].append("no notebook of the graded lessons")
    chosen = [lesson for lesson in map(catalog.by_module, modules) if lesson is not None]
    row["fingerprints"] = similarity.fingerprints(sources, chosen)
    row["literals"] = literals.sizes(sources, chosen)
    lesson_problems.explain(row)  # why a lesson is "error" or timed out
    row["problems"] = [safe_text(problem) for problem in row["problems"]]  # they quote file names
    return row


def _timestamp(path: Path, below: Path) -> tuple[str, str]:
    """The ``timestamp.txt`` beside the notebook ``path`` (its first line, made safe), and the
    problem with it: none when there is none; a link is never followed."""
    stamp = path.parent / TIMESTAMP
    try:
        data = _read_below(stamp, below, MAX_TIMESTAMP_BYTES)
    except FileNotFoundError:
        return "", ""
    except (OSError, ValueError) as error:
        return "", f"{stamp.parent.name}/{TIMESTAMP}: not read ({_why(error)})"
    text = data.decode("utf-8", errors="replace").strip()
    return safe_text(text.splitlines()[0][:64] if text else ""), ""
