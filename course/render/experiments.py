"""`course experiment`: a lesson's list of experiments, an experiment's heading, its progress (a
live bar on a terminal, a plain line elsewhere) and its figures. Nothing here prints: the bar is
a rich ``Progress`` the command starts on its console.

Every piece reads without colour: the bar's done part is drawn in characters and its percentage
is written beside it; text from an experiment (its status) is shown as plain text, never markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.progress import (
    BarColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from course.render.basics import lesson_heading, plain
from course.render.pictures import figure, series_markers

if TYPE_CHECKING:
    from course.content.catalog import Lesson
    from course.engine.pictures.experiments import Experiment
    from course.engine.pictures.figures import Figure


def experiment_list(lesson: Lesson, found: Sequence[Experiment]) -> RenderableType:
    """`course experiment LESSON`: each experiment's name, title and what it does, and how to
    run one; one line when the lesson has none."""
    if not found:
        return Text(f"Lesson {lesson.id} has no experiments.")
    parts: list[RenderableType] = [Text(f"Experiments of {lesson_heading(lesson)}", style="bold"), Text("")]
    for each in found:
        parts.append(Text.assemble((each.name, "bold cyan"), f" · {each.title}"))
        parts.append(Text("    ") + plain(each.about))
        parts.append(Text(""))
    example = found[0].name
    parts.append(Text(f"Run one: course experiment {lesson.number} NAME (e.g. {example})."))
    return Group(*parts)


def experiment_header(experiment: Experiment) -> RenderableType:
    """What is running, shown before the bar: the title and the paragraph about it."""
    return Group(Text(experiment.title, style="bold"), plain(experiment.about), Text(""))


def experiment_progress(console: Console) -> Progress:
    """The live bar for a terminal: the part done, its percentage, the time taken and left
    (``0:00:42 taken, 0:01:10 left``), the experiment's status.
    Add one task (its description is the status) and update it; start it as a context."""
    return Progress(
        BarColumn(bar_width=30),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TextColumn("taken,"),
        TimeRemainingColumn(),
        TextColumn("left"),
        TextColumn("{task.description}", markup=False),
        console=console,
        refresh_per_second=4,
    )


def progress_line(done: float, total: float, status: str, elapsed: float) -> Text:
    """One plain line of progress, for output that is not a terminal (a file, a pipe, CI):
    ``  30%  0:00:42  step 150 of 500, loss 2.31``."""
    share = min(max(done / total, 0.0), 1.0) if total > 0 else 0.0
    minutes, seconds = divmod(int(elapsed), 60)
    hours, minutes = divmod(minutes, 60)
    line = Text(f"{share:>5.0%}  {hours}:{minutes:02d}:{seconds:02d}  ")
    return line + plain(status)


def experiment_figures(found: Sequence[Figure]) -> RenderableType:
    """The experiment's figures, drawn as `course show N --map` draws a lesson's figures (one
    marker per series name across the screen)."""
    markers = series_markers(found)
    return Group(Text(""), *[figure(each, markers) for each in found])
