"""What every command module shares: the options, the console, and the few ways a command ends
early (a usage problem, an unknown lesson, no workspace), each one short block, never a traceback.

Exit codes: 0 success (a check passed), 1 a check did not pass, 2 a usage error. Heavy modules
(rich, the engine, pytest) are imported inside functions so that start-up stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from course.catalog import Catalog, Lesson
    from course.progress import Session

WorkspaceOption = Annotated[
    str | None,
    typer.Option(
        "--workspace",
        "-w",
        envvar="COURSE_WORKSPACE",
        metavar="DIR",
        help="The workspace folder (default: found from the current folder).",
    ),
]
LessonArgument = Annotated[str, typer.Argument(help="3, 03, l03_attention or attention.")]
LessonsOption = Annotated[
    str | None,
    typer.Option("--lessons", metavar="LIST", help="Comma-separated lessons, e.g. 1,2,3 (default: all)."),
]


def new_app(name: str, help: str) -> typer.Typer:
    """A typer app configured as every `course` app is: plain help, no completion, no rich
    tracebacks (a learner never sees one of ours)."""
    return typer.Typer(
        name=name,
        help=help,
        no_args_is_help=True,
        add_completion=False,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
    )


def console() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def show(*renderables: Any) -> None:
    """Print rich objects; plain strings (paths, names) are text, never markup."""
    from rich.text import Text

    out = console()
    for renderable in renderables:
        out.print(Text(renderable) if isinstance(renderable, str) else renderable)


def fail(message: str, code: int = 2) -> NoReturn:
    """End the command with one short block: ``Error: message``."""
    from course.render import screens

    console().print(screens.problem(message))
    raise typer.Exit(code)


def open_session(workspace: str | None, create: bool = False) -> Session:
    """The learner's workspace and progress, or a one-line failure saying how to get one."""
    from course import progress
    from course import workspace as ws

    try:
        return progress.open_session(workspace, create=create)
    except ws.WorkspaceProblem as problem:
        fail(str(problem))


def lesson_named(catalog: Catalog, name: str) -> Lesson:
    """The available lesson ``name`` names, or a failure listing what would be accepted."""
    try:
        return catalog.resolve_available(name)
    except LookupError as problem:  # UnknownLesson, LessonNotReady
        fail(str(problem))


def lessons_named(catalog: Catalog, names: str | None) -> list[Lesson]:
    """``--lessons 1,2,3`` as available lessons (default: all of them), or a failure."""
    try:
        return catalog.resolve_list(names)
    except LookupError as problem:
        fail(str(problem))


def lesson_or_current(session: Session, name: str | None) -> Lesson:
    """The named lesson, or the learner's current one when no name is given."""
    if name is not None:
        return lesson_named(session.catalog, name)
    current = session.current()
    if current is None:
        fail("Every lesson has passed; name a lesson to check it again.", 0)
    return current
