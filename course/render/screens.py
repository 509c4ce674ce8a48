"""The screens about grades: `course check` (``result_screen``, and ``all_summary`` under
`--all`), `course next` and one screen of `course watch`. The lesson screens are in
``course.render.lessons``, the pieces every screen is made of in ``course.render.basics``.
Nothing here prints: the CLI hands these to a console.

Every screen must read well without colour (NO_COLOR, pipes): status is always a word, and colour
only repeats it. Text that comes from learner code is shown as plain Text, never as markup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from course.engine.results import HAND_CHECKED, NOT_STARTED
from course.render.basics import STYLE, check_title, lesson_heading, notices, plain, status
from course.render.lessons import finish, intro, welcome

if TYPE_CHECKING:
    from collections.abc import Sequence

    from course.content.catalog import Lesson
    from course.engine.results import CheckResult, LessonResult
    from course.workspace.actions import NextStep
    from course.workspace.session import Session


def result_screen(
    lesson: Lesson,
    result: LessonResult,
    session: Session,
    watching: bool = False,
    verbose: bool = False,
) -> RenderableType:
    """What `course check` shows: a line per exercise, then the most explaining problem in full
    (``verbose``: every problem, the most explaining first, and how many there are); under
    `course watch` (``watching``) the last line names watch's keys instead of commands."""
    counts = result.counts()
    total = sum(counts.values())
    head = Text.assemble(
        (lesson_heading(lesson), "bold"),
        "\n",
        status(result.status),
        f" · {counts['passed']} of {total} checks passed",
    )
    table = Table(box=None, show_header=False, padding=(0, 2, 0, 0))
    for exercise in result.exercises:
        passed = sum(c.status == "passed" for c in exercise.checks)
        table.add_row(
            status(exercise.status),
            Text(exercise.name),
            Text(f"{passed}/{len(exercise.checks)}", style="dim"),
        )
    parts: list[RenderableType] = [head, table]
    if result.message:
        title = f"Your {result.fix_first}.py" if result.fix_first else "Your file"
        parts.append(Panel(plain(result.message), title=title, border_style="red", title_align="left"))
    problems = [] if result.message else result.problems()
    for exercise, check in problems if verbose else problems[:1]:
        parts.append(_problem_panel(exercise.name, check))
    # Checks of functions still raising NotImplementedError are not news: count only the others.
    hidden = [check for _, check in problems[1:] if check.status != NOT_STARTED]
    if hidden and not verbose:
        parts.append(
            Text(
                f"{len(hidden)} more check{'s' if len(hidden) > 1 else ''} not passed: "
                f"`course check {lesson.number} --verbose` shows them all.",
                style="dim",
            )
        )
    if result.note:
        parts.append(Text("Note: ", style="bold yellow") + plain(result.note))
    if result.notice:
        parts.append(Text("Notice: ", style="bold yellow") + plain(result.notice))
    if result.output.strip() and not result.passed:
        parts.append(
            Panel(
                plain(result.output.strip()[-800:]),
                title="Your code printed",
                title_align="left",
                border_style="dim",
            )
        )
    parts.append(_what_now(lesson, result, session, watching))
    return Group(*parts)


def all_summary(results: Sequence[LessonResult]) -> Text:
    """The last line of `course check --all`, under every lesson's screen: how many lessons
    and how many checks passed over the whole course."""
    counts = [result.counts() for result in results]
    lessons = sum(result.passed for result in results)
    checks = sum(each["passed"] for each in counts)
    total = sum(sum(each.values()) for each in counts)
    return Text(
        f"{lessons} of {len(results)} lessons passed; {checks} of {total} checks passed.",
        style="bold green" if lessons == len(results) else "bold",
    )


def _problem_panel(exercise: str, check: CheckResult) -> Panel:
    """One check not passed, in full: the exercise in the panel's title (with "hand-checked"
    for a case worked out by hand), the check's own title as the first line, where a long one
    wraps instead of being cut as a panel title is."""
    title = f"{exercise} (hand-checked)" if check.kind == HAND_CHECKED else exercise
    body = Text(check_title(check), style="bold") + "\n" + plain(check.message or "(no message)")
    return Panel(body, title=escape(title), title_align="left", border_style=STYLE.get(check.status, "red"))


def _what_now(lesson: Lesson, result: LessonResult, session: Session, watching: bool = False) -> Text:
    if result.passed:
        move_on = "Press n for the next lesson." if watching else "`course next` moves on."
        return Text(f"Lesson {lesson.number} passed. {move_on}", style="green")
    path = session.workspace.display(session.workspace.lesson_file(lesson))
    if result.fix_first:  # this lesson's file may be fine: the one it imports is not
        path = session.workspace.display(session.workspace.root / f"{result.fix_first}.py")
    if watching:
        return Text(f"Edit {path}: every save is checked again. Stuck? Press h for a hint.")
    return Text(
        f"Edit {path}, then `course check {lesson.number}` again. "
        f"Stuck? `course hint {lesson.number}` reveals a hint."
    )


def next_screen(step: NextStep, session: Session) -> RenderableType:
    parts: list[RenderableType] = [notices(session)]
    if step.welcome:
        parts.append(welcome(session))
    for lesson, reset_module in step.earlier:
        parts.append(_passed_line(lesson, reset_module))
    if step.lesson is not None and step.result is not None:
        if step.result.passed:
            parts.append(_passed_line(step.lesson, step.recheck_of))
        elif step.introduced is None:
            parts.append(result_screen(step.lesson, step.result, session))
    if step.introduced is not None:
        parts.append(intro(step.introduced, session))
    if step.finished:
        parts.append(finish(session.catalog, session))
    return Group(*parts)


def _passed_line(lesson: Lesson, recheck_of: str) -> Text:
    if recheck_of:
        return Text(
            f"✔ Lesson {lesson.id} re-checked and passed (it uses {recheck_of}.py, which was reset).",
            style="green",
        )
    return Text(f"✔ Lesson {lesson.id} passed: {lesson.title}.", style="bold green")


def watch_screen(
    lesson: Lesson, result: LessonResult, session: Session, extra: RenderableType | None = None
) -> RenderableType:
    """One screen of `course watch`: the keys, the check, progress over the course."""
    from rich.progress_bar import ProgressBar

    available = session.catalog.available()
    passed = sum(
        session.state.status(each.module) == "passed" and not session.state.needs_recheck(each.module)
        for each in available
    )
    keys = Text(
        "watching your files · n next lesson (when green) · h hint · l list · r re-run · q quit", style="dim"
    )
    bar = Table.grid(padding=(0, 1))
    bar.add_row(
        ProgressBar(total=len(available), completed=passed, width=30),
        Text(f"{passed} of {len(available)} lessons passed"),
    )
    parts: list[RenderableType] = [keys, result_screen(lesson, result, session, watching=True), bar]
    if extra is not None:
        parts.append(extra)
    return Group(*parts)
