"""Why a gradebook row needs a look, in one line per cause, taken from the grade's own words.

A lesson graded "error" (nothing of it could run) or whose checks reached their time limit gets
a problem on its row, condensed from the lesson result's message (``LessonResult.message``:
"l02_softmax.py could not be imported: ModuleNotFoundError: No module named 'utils'
(l02_softmax.py, line 1)"), else from its first check that ended in an error or a timeout (a
crash: "Your code ended the Python process ..."). A refused or grader-failed row always has a
problem saying why. Every line is made safe (``safe_text``): it quotes the submission.
"""

from __future__ import annotations

import re

from course.content.catalog import load_catalog
from course.engine.results import ERROR, TIMEOUT, LessonResult
from course.instructor.classroom.safe_text import safe_text

LIMIT = 400  # characters of one problem: a spreadsheet cell, a progress line
# "l01_projections.py, line 2, in linear:" as the worker writes where an error was raised
_WHERE = re.compile(r"^(\S+\.py, line \d+(?:, in [^:]+)?):?$")
# "ModuleNotFoundError: No module named 'utils'", "SyntaxError: invalid syntax", "ValueError"
_RAISED = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)(?::.*)?$")


def one_line(message: str) -> str:
    """``message`` (a lesson's or a check's, several lines) as one line: its first sentence,
    the exception raised (``ValueError: boom``) and where (``(l01_projections.py, line 2, in
    linear)``); the quoted code lines (indented) are left out. Made safe, at most ``LIMIT``
    characters, where it was raised kept."""
    lines = [line.rstrip() for line in str(message).splitlines() if line.strip()]
    kept = [line.strip() for line in lines if not line[:1].isspace()]  # quoted code and carets
    where = next((match.group(1) for match in map(_WHERE.match, kept) if match), "")
    rest = [line for line in kept if not _WHERE.match(line)] or [line.strip() for line in lines] or [""]
    raised = next((line for line in rest if _RAISED.match(line)), "")
    text = rest[0]
    if raised and raised != text:
        text = f"{text.rstrip(':')}: {raised}"
    elif text.endswith(":") and len(rest) > 1:
        text = f"{text} {rest[1]}"
    suffix = f" ({where})" if where and where not in text else ""
    text, suffix = safe_text(text), safe_text(suffix)[: LIMIT // 2]
    room = LIMIT - len(suffix)
    return (text if len(text) <= room else text[: room - 1] + "…") + suffix


def lesson_problem(module: str, entry: dict) -> str:
    """The one line saying why the gradebook entry ``entry`` of lesson ``module`` needs a look:
    graded "error", or some of its checks reached their time limit; else ""."""
    data = entry.get("result")
    if entry.get("status") == ERROR and not data:
        return f"{file_name(module)}: graded as an error, with no result from the grader"
    if not data:
        return ""
    result = LessonResult.from_dict(data)
    checks = [check for exercise in result.exercises for check in exercise.checks]
    timed_out = [check for check in checks if check.status == TIMEOUT]
    name = file_name(module)
    if result.status == ERROR:
        if result.message.strip():
            text = one_line(result.message)
            return text if name in text else safe_text(f"{name}: {text}")
        errors = [check for check in checks if check.status in (ERROR, TIMEOUT) and check.message.strip()]
        if not errors:
            return f"{name}: graded as an error, with no message from the grader"
        return safe_text(f"{name}: no check could run: {one_line(errors[0].message)}")
    if timed_out:
        count = f"{len(timed_out)} of {len(checks)} checks reached their time limit"
        return safe_text(f"{name}: {count}: {one_line(timed_out[0].message)}")
    return ""


def file_name(module: str) -> str:
    """The lesson file of ``module`` (the catalog's), else the module's name."""
    lesson = load_catalog().by_module(module)
    return lesson.file_name if lesson is not None else module


def explain(row: dict) -> None:
    """Add to ``row``'s problems the one line of each of its lessons that needs a look
    (``lesson_problem``); a row not graded (refused, or the grader failed) that has no problem
    gets one saying so."""
    for module, entry in row["lessons"].items():
        problem = lesson_problem(module, entry) if entry else ""
        if problem and problem not in row["problems"]:
            row["problems"].append(problem)
    if row.get("outcome") != "graded" and not row["problems"]:
        row["problems"].append(f"{safe_text(row.get('outcome'))}: the grader gave no reason (report it)")
