"""`course dev check`'s slow part: grade a lesson's skeleton (every check not started) and its
solution (every check passes, every grading test tied to an exercise), in this process."""

from __future__ import annotations

import sys
from pathlib import Path

from course.content.catalog import Lesson
from course.devcheck.repository import Problem
from course.engine.results import NOT_STARTED, LessonResult


def _grade(lesson: Lesson, folder: Path, test_file: Path) -> LessonResult:
    """Grade in this process. pytest (importlib mode) reuses a test module already in
    sys.modules under the same name, so a test file of another root graded earlier in this
    process would silently stand in for this one: forget it before and after."""
    from course.engine.grading.runner import grade

    sys.modules.pop(test_file.stem, None)
    try:
        return grade(lesson, folder, test_file=test_file)
    finally:
        sys.modules.pop(test_file.stem, None)


def skeleton_grade_problems(lesson: Lesson, folder: Path, test_file: Path, where: str) -> list[Problem]:
    """The fresh skeleton grades "not-started" in every single check."""
    result = _grade(lesson, folder, test_file)
    if result.message and not result.untied:
        return [
            Problem("skeleton-error", where, f"Grading the skeleton failed: {_first_line(result.message)}")
        ]
    started = [
        f"{e.name}/{c.name} ({c.status})"
        for e in result.exercises
        for c in e.checks
        if c.status != NOT_STARTED
    ]
    if not started:
        return []
    return [
        Problem(
            "skeleton-not-stub",
            where,
            f"{len(started)} check(s) do not grade "
            f"not-started, e.g. {', '.join(started[:3])}: is the skeleton solved by "
            "accident?",
        )
    ]


def solution_grade_problems(
    lesson: Lesson, folder: Path, test_file: Path, where: str, tests_where: str
) -> list[Problem]:
    """The solution passes every check, and every grading test belongs to an exercise."""
    result = _grade(lesson, folder, test_file)
    if result.untied:
        return [
            Problem(
                "untied-test",
                tests_where,
                f"Tests without an @exercise marker naming "
                f"an exercise of {lesson.module} in the catalog: {', '.join(result.untied)}.",
            )
        ]
    problems = [
        Problem("untested-exercise", tests_where, f"No grading test is marked @exercise({exercise.name!r}).")
        for exercise in result.exercises
        if not exercise.checks
    ]
    if result.passed or problems:
        return problems
    if result.message:
        return [
            Problem("solution-fails", where, f"Grading the solution failed: {_first_line(result.message)}")
        ]
    failed = [
        f"{e.name}/{c.name} ({c.status}: {_first_line(c.message)})"
        for e in result.exercises
        for c in e.checks
        if c.status != "passed"
    ]
    return [
        Problem("solution-fails", where, f"{len(failed)} check(s) do not pass, e.g. {'; '.join(failed[:2])}.")
    ]


def _first_line(text: str) -> str:
    """The first line of a message, and its last when it has more (the error of a traceback)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()] or [""]
    return (lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}")[:300]
