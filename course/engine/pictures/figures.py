"""Picture kinds a lesson can ask for by data, beyond attention maps and shape traces: a grid
of labelled per-head maps over several layers, a line chart, a table of measured numbers.

A lesson's pictures module returns these from ``figures(module)`` (see ``load``); ``course show
--map`` draws them after the maps with ``course.render.pictures.figure``. They are plain data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from course.content.catalog import Lesson
from course.engine.calls import errors, learner_module
from course.engine.pictures import load


@dataclass(frozen=True)
class HeadGrid:
    """Per-head attention maps over several layers: ``maps`` is (L, H, T, S), ``labels[l][h]``
    the word under layer l's head h (a role such as "prev-token", or "")."""

    title: str
    maps: np.ndarray
    labels: tuple[tuple[str, ...], ...] = ()

    def label(self, layer: int, head: int) -> str:
        if layer < len(self.labels) and head < len(self.labels[layer]):
            return self.labels[layer][head]
        return ""


@dataclass(frozen=True)
class LineChart:
    """One or more named series over the same x values (e.g. accuracy against heads pruned)."""

    title: str
    x: tuple[float, ...]
    series: dict[str, tuple[float, ...]]
    x_label: str = ""
    y_label: str = ""
    height: int = 10  # text rows of the plot area


@dataclass(frozen=True)
class NumberTable:
    """A small table of measured numbers; ``formats`` has one format spec per column
    (``".3f"``, ``"d"``, ``""`` for text), applied to every cell of that column."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[object, ...], ...]
    formats: tuple[str, ...] = field(default=())

    def cell(self, row: int, column: int) -> str:
        value = self.rows[row][column]
        spec = self.formats[column] if column < len(self.formats) else ""
        if isinstance(value, float) and np.isnan(value):
            return "NaN"
        try:
            return format(value, spec)
        except (TypeError, ValueError):
            return str(value)


Figure = HeadGrid | LineChart | NumberTable


def figures(lesson: Lesson, source_dir: Path) -> tuple[list[Figure], str]:
    """The lesson's further pictures for the learner's file, and a one-line problem when the
    learner's code could not make them (no pictures module or no ``figures``: nothing)."""
    module = load.load(lesson)
    make = getattr(module, "figures", None)
    if not callable(make):
        return [], ""
    learner = learner_module.LearnerModule(source_dir, lesson.module)
    try:
        made = make(learner)
    except errors.NotStarted:
        return [], "Your function still raises NotImplementedError: nothing to draw yet."
    except errors.LearnerProblem as problem:
        return [], str(problem)
    except (TypeError, ValueError):
        return [], "Your function did not return what the picture needs."
    finally:
        learner.close()
    return [f for f in made if isinstance(f, (HeadGrid, LineChart, NumberTable))], ""
