"""The `course` command: a few lines per command, calling `progress` and printing `render`.

Exit codes: 0 success (a check passed), 1 a check did not pass, 2 a usage error. Heavy modules
(rich, the engine, pytest) are imported inside commands so that start-up stays fast.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

app = typer.Typer(
    name="course",
    help="Implement multi-head attention from scratch in numpy, one lesson at a time.\n\n"
    "Start with `course next`: it creates your workspace and tells you what to do.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)

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


def _console():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def _show(*renderables) -> None:
    """Print rich objects; plain strings (paths, names) are text, never markup."""
    from rich.text import Text

    console = _console()
    for renderable in renderables:
        console.print(Text(renderable) if isinstance(renderable, str) else renderable)


def _fail(message: str, code: int = 2) -> NoReturn:
    from course import render

    _console().print(render.problem(message))
    raise typer.Exit(code)


def _session(workspace: str | None, create: bool = False):
    from course import progress
    from course import workspace as ws

    try:
        return progress.open_session(workspace, create=create)
    except ws.WorkspaceProblem as problem:
        _fail(str(problem))


def _lesson(session, name: str | None):
    from course.catalog import UnknownLesson

    if name is None:
        current = session.current()
        if current is None:
            _fail("Every lesson has passed; name a lesson to check it again.", 0)
        return current
    try:
        lesson = session.catalog.resolve(name)
    except UnknownLesson as exc:
        _fail(str(exc))
    if not lesson.available:
        _fail(f"Lesson {lesson.id} ({lesson.title}) is coming soon: its files are not written yet.")
    return lesson


@app.command()
def init(
    directory: Annotated[Path, typer.Argument(help="Where to create it.")] = Path("workspace"),
) -> None:
    """Create a workspace with a fresh copy of every lesson file."""
    from course import state
    from course import workspace as ws
    from course.catalog import load_catalog

    try:
        created, added = ws.init(directory, load_catalog())
    except ws.WorkspaceProblem as problem:
        _fail(str(problem))
    try:
        progress = state.load(created.state_path)
    except state.StateProblem:
        progress = state.State()
    progress.placed = sorted(set(progress.placed) | {path.stem for path in added})
    state.save(progress, created.state_path)
    names = ", ".join(p.name for p in added) or "none (every lesson file was already there)"
    _show(
        f"Workspace ready in {created.display(created.root)}/. Lesson files added: {names}.",
        f"Next: cd {created.display(created.root)} and run `course next`.",
    )


@app.command(name="next")
def next_(workspace: WorkspaceOption = None) -> None:
    """Check the current lesson; when it passes, move on to the next one."""
    from course import progress, render

    session = _session(workspace, create=True)
    _show(render.next_screen(progress.next_step(session), session))


@app.command()
def check(
    lesson: Annotated[str | None, typer.Argument(help="Default: the current lesson.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Check every available lesson.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            help="Run the tests with your code in this process, for print() and "
            "breakpoint(). Not a grade: nothing is recorded.",
        ),
    ] = False,
    workspace: WorkspaceOption = None,
) -> None:
    """Grade a lesson (default: the current one). Exit 0 when it passed, 1 when not."""
    from course import progress

    session = _session(workspace)
    if debug:
        from course.engine import debug as debug_run

        chosen = _lesson(session, lesson)
        raise typer.Exit(0 if debug_run.run(chosen, session.workspace.root) == 0 else 1)
    lessons = session.catalog.available() if all_ else (_lesson(session, lesson),)
    results = [(each, progress.check(session, each)) for each in lessons]
    passed = all(result.passed for _, result in results)
    if as_json:
        from course import __version__

        payloads = [result.to_dict() for _, result in results]
        payload = {"lessons": payloads, "status": "passed" if passed else "failed"} if all_ else payloads[0]
        sys.stdout.write(json.dumps(dict(payload, course_version=__version__), indent=2) + "\n")
    else:
        from course import render

        screens = [render.result_screen(each, result, session) for each, result in results]
        _show(render.notices(session), *screens)
        found = progress.diagnose(session, *results[0]) if len(results) == 1 else None
        if found is not None:
            from course.render_maps import diagnosis

            _show(diagnosis(found))
    raise typer.Exit(0 if passed else 1)


@app.command(name="list")
def list_(workspace: WorkspaceOption = None) -> None:
    """List every lesson with your progress."""
    from course import render

    session = _session(workspace)
    _show(render.lesson_list(session))


@app.command()
def show(
    lesson: LessonArgument,
    attention_map: Annotated[
        bool,
        typer.Option(
            "--map",
            help="Draw your attention weights on a small sentence, beside the reference (lessons 3 to 9).",
        ),
    ] = False,
    workspace: WorkspaceOption = None,
) -> None:
    """Show a lesson: goals, the file to edit, each exercise's status."""
    from course import render

    session = _session(workspace)
    chosen = _lesson(session, lesson)
    if attention_map:
        from course.engine.maps import attention_maps
        from course.render_maps import maps_screen

        _show(maps_screen(attention_maps(chosen, session.workspace.root)))
        return
    _show(render.lesson_page(chosen, session))


@app.command()
def hint(
    lesson: Annotated[str | None, typer.Argument(help="Default: the current lesson.")] = None,
    exercise: Annotated[str | None, typer.Option(help="Default: the first not passed.")] = None,
    workspace: WorkspaceOption = None,
) -> None:
    """Reveal the next hint for an exercise (hints already seen are shown again)."""
    from course import progress, render

    session = _session(workspace)
    chosen = _lesson(session, lesson)
    try:
        _show(render.hint_screen(progress.reveal_hint(session, chosen, exercise)))
    except LookupError as problem:
        _fail(str(problem))


@app.command()
def reset(lesson: LessonArgument, workspace: WorkspaceOption = None) -> None:
    """Restore a lesson file to its fresh skeleton; your version is kept as a backup."""
    from course import progress

    session = _session(workspace)
    chosen = _lesson(session, lesson)
    saved = progress.reset(session, chosen)
    where = session.workspace.display(session.workspace.lesson_file(chosen))
    kept = f" Your previous version is in {session.workspace.display(saved)}." if saved else ""
    _show(f"{where} is a fresh skeleton again.{kept}")


@app.command()
def solution(
    lesson: LessonArgument,
    peek: Annotated[bool, typer.Option(help="Show it before passing (recorded).")] = False,
    workspace: WorkspaceOption = None,
) -> None:
    """Show the reference solution of a lesson you have passed."""
    from course import progress, render

    session = _session(workspace)
    chosen = _lesson(session, lesson)
    peeked = session.state.status(chosen.module) != "passed"
    try:
        source = progress.solution_text(session, chosen, peek)
    except FileNotFoundError as problem:
        _fail(str(problem))
    if source is None:
        _fail(
            f"Lesson {chosen.id} has not passed yet, so its solution stays hidden. "
            f"`course hint {chosen.number}` helps; `course solution {chosen.number} --peek` shows it "
            "anyway and records that you peeked.",
            1,
        )
    _show(render.solution_screen(chosen, source, peeked))


def _register_instructor_commands() -> None:
    """`watch` and the instructor and maintainer commands live in their own modules."""
    from course import cli_dev, cli_instructor, cli_notebooks, cli_watch

    cli_watch.register(app)
    cli_dev.register(app)
    cli_notebooks.register(app)
    cli_instructor.register(app)


_register_instructor_commands()


def main() -> None:
    """Console-script entry point. The current folder (a workspace, possibly with a learner's
    numpy.py in it) never belongs on the grader's import path."""
    here = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", here)]
    app()
