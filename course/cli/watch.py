"""`course watch`: re-check the current lesson on every save (the loop is in course/workspace/watch.py)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from course.cli.common import console, fail, open_session
from course.cli.options import WorkspaceOption


def watch(
    poll: Annotated[
        bool, typer.Option(help="Poll for changes (for file systems without change events).")
    ] = False,
    workspace: WorkspaceOption = None,
) -> None:
    """Re-check the current lesson each time you save. Keys: n next, h hint, l list, r re-run,
    q quit."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        fail(
            "`course watch` needs a terminal: it redraws the screen and reads keys. In a "
            "script or a pipe, use `course check`."
        )
    from course.render import basics, lessons, screens
    from course.workspace import actions
    from course.workspace import watch as watcher

    session = open_session(workspace, create=True)
    out = console()
    view: dict = {"lesson": session.current() or session.catalog.available()[-1]}

    def draw(regrade: bool = True, extra=None) -> None:
        if regrade:
            view["result"] = actions.check(session, view["lesson"])
        out.clear()
        out.print(screens.watch_screen(view["lesson"], view["result"], session, extra))

    def on_key(key: str) -> bool:
        if key == "q":
            return False
        if key == "r":
            draw()
        elif key == "h":
            reveal = actions.reveal_hint(session, view["lesson"])
            draw(False, lessons.hint_screen(reveal, again="press h again"))
        elif key == "l":
            draw(False, lessons.lesson_list(session))
        elif key == "n" and not view["result"].passed:
            draw(
                False,
                basics.info(
                    f"Lesson {view['lesson'].number} is not green yet: n moves on once every check "
                    "passes (r re-checks it now)."
                ),
            )
        elif key == "n":
            upcoming = session.current()
            if upcoming is None:
                draw(False, lessons.finish(session.catalog, session))
            else:  # the next lesson's goals and first steps, as `course next` introduces it
                view["lesson"] = upcoming
                draw(extra=lessons.intro(upcoming, session))
        return True

    try:
        watcher.run(session.workspace.root, draw, on_key, poll)
    except KeyboardInterrupt:
        pass
    out.print("Stopped watching. Your progress is saved.")


def register(app: typer.Typer) -> None:
    app.command()(watch)
