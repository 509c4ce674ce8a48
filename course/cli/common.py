"""What every command module shares: the console, and the few ways a command ends
early (a usage problem, an unknown lesson, no workspace), each one short block, never a traceback.

Exit codes: 0 success (a check passed), 1 a check did not pass, 2 a usage error. Typer-free
(its options live in ``course.cli.options``), and heavy modules (rich, the engine, pytest) are
imported inside functions, so that start-up stays fast: ``course.cli.quick`` runs commands
without typer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, NoReturn

    from rich.console import Console

    from course.content.catalog import Catalog, Lesson
    from course.workspace.session import Session


def console() -> Console:
    """The console every command prints to. With ``NO_COLOR`` set (not empty, as rich reads
    it) it writes no style at all: rich would drop only the colours, keeping bold, dim and
    italic, and NO_COLOR promises plain text (cursor moves, as `course watch` clears with,
    remain)."""
    import os

    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            """The reader of the output has gone (`course grade ... | head -1`): print nothing
            more and go on, where rich would end the command (a class's gradebook is still
            written)."""
            _output_gone()
            self.quiet = True

    plain = os.environ.get("NO_COLOR", "") != ""
    return _Console(highlight=False, soft_wrap=False, color_system=None if plain else "auto")


def show(*renderables: Any) -> None:
    """Print rich objects; plain strings (paths, names) are text, never markup. When the reader
    of the output has gone (`course grade ... | head -1`), the rest is dropped and the command
    goes on (``console``): a class's gradebook is still written."""
    from rich.text import Text

    out = console()
    for renderable in renderables:
        out.print(Text(renderable) if isinstance(renderable, str) else renderable)


def _output_gone() -> None:
    """Send whatever is printed from now on to /dev/null (standard output's reader has gone)."""
    import os
    import sys

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no descriptor to redirect: printing stays broken, quietly
        pass


def print_json(payload: dict[str, Any]) -> None:
    """Print one JSON object (a command's ``--json``), with the course's version in it."""
    import json
    import sys

    from course import __version__

    sys.stdout.write(json.dumps(dict(payload, course_version=__version__), indent=2) + "\n")


def fail(message: str, code: int = 2) -> NoReturn:
    """End the command with one short block: ``Error: message``."""
    from course.render.basics import problem

    console().print(problem(message))
    raise SystemExit(code)  # what typer.Exit(code) ends with, without importing typer


def use_secret(file: Path | None) -> str:
    """Grade with the instructor's secret in ``file``, else in ``$COURSE_GRADING_SECRET`` if set
    (``course.engine.testing.secret``): its identity, or "" for the public inputs; a secret that
    cannot be used ends the command."""
    from course.engine.testing import secret

    try:
        if file is not None:
            secret.use_file(file)
        else:
            secret.use_environment()
    except secret.SecretError as problem:
        fail(f"{problem}.")
    if secret.in_use():
        secret.keep_from_other_processes()
    return secret.identity()


def open_session(workspace: str | None, create: bool = False) -> Session:
    """The learner's workspace and progress, or a one-line failure saying how to get one."""
    from course.workspace import folder, session

    try:
        return session.open_session(workspace, create=create)
    except folder.WorkspaceProblem as problem:
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
