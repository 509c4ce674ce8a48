"""Where a failure's cause lies: in a function the failing exercise uses, not in the exercise.

The catalog says which exercises each exercise calls (``Exercise.calls``: one of its lesson, or
``module.name`` of an earlier lesson). A check of ``classify_heads`` that fails while
``relative_position_share`` fails too most likely fails because of it, and naming a mistake of
``classify_heads`` would send the learner to the wrong function: the check says which function
to fix first instead (``CheckResult.blame``).
"""

from __future__ import annotations

from collections.abc import Collection

from course.content.catalog import Lesson, load_catalog
from course.engine.results import PASSED, LessonResult


def same_lesson(result: LessonResult, lesson: Lesson) -> None:
    """Blame an exercise's failing checks on another exercise of the lesson that it calls and
    that fails in this very grade."""
    failing = {exercise.name for exercise in result.exercises if exercise.status != PASSED}
    calls = {exercise.name: exercise.calls for exercise in lesson.exercises}
    for exercise in result.exercises:
        culprit = next((c for c in calls.get(exercise.name, ()) if c in failing), None)
        if culprit is None or exercise.status == PASSED:
            continue
        for check in exercise.checks:
            if check.status != PASSED:
                check.blame(
                    culprit,
                    f"`{exercise.name}` uses your `{culprit}`, which fails its own checks: "
                    f"fix `{culprit}` first, then check again.",
                )


def earlier_lessons(result: LessonResult, lesson: Lesson, not_passing: Collection[str]) -> None:
    """Blame an exercise's failing checks on a function of an earlier lesson it calls whose
    module (of ``not_passing``) does not pass its own check."""
    calls = {exercise.name: exercise.calls for exercise in lesson.exercises}
    for exercise in result.exercises:
        if exercise.status == PASSED:
            continue
        culprit = next((c for c in calls.get(exercise.name, ()) if c.partition(".")[0] in not_passing), None)
        if culprit is None:
            continue
        module, _, function = culprit.partition(".")
        for check in exercise.checks:
            if check.status != PASSED and not check.blamed:
                check.blame(
                    culprit,
                    f"`{exercise.name}` uses your `{function}` from {module}.py, which does not "
                    f"pass its own check (`course check {load_catalog().number_of(module)}`): fix it "
                    "first.",
                )
