"""`course dev check`'s slow part: grade a lesson's skeleton (every check not started) and its
solution (every check passes, every grading test tied to an exercise), in this process."""

from __future__ import annotations

import sys
from pathlib import Path

from course.content.catalog import Lesson
from course.devcheck.repository import Problem
from course.devcheck.sources import CODE_CALL
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


def hint_problems(lesson: Lesson, root: Path, test_file: Path) -> list[Problem]:
    """Every hint that gives code carries it as data (``code_hints``), and that code, put in
    place of its function's solution region in the reference solution, passes the lesson: a
    learner who copies the last hint must not fail. A last hint whose text writes code without
    data is reported, as the dev check cannot try it."""
    import shutil
    import tempfile

    from course.content.lesson_source import LessonSourceError

    where = "course/content/catalog.toml"
    solution = root / "solutions" / f"{lesson.module}.py"
    problems: list[Problem] = []
    for exercise in lesson.exercises:
        last = len(exercise.hints)
        if exercise.hints and exercise.code_for(last) is None and CODE_CALL.search(exercise.hints[-1]):
            problems.append(
                Problem(
                    "code-hint-without-data",
                    where,
                    f"{lesson.module}.{exercise.name}'s last hint writes code in its text: give it as "
                    "a code hint (tier, replaces, code) so that `course dev check` can try it.",
                )
            )
        for hint in exercise.code_hints:
            label = f"{lesson.module}.{exercise.name}'s hint {hint.tier}"
            try:
                source = with_code(solution.read_text(encoding="utf-8"), hint.replaces, hint.code)
            except (OSError, LessonSourceError) as error:
                problems.append(Problem("hint-unusable", where, f"{label} cannot be applied: {error}"))
                continue
            with tempfile.TemporaryDirectory() as scratch:
                folder = Path(scratch)
                for path in (root / "solutions").glob("l*.py"):
                    shutil.copyfile(path, folder / path.name)
                (folder / solution.name).write_text(source, encoding="utf-8")
                result = _grade(lesson, folder, test_file)
            if not result.passed:
                failed = [
                    f"{e.name}/{c.name}" for e in result.exercises for c in e.checks if c.status != "passed"
                ]
                why = _first_line(result.message) if result.message else ", ".join(failed[:3])
                problems.append(
                    Problem(
                        "hint-fails", where, f"{label}, in place of {hint.replaces}'s solution, fails: {why}."
                    )
                )
    return problems


def with_code(source: str, function: str, code: str) -> str:
    """``source`` with the solution region of ``function`` replaced by ``code`` (indented as the
    region). The function must hold exactly one region."""
    import ast
    import textwrap

    from course.content.lesson_source import LessonSourceError, regions

    tree = ast.parse(source)
    node = next(
        (
            n
            for n in tree.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == function
        ),
        None,
    )
    if node is None:
        raise LessonSourceError(f"the solution has no function {function}")
    # A region begins inside the function; its END marker may follow the last statement, where
    # the function's end_lineno stops.
    last = (node.end_lineno or node.lineno) - 1
    inside = [r for r in regions(source) if node.lineno - 1 <= r.begin <= last]
    if len(inside) != 1:
        raise LessonSourceError(f"{function} holds {len(inside)} solution regions, not one")
    region = inside[0]
    lines = source.splitlines()
    body = textwrap.indent(textwrap.dedent(code).strip("\n"), region.indent).splitlines()
    return "\n".join(lines[: region.begin] + body + lines[region.end + 1 :]) + "\n"
