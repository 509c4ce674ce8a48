"""What the commands do, as plain functions over a workspace and its progress state: grading
(with the result cache and the warm grader), moving on, hints, resets, solutions, pictures,
experiments.
Opening the workspace and its state is ``course.workspace.session``.

The CLI calls these and renders what they return; nothing here prints or imports rich/typer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from course.content.catalog import Lesson
from course.engine.grading import blame
from course.engine.results import PASSED, LessonResult
from course.workspace import folder as ws
from course.workspace import prefetch
from course.workspace import state as state_file
from course.workspace.session import Session, place, record

if TYPE_CHECKING:  # they import numpy, which the commands load only when they grade
    from course.engine.pictures.experiments import Experiment, Progress
    from course.engine.pictures.figures import Figure
    from course.engine.pictures.maps import AttentionMaps
    from course.engine.pictures.shapes import ShapeTrace


def debug_check(session: Session, lesson: Lesson) -> int:
    """`course check --debug`: the lesson's tests with the learner's code in this process (not a
    grade, nothing recorded); returns pytest's exit code."""
    from course.engine.grading import debug

    return debug.run(lesson, session.workspace.root)


def grade_lesson(lesson: Lesson, folder: Path, fresh: bool = False) -> LessonResult:
    """Grade one lesson of ``folder``, from the result cache or the warm grader when they can
    answer: see ``grade_lessons``."""
    return grade_lessons([lesson], folder, fresh)[0]


def grade_lessons(
    lessons: Sequence[Lesson],
    folder: Path,
    fresh: bool = False,
    while_waiting: Callable[[], object] | None = None,
    started: prefetch.Started | None = None,
    sealed: bool = False,
) -> list[LessonResult]:
    """Grade these lessons of ``folder``: a lesson whose files and course build are what they
    were at its last grade gets that grade again (``result_cache``; not when ``fresh``); the
    others are graded by the warm grader in one request when one is running, else here (and
    one is started for the next check, see ``course.engine.warm.client``). ``while_waiting``: the
    caller's preparation, run while the warm grader works (see ``client.answer``).
    ``started``: this grading, begun earlier by ``prefetch.start`` (used only if it is).
    ``sealed``: graded here, as ``course grade`` grades a submission (its code may read nothing
    of the course but the engine), never by the warm grader nor from the result cache."""
    from course.engine.warm import client
    from course.workspace import result_cache

    if sealed:
        from course.engine.grading import runner

        return [runner.grade(lesson, folder, sealed=True) for lesson in lessons]

    if started is None or not started.serves(lessons, folder, fresh):
        if started is not None:
            started.drop()
        started = prefetch.start(lessons, folder, fresh)
    folder, keys, results = started.folder, started.keys, list(started.results)
    missing = started.missing
    answers = client.answer(started.connection, len(missing), while_waiting) or []
    for index, answer in zip(missing, answers, strict=False):
        if answer is not None:
            results[index] = LessonResult.from_dict(answer)
    graded_here = False
    done: list[LessonResult] = []
    for index, result in enumerate(results):
        if result is None:
            from course.engine.grading import runner

            kept = result_cache.examples_file(lessons[index].module) if keys[index] else None
            examples = (kept, started.build) if kept else None
            result = runner.grade(lessons[index], folder, examples=examples)
            graded_here = True
        if index in missing and keys[index]:
            result_cache.store(folder, lessons[index].module, keys[index], result)
        done.append(result)
    if graded_here and client.enabled():
        client.start_in_background()
    return done


def check(session: Session, lesson: Lesson, fresh: bool = False) -> LessonResult:
    """Grade one lesson of the workspace and remember the result."""
    return check_many(session, [lesson], fresh)[0]


def check_many(
    session: Session,
    lessons: Sequence[Lesson],
    fresh: bool = False,
    while_waiting: Callable[[], object] | None = None,
    started: prefetch.Started | None = None,
    sealed: bool = False,
) -> list[LessonResult]:
    """Grade these lessons of the workspace (in one request, see ``grade_lessons``) and remember
    the results, with a note where an earlier lesson explains a failure."""
    resets = {}
    for lesson in lessons:
        before = session.state.lessons.get(lesson.module)
        resets[lesson.module] = before.recheck_after if before else ""
    results = grade_lessons(lessons, session.workspace.root, fresh, while_waiting, started, sealed)
    for lesson, result in zip(lessons, results, strict=True):
        result.point_at_callers([m for m in result.uses if session.state.status(m) == PASSED])
        if not result.passed and not result.note and resets[lesson.module]:
            result.note = (
                f"This lesson had passed, but it uses {resets[lesson.module]}.py, which was reset "
                "since: it passes again once both files work together."
            )
        if not result.passed:
            pending = [m for m in result.uses if session.state.status(m) != PASSED]
            checked = [m for m in pending if m in session.state.lessons]  # and found failing
            blame.earlier_lessons(result, lesson, checked)
            if pending and not result.note:
                result.note = (
                    f"This lesson uses your {pending[0]}.py, which has not passed its own "
                    f"check yet (`course check {session.catalog.number_of(pending[0])}`): a problem "
                    "there shows here."
                )

    def record_all(state: state_file.State) -> None:
        for lesson, result in zip(lessons, results, strict=True):
            record(state, lesson, result)

    session.update(record_all)
    return results


@dataclass
class NextStep:
    lesson: Lesson | None  # the lesson that was checked (None: everything had passed already)
    result: LessonResult | None
    introduced: Lesson | None  # the lesson to work on now, when it is a new one
    finished: bool  # every lesson passed, confirmed by re-grading them all
    welcome: bool = False  # the learner's very first `course next`
    # A lesson needing a re-check (an earlier lesson it uses was reset) is re-checked on the
    # way: ``earlier`` are the lessons that passed before ``lesson`` in this step, each with the
    # module whose reset asked for its re-check ("" when none did); ``recheck_of`` is that
    # module for ``lesson`` itself.
    earlier: list[tuple[Lesson, str]] = field(default_factory=list)
    recheck_of: str = ""


def next_step(session: Session, fresh: bool = False) -> NextStep:
    """Re-check the current lesson; when it passes, move on and introduce the next one. When
    every lesson seems passed, re-grade them all before saying the course is finished."""
    welcome = not session.state.welcomed
    if welcome:
        session.update(lambda state: setattr(state, "welcomed", True))
    lesson = session.current()
    if lesson is None:
        return _finish_or_reopen(session, welcome, fresh)
    reason = session.state.lesson(lesson.module).recheck_after
    result = check(session, lesson, fresh)
    earlier: list[tuple[Lesson, str]] = []
    upcoming = session.current()
    # A lesson that passed before an earlier one it uses was reset is re-checked on the way
    # rather than introduced as new: it moves on at once when the learner's files still agree.
    while result.passed and upcoming is not None and session.state.needs_recheck(upcoming.module):
        earlier.append((lesson, reason))
        lesson, reason = upcoming, session.state.lesson(upcoming.module).recheck_after
        result = check(session, lesson, fresh)
        upcoming = session.current()
    introduced, finished = upcoming, False
    if not result.passed:
        introduced = lesson if result.status == "not-started" else None
    elif upcoming is None:
        step = _finish_or_reopen(session, welcome, fresh)
        introduced, finished = step.introduced, step.finished
    return NextStep(lesson, result, introduced, finished, welcome, earlier, reason)


def _finish_or_reopen(session: Session, welcome: bool, fresh: bool = False) -> NextStep:
    """Re-grade every lesson (a file may have changed since it passed; unchanged lessons from
    the cache); finished only if all pass, else the first that does not is current again.
    With the warm grader, all in one request (graded side by side); without, one by one,
    stopping at the first that does not pass."""
    from course.engine.warm import client

    lessons = session.catalog.available()
    if client.enabled():
        results = check_many(session, lessons, fresh)
    else:
        results = []
        for each in lessons:
            results.append(check(session, each, fresh))
            if not results[-1].passed:
                break
    for each, result in zip(lessons, results, strict=False):
        if not result.passed:
            return NextStep(each, result, None, finished=False, welcome=welcome)
    return NextStep(None, None, None, finished=True, welcome=welcome)


@dataclass
class HintReveal:
    lesson: Lesson
    exercise: str
    hints: list[str]  # the tiers revealed so far, gentlest first
    total: int
    new: bool  # False when every tier was already revealed
    code: list[str] = field(default_factory=list)  # each revealed tier's code ("" for none)


def reveal_hint(session: Session, lesson: Lesson, exercise: str | None = None) -> HintReveal:
    """Reveal the next tier of hints for an exercise (default: the first one not passed)."""
    progress = session.state.lesson(lesson.module)
    if exercise is None:
        pending = [e for e in lesson.exercises if progress.exercises.get(e.name) != PASSED]
        chosen = (pending or list(lesson.exercises))[0]
    else:
        found = lesson.exercise(exercise)
        if found is None:
            names = ", ".join(e.name for e in lesson.exercises)
            raise LookupError(f"Lesson {lesson.id} has no exercise '{exercise}'; it has: {names}.")
        chosen = found
    new = progress.hints.get(chosen.name, 0) < len(chosen.hints)
    if new:

        def reveal(state: state_file.State) -> None:
            hints = state.lesson(lesson.module).hints
            hints[chosen.name] = min(hints.get(chosen.name, 0) + 1, len(chosen.hints))

        session.update(reveal)
    shown = session.state.lesson(lesson.module).hints.get(chosen.name, 0)
    code = [getattr(chosen.code_for(tier), "code", "") for tier in range(1, shown + 1)]
    return HintReveal(lesson, chosen.name, list(chosen.hints[:shown]), len(chosen.hints), new, code)


@dataclass
class ResetDone:
    saved: Path | None  # the learner's previous file, kept in ``.course/backups/``
    recheck: list[Lesson]  # passed lessons that use the reset one: they need a re-check now


def reset(session: Session, lesson: Lesson) -> ResetDone:
    """Restore the pristine skeleton; the learner's file is kept in ``.course/backups/``. The
    passed lessons that use this one (directly or through another) are marked as needing a
    re-check: their pass was earned with the file just replaced."""
    from course.content.dependencies import dependents

    saved = ws.backup(session.workspace, lesson)
    ws.restore_skeleton(session.workspace, lesson)
    users = [each.module for each in dependents(session.catalog, lesson)]
    marked: list[str] = []

    def restart(state: state_file.State) -> None:
        place(state, [lesson.module])
        progress = state.lesson(lesson.module)
        progress.status, progress.exercises, progress.recheck_after = "not-started", {}, ""
        marked.clear()
        for module in users:
            if state.status(module) == PASSED:
                state.lesson(module).recheck_after = lesson.module
                marked.append(module)

    session.update(restart)
    return ResetDone(saved, [each for each in session.catalog.lessons if each.module in marked])


def solution_text(session: Session, lesson: Lesson, peek: bool) -> str | None:
    """The reference solution once the lesson passed (or on ``peek``, which is recorded)."""
    if session.state.status(lesson.module) != PASSED and not peek:
        return None
    if not lesson.solution.is_file():
        raise FileNotFoundError(f"This installation of the course has no solution for lesson {lesson.id}.")
    if session.state.status(lesson.module) != PASSED:
        session.update(lambda state: setattr(state.lesson(lesson.module), "solution_peeked", True))
    from course.content.lesson_source import without_markers

    return without_markers(lesson.solution.read_text(encoding="utf-8"))


def attention_maps(session: Session, lesson: Lesson) -> AttentionMaps:
    """`course show LESSON --map`: the learner's attention weights beside the reference, and
    any further pictures the lesson asks for (see ``course.engine.pictures.load``)."""
    from course.engine.pictures import figures, maps

    found = maps.attention_maps(lesson, session.workspace.root)
    found.figures, found.figures_problem = figures.figures(lesson, session.workspace.root)
    if found.reference is None and (found.figures or found.figures_problem):
        found.problem = ""  # the lesson draws figures, not attention maps
    return found


def experiments(lesson: Lesson) -> tuple[Experiment, ...]:
    """`course experiment LESSON`: the lesson's experiments (see
    ``course.engine.pictures.experiments``), none for most lessons."""
    from course.engine.pictures import experiments as found

    return found.experiments(lesson)


def experiment(lesson: Lesson, name: str) -> Experiment:
    """The lesson's experiment ``name``; LookupError, naming the valid ones, if there is none."""
    from course.engine.pictures import experiments as found

    return found.find(lesson, name)


def run_experiment(
    session: Session, lesson: Lesson, name: str, progress: Progress
) -> tuple[list[Figure], str]:
    """`course experiment LESSON NAME`: run it on the learner's file, reporting to ``progress``;
    its figures, and a one-line problem when the learner's code could not make them."""
    from course.engine.pictures import experiments as found

    return found.run(lesson, session.workspace.root, name, progress)


def explaining_picture(
    session: Session, lesson: Lesson, result: LessonResult
) -> AttentionMaps | ShapeTrace | None:
    """What explains a failed check best, if anything: the lesson's shape trace when a shape
    went wrong, else its attention maps when the weights are wrong (each only when the lesson's
    pictures module asks for it)."""
    if result.status not in ("failed", "error"):
        return None
    from course.engine.pictures import maps, shapes

    trace = shapes.shape_trace(lesson, session.workspace.root)
    if trace is not None and trace.mismatch:
        return trace
    if result.status == "failed":
        found = maps.attention_maps(lesson, session.workspace.root)
        if found.wrong():
            return found
    return None
