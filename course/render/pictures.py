"""Attention maps as terminal heatmaps (learner, reference and their difference, side by side),
shape traces as tables, and the figures a lesson asks for (per-head maps over layers, line
charts, tables of numbers): the pictures that explain an attention bug or a measurement.

Each cell shows its weight as a shade character and, in colour, as a background; without colour
the shades alone carry it. Flagged rows are marked at the right and listed below.
"""

from __future__ import annotations

import numpy as np
from rich.columns import Columns
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from course.engine.pictures.figures import Figure, HeadGrid, LineChart, NumberTable
from course.engine.pictures.maps import AttentionMaps
from course.engine.pictures.shapes import ShapeTrace

SHADES = " .:-=+*#%@"


def _cell(value: float) -> Text:
    if np.isnan(value):
        return Text(" NaN", style="bold red")
    level = int(round(min(max(abs(value), 0.0), 1.0) * (len(SHADES) - 1)))
    shade = SHADES[level]
    tone = int(255 - 200 * min(abs(value), 1.0))
    return Text(f" {shade}{shade}{shade}", style=f"on rgb({tone},{tone},255)" if value else "")


def heatmap(
    weights: np.ndarray, tokens: tuple[str, ...], title: str, flagged: set[int] | frozenset[int] = frozenset()
) -> Table:
    """One (T, S) map: rows are queries, columns keys."""
    table = Table(title=title, box=None, padding=(0, 0), show_edge=False, title_justify="left")
    table.add_column("")
    for token in tokens:
        table.add_column(Text(f" {token[:3]}"), justify="left")
    table.add_column("")
    for row, name in enumerate(tokens):
        marks = Text(" ◀", style="bold red") if row in flagged else Text("")
        table.add_row(Text(f"{name:>4} "), *[_cell(float(v)) for v in weights[row]], marks)
    return table


def maps_screen(maps: AttentionMaps) -> RenderableType:
    """The whole `course show LESSON --map` screen: the maps, then the lesson's figures."""
    extra: list[RenderableType] = [figure(f) for f in maps.figures]
    if maps.figures_problem:
        extra.append(Text(maps.figures_problem))
    if maps.reference is None and not maps.problem:
        return Group(*extra)
    if maps.problem and maps.learner is None:
        alone = Group(Text(maps.problem), _legend()) if maps.reference is not None else Text(maps.problem)
        return Group(alone, *extra) if extra else alone
    assert maps.learner is not None and maps.reference is not None
    parts: list[RenderableType] = [
        Text(
            f'Attention weights on "{" ".join(maps.tokens)}" under a '
            "causal mask (rows: queries, columns: keys)."
        )
    ]
    for head in range(maps.reference.shape[0]):
        flagged = {row for h, row, _ in maps.flags if h == head}
        difference = np.abs(maps.learner[head] - maps.reference[head])
        kv = f" (reads key/value head {maps.kv_heads[head]})" if maps.kv_heads else ""
        parts.append(
            Panel(
                Columns(
                    [
                        heatmap(maps.learner[head], maps.tokens, "yours", flagged),
                        heatmap(maps.reference[head], maps.tokens, "reference"),
                        heatmap(difference, maps.tokens, "|difference|"),
                    ],
                    padding=(0, 3),
                ),
                title=f"head {head}{kv}",
                title_align="left",
            )
        )
    if maps.kv_heads:
        grid = Table(title="which key/value head each query head reads", box=None, title_justify="left")
        grid.add_column("query head")
        for g in sorted(set(maps.kv_heads)):
            grid.add_column(f"kv {g}")
        for head, g in enumerate(maps.kv_heads):
            grid.add_row(str(head), *["●" if g == col else "·" for col in sorted(set(maps.kv_heads))])
        parts.append(grid)
    if maps.flags:
        lines = Text("Rows that cannot be right:\n", style="bold red")
        for head, row, what in maps.flags[:12]:
            lines.append(f"  head {head}, query {row} ({maps.tokens[row]}): {what}\n", style="")
        parts.append(lines)
    else:
        parts.append(Text("Every row sums to 1 and stays within the mask.", style="green"))
    parts.append(_legend())
    return Group(*parts, *extra)


def diagnosis(found: AttentionMaps | ShapeTrace) -> RenderableType:
    """The picture that goes under a failed check (see ``course.workspace.actions.explaining_picture``)."""
    return shape_trace_table(found) if isinstance(found, ShapeTrace) else compact(found)


def compact(maps: AttentionMaps) -> RenderableType:
    """The first head that differs, yours beside the reference, for a failing check's screen."""
    assert maps.learner is not None and maps.reference is not None
    differing = [
        h
        for h in range(maps.reference.shape[0])
        if not np.allclose(maps.learner[h], maps.reference[h], atol=1e-6)
        or any(flag[0] == h for flag in maps.flags)
    ] or [0]
    head = differing[0]
    flagged = {row for h, row, _ in maps.flags if h == head}
    notes = Text()
    for _, row, what in [f for f in maps.flags if f[0] == head][:3]:
        notes.append(f"query {row} ({maps.tokens[row]}): {what}\n", style="red")
    kv = f", key/value head {maps.kv_heads[head]}" if maps.kv_heads else ""
    return Panel(
        Group(
            Columns(
                [
                    heatmap(maps.learner[head], maps.tokens, "yours", flagged),
                    heatmap(maps.reference[head], maps.tokens, "reference"),
                ],
                padding=(0, 3),
            ),
            notes,
        ),
        title=f"Your attention weights, head {head}{kv} (all: `course show --map`)",
        title_align="left",
        border_style="dim",
    )


def _legend() -> Text:
    return Text(f"shade: 0 {SHADES!r} 1", style="dim")


def shape_trace_table(trace: ShapeTrace) -> RenderableType:
    """The shapes at the named points, expected beside yours, the first mismatch explained."""
    table = Table(box=None, padding=(0, 2, 0, 0), show_edge=False)
    for column in ("point", "from your", "expected", "yours"):
        table.add_column(column, style="dim" if column == "from your" else "")
    for point, function, expected, yours, matches in trace.rows:
        mark = Text(yours, style="" if matches else "bold red")
        if not matches:
            mark.append(" ✘")
        table.add_row(Text(point), Text(function), Text(expected), mark)
    parts: list[RenderableType] = [table]
    if trace.mismatch:
        parts.append(Text(trace.mismatch, style="bold"))
    return Panel(
        Group(*parts),
        title=f"Shapes through your code ({trace.sizes_text()})",
        title_align="left",
        border_style="dim",
    )


def figure(found: Figure) -> RenderableType:
    """One of the figures a lesson asks for (``course.engine.pictures.figures``)."""
    if isinstance(found, HeadGrid):
        return head_grid(found)
    if isinstance(found, LineChart):
        return line_chart(found)
    return number_table(found)


def _mini(weights: np.ndarray) -> Text:
    """A small (T, S) map without token labels: two shade characters per weight."""
    lines = []
    for row in weights:
        line = Text()
        for value in row:
            line.append_text(
                _cell(float(value))[1:3] if not np.isnan(value) else Text("!!", style="bold red")
            )
        lines.append(line)
    return Text("\n").join(lines)


def head_grid(grid: HeadGrid) -> RenderableType:
    """Layer by head: each head's small map with its label under it."""
    table = Table(box=None, padding=(0, 2, 1, 0))
    table.add_column("")
    for head in range(grid.maps.shape[1]):
        table.add_column(f"head {head}")
    for layer in range(grid.maps.shape[0]):
        cells = [
            Group(_mini(grid.maps[layer, head]), Text(grid.label(layer, head), style="bold"))
            for head in range(grid.maps.shape[1])
        ]
        table.add_row(Text(f"layer {layer}"), *cells)
    return Group(Text(grid.title, style="bold"), table, _legend())


MARKERS = "●▲■◆✚"


def line_chart(chart: LineChart) -> RenderableType:
    """The series drawn in text: one column per x value, one row per height step, the highest
    value on the top row; the y range and each x value are labelled."""
    values = [v for series in chart.series.values() for v in series if not np.isnan(v)]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    span = (high - low) or 1.0
    rows = max(chart.height, 2)
    ticks = [f"{x:g}" for x in chart.x]
    width = max([len(t) for t in ticks] + [1]) + 2
    grid = [[" " * width for _ in chart.x] for _ in range(rows)]
    for marker, series in zip(MARKERS, chart.series.values(), strict=False):
        for column, value in enumerate(series[: len(chart.x)]):
            if not np.isnan(value):
                row = round((high - value) / span * (rows - 1))
                grid[row][column] = marker.center(width)
    edge = max(len(f"{high:.3g}"), len(f"{low:.3g}"))
    text = Text(f"{chart.title}\n", style="bold")
    if chart.y_label:
        text.append(f"{chart.y_label}\n")
    for row, cells in enumerate(grid):
        label = f"{high:.3g}" if row == 0 else f"{low:.3g}" if row == rows - 1 else ""
        text.append(f"{label:>{edge}} │{''.join(cells)}\n")
    text.append(" " * edge + " └" + "─" * (width * len(chart.x)) + "\n")
    text.append(" " * (edge + 2) + "".join(t.center(width) for t in ticks) + "\n")
    if chart.x_label:
        text.append(" " * (edge + 2) + chart.x_label + "\n")
    legend = "   ".join(f"{m} {name}" for m, name in zip(MARKERS, chart.series, strict=False))
    text.append(legend, style="dim")
    return text


def number_table(numbers: NumberTable) -> RenderableType:
    """The measured numbers, right-aligned, each column in its own format."""
    table = Table(show_edge=False)
    for column in numbers.columns:
        table.add_column(column, justify="right")
    for row in range(len(numbers.rows)):
        table.add_row(*[numbers.cell(row, column) for column in range(len(numbers.columns))])
    return Group(Text(numbers.title, style="bold"), table)
