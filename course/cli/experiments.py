"""`course experiment LESSON [NAME]`: list a lesson's experiments, or run one on the learner's
code with a progress bar, then draw its figures.

Exit codes: 0 listed or ran; 1 the learner's code could not run it (not started, an error, a
timeout); 2 an unknown lesson or experiment; 130 stopped with Ctrl-C (the learner's workers
are stopped with everything they started, and one line says so).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from course.cli.common import console, fail, lesson_named, open_session, show
from course.cli.options import LessonArgument, WorkspaceOption

if TYPE_CHECKING:
    from types import TracebackType

    from rich.console import Console


def experiment(
    lesson: LessonArgument,
    name: Annotated[str | None, typer.Argument(help="Which experiment (default: list them).")] = None,
    workspace: WorkspaceOption = None,
) -> None:
    """List a lesson's experiments, or run one on your code (minutes, with a progress bar)."""
    from course.render import experiments as screens
    from course.workspace import actions

    session = open_session(workspace)
    chosen = lesson_named(session.catalog, lesson)
    if name is None:
        show(screens.experiment_list(chosen, actions.experiments(chosen)))
        return
    try:
        show(screens.experiment_header(actions.experiment(chosen, name)))
    except LookupError as unknown:
        fail(str(unknown))
    try:
        with Reporter(console()) as progress:
            found, problem = actions.run_experiment(session, chosen, name, progress)
    except KeyboardInterrupt:
        show("Stopped.")
        raise SystemExit(130) from None
    if problem:
        fail(problem, 1)
    show(screens.experiment_figures(found))


class Reporter:
    """An experiment's ``progress``: a live bar on a terminal; elsewhere (a file, a pipe) a plain
    line at the start, at each further tenth done and at the end."""

    def __init__(self, out: Console) -> None:
        from course.render import experiments as screens

        self.out = out
        self.bar = screens.experiment_progress(out) if out.is_terminal else None
        self.task: Any = None
        self.started = time.monotonic()
        self.tenths = -1  # the last tenth a plain line was printed for

    def __enter__(self) -> Reporter:
        if self.bar is not None:
            self.bar.start()
            self.task = self.bar.add_task("", total=None)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self.bar is not None:
            self.bar.stop()

    def __call__(self, done: float, total: float, status: str = "") -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total, description=status)
            return
        from course.render import experiments as screens

        tenths = int(10 * done / total) if total > 0 else 0
        if tenths > self.tenths:
            self.tenths = tenths
            self.out.print(screens.progress_line(done, total, status, time.monotonic() - self.started))


def register(app: typer.Typer) -> None:
    app.command()(experiment)
