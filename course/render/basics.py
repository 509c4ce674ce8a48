"""What every screen is made of: a status as a word with its mark and colour, learner text made
safe to show, headings, notices, and the one-block error. Nothing here prints.

Every screen must read well without colour (NO_COLOR, pipes): status is always a word, and colour
only repeats it. Text that comes from learner code is shown as plain Text, never as markup.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.text import Text

if TYPE_CHECKING:
    from course.content.catalog import Lesson
    from course.engine.results import CheckResult
    from course.workspace.session import Session

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


def check_title(check: CheckResult) -> str:
    """The check's title, as its grading test words it (its docstring), with the case of a
    parametrised test: ``rows of weights sum to one [float32]``. A test without one (a lesson
    being written: `course dev check` asks for one) shows its name. (``CheckResult.heading``:
    the notebooks' test cells word it the same.)"""
    return check.heading()


def lesson_heading(lesson: Lesson) -> str:
    return f"Lesson {lesson.id} · {lesson.title}"


def notices(session: Session) -> RenderableType:
    return Group(*[Text(notice, style="yellow") for notice in session.notices])


def problem(message: str) -> RenderableType:
    """A usage problem or a learner-facing error, one short block."""
    return Text("Error: ", style="bold red") + plain(message)


def info(message: str) -> RenderableType:
    return plain(message)
