"""A notebook's pictures: the data of `course show --map` (``course.engine.pictures.maps`` and
``course.engine.pictures.figures``: the learner's attention weights beside the right ones, head
grids, the pruning curve) drawn with matplotlib as PNG images, for the pictures cell to display.

The learner's code is the module the grading cell grades (``course.instructor.notebooks.cells``),
run the same way (``course.engine.calls.learner_module.LearnerModule``, in a scratch folder
removed afterwards). matplotlib is optional (the ``notebooks`` extra): without it the cell
gets a one-line note and no image.
"""

from __future__ import annotations

import importlib.util
import io
import tempfile
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from course.instructor.notebooks import cells

NO_MATPLOTLIB = 'No pictures: matplotlib is not installed (`pip install "attention-course[notebooks]"`).'


def draw(module: str, code: str, earlier: Mapping[str, str]) -> tuple[list[bytes], str]:
    """PNG images of the lesson's pictures for ``code``, and a one-line note (why none)."""
    if importlib.util.find_spec("matplotlib") is None:
        return [], NO_MATPLOTLIB
    from course.content.catalog import load_catalog
    from course.engine.pictures import figures, maps

    lesson = load_catalog().by_module(module)
    if lesson is None or not lesson.pictures.is_file():
        return [], "This lesson has no pictures."
    with tempfile.TemporaryDirectory(prefix="course-pictures-") as scratch:
        Path(scratch, lesson.file_name).write_text(cells.graded_source(code), encoding="utf-8")
        for name, text in earlier.items():
            Path(scratch, f"{name}.py").write_text(text, encoding="utf-8")
        drawn = maps.attention_maps(lesson, Path(scratch))
        more, problem = figures.figures(lesson, Path(scratch))
    images = []
    if drawn.reference is not None and drawn.learner is not None:
        images.append(_maps_png(drawn.learner, drawn.reference, drawn.tokens))
    images += [png for figure in more if (png := _figure_png(figure))]
    notes = [drawn.problem if drawn.reference is not None else "", problem]
    return images, " ".join(note for note in notes if note)


def _canvas(rows: int, columns: int, size: float = 2.6) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(size * columns, size * rows), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, columns, squeeze=False)
    return figure, axes


def _png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80)
    return buffer.getvalue()


def _heatmap(ax: Any, weights: Any, title: str, tokens: tuple[str, ...] = ()) -> None:
    ax.imshow(weights, vmin=0.0, vmax=1.0, cmap="viridis")
    ax.set_title(title, fontsize=9)
    if tokens and len(tokens) == weights.shape[-1]:
        ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=7)
        ax.set_yticks(range(len(tokens)), tokens, fontsize=7)
    else:
        ax.set_xticks([])
        ax.set_yticks([])


def _maps_png(learner: Any, reference: Any, tokens: tuple[str, ...]) -> bytes:
    """One column per head: the learner's weights above the right ones (queries x keys)."""
    heads = learner.shape[0]
    figure, axes = _canvas(2, heads)
    for head in range(heads):
        name = f" · head {head}" if heads > 1 else ""
        _heatmap(axes[0][head], learner[head], f"yours{name}", tokens)
        _heatmap(axes[1][head], reference[head], f"right{name}", tokens)
    return _png(figure)


def _figure_png(figure: Any) -> bytes | None:
    from course.engine.pictures.figures import HeadGrid, LineChart

    if isinstance(figure, HeadGrid):
        layers, heads = figure.maps.shape[:2]
        canvas, axes = _canvas(layers, heads, size=2.0)
        for layer in range(layers):
            for head in range(heads):
                label = figure.label(layer, head)
                title = f"L{layer} H{head}" + (f": {label}" if label else "")
                _heatmap(axes[layer][head], figure.maps[layer, head], title)
        canvas.suptitle(figure.title, fontsize=10)
        return _png(canvas)
    if isinstance(figure, LineChart):
        canvas, axes = _canvas(1, 1, size=4.5)
        for name, values in figure.series.items():
            axes[0][0].plot(figure.x, values, marker="o", label=name)
        axes[0][0].set(xlabel=figure.x_label, ylabel=figure.y_label)
        axes[0][0].set_title(textwrap.fill(figure.title, 60), fontsize=9)
        axes[0][0].legend(fontsize=8)
        return _png(canvas)
    return None  # a NumberTable: the terminal's table says it better than a picture
