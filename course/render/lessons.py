"""The screens about lessons rather than grades: the lesson list, a lesson's page and its
introduction, the welcome, the finish, hints and a solution. `course list` imports only this
(and ``basics``). Nothing here prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from course.render.basics import lesson_heading, notices, status

if TYPE_CHECKING:
    from course.content.catalog import Catalog, Lesson
    from course.workspace.actions import HintReveal
    from course.workspace.session import Session


def intro(lesson: Lesson, session: Session) -> RenderableType:
    """A lesson's introduction: title, goals, the file to open, the first exercise."""
    path = session.workspace.display(session.workspace.lesson_file(lesson))
    goals = Table.grid(padding=(0, 1))
    goals.add_column(no_wrap=True)
    goals.add_column()
    for goal in lesson.goals:
        goals.add_row("  •", Text(goal))  # catalog text is never markup: lengths[b] stays
    steps = Table.grid(padding=(0, 1))
    steps.add_column(no_wrap=True)
    steps.add_column()
    for number, exercise in enumerate(lesson.exercises, 1):
        steps.add_row(f"  {number}.", Text(exercise.summary))
    body = Group(
        Text("You will learn to", style="bold"),
        goals,
        Text(""),
        Text.assemble(("Open ", "bold"), (path, "bold cyan"), (" and write, in order:", "bold")),
        steps,
        Text(""),
        Text(f"Then run `course check {lesson.number}` (or `course next`)."),
    )
    return Panel(body, title=escape(lesson_heading(lesson)), title_align="left", border_style="cyan")


def welcome(session: Session) -> RenderableType:
    """The first screen a learner sees: what the course is, the loop, where the files are."""
    folder = session.workspace.display(session.workspace.root)
    body = Group(
        Text(
            "You will implement multi-head attention from scratch in numpy, one lesson at a "
            "time, from a linear projection to grouped-query attention with a KV cache; then, "
            "with your own code, you measure what the heads of a small trained transformer do, "
            "which of them matter and how attention fits in less memory; last, you write its "
            "backward pass and train it yourself. Every lesson is one "
            "file with functions to write; the grader tells you within seconds what is right "
            "and what is wrong."
        ),
        Text(""),
        Text("The loop", style="bold"),
        Text(
            "  1. `course next` says what to do now (and moves on when a lesson passes)\n"
            f"  2. edit the lesson file in {folder}/\n"
            "  3. `course check` (or leave `course watch` running) and read the feedback\n"
            "  4. stuck? `course hint` reveals a hint; `course list` shows where you are"
        ),
        Text(""),
        Text(
            "Shapes are written with letters: B batch, T queries, S keys, D model width, "
            "H heads, G key/value heads, K head width."
        ),
    )
    return Panel(
        body, title="Welcome to " + escape(session.catalog.title), title_align="left", border_style="cyan"
    )


def finish(catalog: Catalog, session: Session | None = None) -> RenderableType:
    """The finish screen: every lesson re-graded and passed."""
    done = len(catalog.available())
    text = Text(
        f"Every lesson passes, re-graded just now: all {done} lessons of {catalog.title}, "
        "built from scratch and measured with your own code. Well done!",
        style="bold green",
    )
    soon = [lesson for lesson in catalog.lessons if not lesson.available]
    if soon:
        text.append(f"\n{len(soon)} more lessons are coming soon: `course list` shows them.", style="")
    if session is None:
        return text
    hints = sum(sum(p.hints.values()) for p in session.state.lessons.values())
    peeks = [m for m, p in session.state.lessons.items() if p.solution_peeked]
    summary = Text(
        f"Hints revealed: {hints}. Solutions peeked at before passing: "
        f"{len(peeks)}. `course solution N` shows any reference solution now.",
        style="dim",
    )
    return Panel(Group(text, summary), title="Finished", title_align="left", border_style="green")


def lesson_list(session: Session) -> RenderableType:
    table = Table(title=session.catalog.title, box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("#")
    table.add_column("lesson")
    table.add_column("module")
    table.add_column("status")
    current = session.current()
    for lesson in session.catalog.lessons:
        if not lesson.available:
            label = "coming soon"
        elif session.state.needs_recheck(lesson.module):
            label = "needs re-check"
        elif lesson is current and session.state.status(lesson.module) != "failed":
            label = "current"
        else:
            label = session.state.status(lesson.module)
        table.add_row(
            lesson.id,
            Text(lesson.title),
            lesson.module,
            status(label),
            style="dim" if label == "coming soon" else "",
        )
    return Group(notices(session), table)


def lesson_page(lesson: Lesson, session: Session) -> RenderableType:
    """`course show`: the introduction plus each exercise's last status and hints used."""
    progress = session.state.lessons.get(lesson.module)
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("exercise")
    table.add_column("status")
    table.add_column("hints seen")
    for exercise in lesson.exercises:
        label = progress.exercises.get(exercise.name, "not-started") if progress else "not-started"
        seen = progress.hints.get(exercise.name, 0) if progress else 0
        table.add_row(Text(exercise.name), status(label), f"{seen}/{len(exercise.hints)}")
    if not lesson.available:
        return Text(f"{lesson_heading(lesson)} is coming soon: its files are not written yet.")
    parts: list[RenderableType] = [notices(session), intro(lesson, session), table]
    if progress is not None and progress.recheck_after:
        parts.append(
            Text(
                f"Needs a re-check: it uses {progress.recheck_after}.py, which was reset since it "
                f"passed. `course check {lesson.number}` re-checks it.",
                style="yellow",
            )
        )
    return Group(*parts)


def hint_screen(reveal: HintReveal, again: str = "run the same command again") -> RenderableType:
    """The hints revealed so far; ``again`` says how to reveal the next one (a command, or
    watch's key)."""
    hints = Table.grid(padding=(0, 1))
    hints.add_column(no_wrap=True)
    hints.add_column()
    for number, hint in enumerate(reveal.hints, 1):
        style = "bold" if number == len(reveal.hints) and reveal.new else "dim"
        hints.add_row(Text(f"{number}.", style=style), Text(hint, style=style))
        code = reveal.code[number - 1] if number <= len(reveal.code) else ""
        if code:
            hints.add_row(Text(""), Text(code.strip("\n"), style="cyan" if style == "bold" else "dim"))
    remaining = reveal.total - len(reveal.hints)
    footer = (
        f"{remaining} more hint{'s' if remaining != 1 else ''}: {again}."
        if remaining
        else "That was the last hint for this exercise."
    )
    if not reveal.new:
        footer = "Every hint for this exercise is shown above."
    title = f"Hints for {reveal.exercise} (lesson {reveal.lesson.id})"
    return Group(
        Panel(hints, title=escape(title), title_align="left", border_style="cyan"), Text(footer, style="dim")
    )


def solution_screen(lesson: Lesson, source: str, peeked: bool) -> RenderableType:
    parts: list[RenderableType] = []
    if peeked:
        parts.append(
            Text("Peeking before the lesson passed: this is recorded in your progress.", style="yellow")
        )
    from rich.syntax import Syntax  # pygments: only for this screen

    parts.append(Syntax(source, "python", line_numbers=False, word_wrap=True))
    return Group(*parts)
