"""Feedback files: one Markdown file per submission, for the instructor to hand back
(`course grade DIR --feedback FEEDBACK_DIR`), as nbgrader's generate_feedback does.

A file holds what the re-grade says of the student's own work: why the submission was not graded
(refused, or the grader failed), notes on the submission (extra files ignored, a claim in
``result.json`` that the re-grade does not bear out), and per lesson its points and, for each
check not passed, exercise by exercise and the most explaining first, the very message `course
check --json` gives for it (the named mistake, the expected/got slice, the NaN counts). The
flags of ``similarity`` and ``literals`` stay in the gradebook: they name other students'
files and are the instructor's to judge (``gradebook.grade_folder`` keeps them under ``flags``).

A file is named after its submission (``ada.zip`` -> ``ada.md``; a notebook or an nbgrader
student: the row's file or student name), reduced to letters, digits, ``-``, ``_`` and ``.``, never
hidden, never a path, at most ``NAME_BYTES`` bytes, and kept apart from every other (ignoring
case, as some file systems do) by a ``-2``, ``-3`` ... Learner text (made safe by ``safe_text``)
is written only inside code spans and fenced blocks with more backticks than any run it holds, so
it is never read as Markdown: no heading, link or HTML of a submission's making.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from course import atomic_file
from course.content.catalog import load_catalog
from course.engine.results import NOT_STARTED, PASSED, CheckResult, LessonResult
from course.instructor.classroom import lesson_problems
from course.instructor.classroom.safe_text import safe_text

if TYPE_CHECKING:
    from course.instructor.classroom.gradebook import Report

NAME_BYTES = 80  # of a file's name before its "-N.md": far below any file system's 255
SUFFIXES = (".zip", ".ipynb")
_BACKTICKS = re.compile(r"`+")


def file_names(rows: Sequence[dict]) -> list[str]:
    """Each row's feedback file name, in order: its submission's name without ``.zip`` or
    ``.ipynb``, safe for a file system, and distinct from the others' ignoring case."""
    taken: set[str] = set()
    names = []
    for row in rows:
        base = _base(row.get("file", "") if isinstance(row, dict) else "")
        name, number = f"{base}.md", 1
        while name.casefold() in taken:
            number += 1
            name = f"{base}-{number}.md"
        taken.add(name.casefold())
        names.append(name)
    return names


def _base(file: object) -> str:
    """A submission's name as the stem of a file name: letters, digits, ``-``, ``_``, ``.``."""
    text = unicodedata.normalize("NFC", safe_text(file))
    for suffix in SUFFIXES:
        if text.lower().endswith(suffix):
            text = text[: -len(suffix)]
    text = "".join(char if char.isalnum() or char in "-_." else "_" for char in text)
    text = re.sub(r"_+", "_", text).lstrip("._-")
    while len(text.encode()) > NAME_BYTES:
        text = text[:-1]
    return text.rstrip(".") or "submission"


def write_feedback(report: Report, folder: Path) -> list[Path]:
    """Write each row's feedback file into ``folder`` (made if need be); returns their paths.
    A row that cannot be written as it is gets a file that says so: the others are written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for row, name in zip(report.rows, file_names(report.rows), strict=True):
        path = folder / name
        if path.parent != folder:  # never: a name is one component (see ``_base``)
            raise ValueError(f"not a file name: {name!r}")
        try:
            text = feedback_text(row, report.max_points, report.inputs)
        except Exception as error:  # a malformed row: said in its own file
            text = f"# Feedback\n\nThis feedback could not be written ({type(error).__name__}).\n"
        atomic_file.replace(path, text, mode=0o644)
        written.append(path)
    return written


def feedback_text(row: dict, max_points: dict[str, int], inputs: str) -> str:
    """The Markdown feedback of one gradebook row."""
    from course.instructor.classroom.gradebook import total

    most = sum(max_points.values())
    lines = [f"# Feedback on {code_span(row['file'])}", ""]
    if row.get("name"):
        lines.append(f"- Name: {code_span(row['name'])}")
    on = "the course's public inputs" if inputs == "public" else "inputs of your instructor's own"
    lines += [f"- Graded with course {_version()} on {on}.", f"- Total: {total(row)} of {most} points.", ""]
    flags = set(row.get("flags", []))
    told = {lesson_problems.lesson_problem(m, e) for m, e in row["lessons"].items() if e}
    notes = [problem for problem in row["problems"] if problem not in flags and problem not in told]
    if row["outcome"] != "graded":
        lines += ["## This submission was not graded", "", fenced("\n".join(notes)), ""]
    elif notes:
        lines += ["## Notes on this submission", ""] + [f"- {code_span(note)}" for note in notes] + [""]
    for module, most_points in max_points.items():
        entry = row["lessons"].get(module)
        if entry is not None:
            lines += _lesson(module, entry, most_points)
    return "\n".join(lines).rstrip("\n") + "\n"


def _version() -> str:
    from course import __version__

    return __version__


def _lesson(module: str, entry: dict, most: int) -> list[str]:
    """A lesson's section: its status and points, why it could not run, its failing checks."""
    lesson = load_catalog().by_module(module)
    title = f"Lesson {lesson.id}: {lesson.title} ({lesson.file_name})" if lesson else module
    status = safe_text(entry["status"])
    lines = [f"## {title}", "", f"{_said(status)}: {entry['points']} of {most} points.", ""]
    if not entry.get("result"):
        if status == "missing":
            lines += ["This lesson's file was not in the submission.", ""]
        return lines
    result = LessonResult.from_dict(entry["result"])
    for text in (result.message, result.note, result.notice):
        if text.strip():
            lines += [fenced(text), ""]
    for exercise in result.exercises:
        got = sum(check.status == PASSED for check in exercise.checks)
        state = _said(safe_text(exercise.status)).lower()
        lines += [f"### {safe_text(exercise.name)}: {state}, {got} of {len(exercise.checks)} points", ""]
        failing = [check for e, check in result.problems() if e is exercise]
        for checks in _same_message(failing):
            names = ", ".join(code_span(check.name) for check in checks)
            about = f": {safe_text(checks[0].title)}" if checks[0].title and len(checks) == 1 else ""
            lines += [f"{_said(safe_text(checks[0].status))}: {names}{about}", ""]
            if checks[0].message.strip():
                lines += [fenced(checks[0].message), ""]
    if result.output.strip() and result.status != PASSED:
        lines += ["What your code printed (its end):", "", fenced(result.output), ""]
    return lines


def _said(status: str) -> str:
    """A status as a sentence starts: "not-started" -> "Not started"."""
    return status.replace("-", " ").capitalize()


def _same_message(checks: Sequence[CheckResult]) -> list[list[CheckResult]]:
    """``checks`` in groups of the same status and message, in the order first met: an
    exercise not started says "not implemented" once, not once per check."""
    groups: dict[tuple[str, str], list[CheckResult]] = {}
    for check in checks:
        key = (check.status, check.message if check.status != NOT_STARTED else "")
        groups.setdefault(key, []).append(check)
    return list(groups.values())


def code_span(value: object) -> str:
    """``value`` (one line, made safe) as a Markdown code span it cannot end early."""
    text = safe_text(value)
    ticks = "`" * (max(map(len, _BACKTICKS.findall(text)), default=0) + 1)
    padded = f" {text} " if text[:1] in ("`", " ") or text[-1:] in ("`", " ") else text
    return f"{ticks}{padded or ' '}{ticks}"


def fenced(value: object) -> str:
    """``value`` (lines kept, made safe) as a fenced code block no line of it can close: its
    fence has more backticks than any run in the text."""
    text = safe_text(value, lines=True).rstrip("\n")
    ticks = "`" * max(3, max(map(len, _BACKTICKS.findall(text)), default=0) + 1)
    return f"{ticks}text\n{text}\n{ticks}"
