"""The learner's progress as plain data: what `course list --json` and `course show N --json`
print (README, "Commands", documents the fields). The screens of the same commands are
``course.render.lessons``; nothing here prints or imports rich/typer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from course.content.catalog import Lesson
    from course.workspace.session import Session


def lesson_entry(session: Session, lesson: Lesson, current: Lesson | None) -> dict[str, Any]:
    """One lesson of `course list --json`: who it is and where the learner stands. ``status`` is
    the last check's (``not-started`` before any, and for a lesson not written yet)."""
    return {
        "id": lesson.id,
        "number": lesson.number,
        "module": lesson.module,
        "title": lesson.title,
        "available": lesson.available,
        "status": session.state.status(lesson.module),
        "current": lesson is current,
        "needs_recheck": session.state.needs_recheck(lesson.module),
    }


def progress(session: Session) -> dict[str, Any]:
    """`course list --json`: every lesson of the catalog in course order, the current one's
    module (None once every lesson passed), and the notices the screen would show."""
    current = session.current()
    return {
        "title": session.catalog.title,
        "current": current.module if current is not None else None,
        "lessons": [lesson_entry(session, lesson, current) for lesson in session.catalog.lessons],
        "notices": list(session.notices),
    }


def lesson_page(session: Session, lesson: Lesson, terms: list[str]) -> dict[str, Any]:
    """`course show N --json`: the lesson's ``lesson_entry`` plus its goals, the learner's file
    (an absolute path), the earlier lesson whose reset asks for a re-check (""), the glossary
    ``terms`` it computes, and each exercise's summary, last status and hints seen."""
    found = session.state.lessons.get(lesson.module)
    exercises = [
        {
            "name": exercise.name,
            "summary": exercise.summary,
            "status": found.exercises.get(exercise.name, "not-started") if found else "not-started",
            "hints_seen": found.hints.get(exercise.name, 0) if found else 0,
            "hints_total": len(exercise.hints),
        }
        for exercise in lesson.exercises
    ]
    return dict(
        lesson_entry(session, lesson, session.current()),
        goals=list(lesson.goals),
        file=str(session.workspace.lesson_file(lesson).resolve()),
        recheck_after=found.recheck_after if found else "",
        terms=terms,
        exercises=exercises,
    )
