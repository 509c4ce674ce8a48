"""The learner's commands: init, next, check, list, show, hint, reset, solution.

Each is a few lines: open the session, call ``course.workspace.actions``, hand what
``course.render`` builds to the console. next, check and list are done in
``course.cli.everyday`` (typer-free, so that ``course.cli.quick`` runs them without typer);
here they declare their options and help.
``register(app)`` adds them to the `course` app.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from course.cli import everyday
from course.cli.common import fail, lesson_named, lesson_or_current, open_session, print_json, show
from course.cli.options import LessonArgument, WorkspaceOption

OptionalLesson = Annotated[str | None, typer.Argument(help="Default: the current lesson.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def init(
    directory: Annotated[Path, typer.Argument(help="Where to create it.")] = Path("workspace"),
) -> None:
    """Create a workspace with a fresh copy of every lesson file."""
    from course.workspace import folder, session

    try:
        created, added = session.init_workspace(directory)
    except folder.WorkspaceProblem as problem:
        fail(str(problem))
    names = ", ".join(p.name for p in added) or "none (every lesson file was already there)"
    show(
        f"Workspace ready in {created.display(created.root)}/. Lesson files added: {names}.",
        f"Next: cd {created.display(created.root)} and run `course next`.",
    )


FreshOption = Annotated[
    bool,
    typer.Option(
        "--fresh", help="Grade again even lessons whose files did not change since their last check."
    ),
]


def next_(workspace: WorkspaceOption = None, fresh: FreshOption = False) -> None:
    """Check the current lesson; when it passes, move on to the next one."""
    everyday.next_(workspace, fresh)


def check(
    lesson: OptionalLesson = None,
    all_: Annotated[bool, typer.Option("--all", help="Check every available lesson.")] = False,
    as_json: JsonOption = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Show every check not passed, not only the most telling one."),
    ] = False,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            help="Run the tests with your code in this process, for print() and "
            "breakpoint(). Not a grade: nothing is recorded.",
        ),
    ] = False,
    workspace: WorkspaceOption = None,
    fresh: FreshOption = False,
    sealed: Annotated[
        bool,
        typer.Option(
            "--sealed",
            help="Grade as `course grade` does: the code graded may read nothing of the course "
            "but its engine (GitHub Classroom's command).",
        ),
    ] = False,
) -> None:
    """Grade a lesson (default: the current one). Exit 0 when it passed, 1 when not."""
    everyday.check(lesson, all_, as_json, verbose, debug, workspace, fresh, sealed)


def list_(workspace: WorkspaceOption = None, as_json: JsonOption = False) -> None:
    """List every lesson with your progress."""
    everyday.list_(workspace, as_json)


def show_(
    lesson: LessonArgument,
    attention_map: Annotated[
        bool,
        typer.Option(
            "--map",
            help="Draw your attention weights on a small sentence, beside the reference "
            "(the lessons with attention weights).",
        ),
    ] = False,
    workspace: WorkspaceOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a lesson: goals, the file to edit, each exercise's status."""
    from course.cli.reference import terms_of

    if attention_map and as_json:
        fail("--json prints the lesson's page as data; --map draws pictures: use one of them.")
    session = open_session(workspace)
    chosen = lesson_named(session.catalog, lesson)
    if as_json:
        from course.workspace import overview

        print_json(overview.lesson_page(session, chosen, [term.name for term in terms_of(chosen.id)]))
    elif attention_map:
        from course.render import pictures
        from course.workspace import actions

        show(pictures.maps_screen(actions.attention_maps(session, chosen)))
    else:
        from course.render import lessons
        from course.render.glossary import lesson_terms

        show(lessons.lesson_page(chosen, session), lesson_terms(terms_of(chosen.id)))


def hint(
    lesson: OptionalLesson = None,
    exercise: Annotated[str | None, typer.Option(help="Default: the first not passed.")] = None,
    workspace: WorkspaceOption = None,
) -> None:
    """Reveal the next hint for an exercise (hints already seen are shown again)."""
    from course.render import lessons
    from course.workspace import actions

    session = open_session(workspace)
    chosen = lesson_or_current(session, lesson)
    try:
        show(lessons.hint_screen(actions.reveal_hint(session, chosen, exercise)))
    except LookupError as problem:
        fail(str(problem))


def reset(lesson: LessonArgument, workspace: WorkspaceOption = None) -> None:
    """Restore a lesson file to its fresh skeleton; your version is kept as a backup."""
    from course.workspace import actions

    session = open_session(workspace)
    chosen = lesson_named(session.catalog, lesson)
    done = actions.reset(session, chosen)
    where = session.workspace.display(session.workspace.lesson_file(chosen))
    kept = f" Your previous version is in {session.workspace.display(done.saved)}." if done.saved else ""
    show(f"{where} is a fresh skeleton again.{kept}")
    if done.recheck:
        numbers = ", ".join(each.id for each in done.recheck)
        many = len(done.recheck) > 1
        which = f"Lessons {numbers} use" if many else f"Lesson {numbers} uses"
        show(
            f"{which} lesson {chosen.id}, so {'their passes need' if many else 'its pass needs'} a "
            "re-check: `course next` re-checks on the way, `course check --all` at once."
        )


def solution(
    lesson: LessonArgument,
    peek: Annotated[bool, typer.Option(help="Show it before passing (recorded).")] = False,
    workspace: WorkspaceOption = None,
) -> None:
    """Show the reference solution of a lesson you have passed."""
    from course.render import lessons
    from course.workspace import actions

    session = open_session(workspace)
    chosen = lesson_named(session.catalog, lesson)
    peeked = session.state.status(chosen.module) != "passed"
    try:
        source = actions.solution_text(session, chosen, peek)
    except FileNotFoundError as problem:
        fail(str(problem))
    if source is None:
        fail(
            f"Lesson {chosen.id} has not passed yet, so its solution stays hidden. "
            f"`course hint {chosen.number}` helps; `course solution {chosen.number} --peek` shows it "
            "anyway and records that you peeked.",
            1,
        )
    if not sys.stdout.isatty():  # to a file or a pipe: the source byte for byte, never wrapped
        if peeked:
            sys.stderr.write("Peeking before the lesson passed: this is recorded in your progress.\n")
        sys.stdout.write(source)
        return
    show(lessons.solution_screen(chosen, source, peeked))


def register(app: typer.Typer) -> None:
    """Add the learner's commands to the `course` app, in the order `course --help` lists them."""
    app.command()(init)
    app.command(name="next")(next_)
    app.command()(check)
    app.command(name="list")(list_)
    app.command(name="show")(show_)
    app.command()(hint)
    app.command()(reset)
    app.command()(solution)
