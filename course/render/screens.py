"""Rich renderables for every screen. Nothing here prints: the CLI hands these to a console.

Every screen must read well without colour (NO_COLOR, pipes): status is always a word, and colour
only repeats it. Text that comes from learner code is shown as plain Text, never as markup.
"""

from __future__ import annotations

import re

from rich import box
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from course.catalog import Catalog, Lesson
from course.engine.results import HAND_CHECKED, NOT_STARTED, CheckResult, LessonResult
from course.progress import HintReveal, NextStep, Session

STYLE = {
    "passed": "green",
    "failed": "red",
    "not-started": "yellow",
    "error": "red",
    "timeout": "magenta",
    "coming soon": "dim",
    "current": "cyan",
    "needs re-check": "yellow",
}
MARK = {
    "passed": "✔",
    "failed": "✘",
    "not-started": "○",
    "error": "!",
    "timeout": "⧗",
    "coming soon": "·",
    "current": "▸",
    "needs re-check": "↻",
}
# C0 and C1 control characters (escape sequences start with them) and the bidirectional
# overrides that can make text read differently from what it is; tabs and newlines are kept.
CONTROL = dict.fromkeys(
    [*range(32), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)], None
) | {9: "    ", 10: "\n"}


# Whole escape sequences, so that no half of one is left on screen: OSC (titles, hyperlinks),
# DCS/SOS/PM/APC strings, CSI (colours, cursor moves), and two-character escapes; 7- and 8-bit.
ESCAPES = re.compile(
    r"(?:\x1b\]|\x9d).*?(?:\x07|\x1b\\|\x9c|$)"
    r"|(?:\x1b[PX^_]|[\x90\x98\x9e\x9f]).*?(?:\x1b\\|\x9c|$)"
    r"|(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|\x1b[ -/]*[0-~]?",
    re.DOTALL,
)


def plain(text: str) -> Text:
    """Learner-produced text, with escape sequences and control characters removed."""
    return Text(ESCAPES.sub("", text).translate(CONTROL))


def status(name: str) -> Text:
    return Text(f"{MARK.get(name, '?')} {name}", style=STYLE.get(name, ""))


def check_title(name: str) -> str:
    """``test_softmax_rows_sum_to_one[float32]`` -> ``softmax rows sum to one [float32]``."""
    base, _, params = name.partition("[")
    words = base.removeprefix("test_").replace("_", " ")
    return f"{words} [{params}" if params else words


def lesson_heading(lesson: Lesson) -> str:
    return f"Lesson {lesson.id} · {lesson.title}"


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
        parts.append(Panel(plain(result.message), title="Your file", border_style="red", title_align="left"))
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


def _problem_panel(exercise: str, check: CheckResult) -> Panel:
    """One check not passed, in full; a hand-checked case says so in its title."""
    title = f"{exercise}: {check_title(check.name)}"
    if check.kind == HAND_CHECKED:
        title += " (hand-checked)"
    return Panel(
        plain(check.message or "(no message)"),
        title=escape(title),
        title_align="left",
        border_style=STYLE.get(check.status, "red"),
    )


def _what_now(lesson: Lesson, result: LessonResult, session: Session, watching: bool = False) -> Text:
    if result.passed:
        move_on = "Press n for the next lesson." if watching else "`course next` moves on."
        return Text(f"Lesson {lesson.number} passed. {move_on}", style="green")
    path = session.workspace.display(session.workspace.lesson_file(lesson))
    if watching:
        return Text(f"Edit {path}: every save is checked again. Stuck? Press h for a hint.")
    return Text(
        f"Edit {path}, then `course check {lesson.number}` again. "
        f"Stuck? `course hint {lesson.number}` reveals a hint."
    )


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
            "which of them matter, and how attention fits in less memory. Every lesson is one "
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


def notices(session: Session) -> RenderableType:
    return Group(*[Text(notice, style="yellow") for notice in session.notices])


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
    parts.append(Syntax(source, "python", line_numbers=False, word_wrap=True))
    return Group(*parts)


def problem(message: str) -> RenderableType:
    """A usage problem or a learner-facing error, one short block."""
    return Text("Error: ", style="bold red") + plain(message)


def info(message: str) -> RenderableType:
    return plain(message)
