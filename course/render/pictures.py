"""Attention maps as terminal heatmaps (learner, reference and their difference, side by side),
shape traces as tables, and the figures a lesson asks for (per-head maps over layers, line
charts, tables of numbers): the pictures that explain an attention bug or a measurement.

Each cell shows its weight as a shade character and, in colour, as a background; without colour
the shades alone carry it. Flagged rows are marked at the right and listed below.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Mapping

import numpy as np
from rich.columns import Columns
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
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
    markers = series_markers(maps.figures)  # one marker per series name on the whole screen
    extra: list[RenderableType] = [figure(f, markers) for f in maps.figures]
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


def series_markers(found: Iterable[Figure]) -> dict[str, str]:
    """One marker per series name over the figures of one screen, in order of first appearance:
    a name keeps its marker from chart to chart, and two names never share one."""
    markers: dict[str, str] = {}
    for chart in found:
        if isinstance(chart, LineChart):
            for name in chart.series:
                if name not in markers:
                    markers[name] = _marker(len(markers))
    return markers


def figure(found: Figure, markers: Mapping[str, str] | None = None) -> RenderableType:
    """One of the figures a lesson asks for (``course.engine.pictures.figures``); ``markers``:
    the screen's marker of each series name (``series_markers``), so that the charts of one
    screen agree."""
    if isinstance(found, HeadGrid):
        return head_grid(found)
    if isinstance(found, LineChart):
        return line_chart(found, markers)
    return number_table(found)


def _mini_rows(weights: np.ndarray) -> list[Text]:
    """A small (T, S) map without token labels, one Text per query: two shade characters per
    weight."""
    lines = []
    for row in weights:
        line = Text()
        for value in row:
            line.append_text(
                _cell(float(value))[1:3] if not np.isnan(value) else Text("!!", style="bold red")
            )
        lines.append(line)
    return lines


def _fitted(text: Text, width: int) -> Text:
    """``text`` padded with spaces to ``width`` cells (never cut: the layout makes room)."""
    padded = text.copy()
    padded.append(" " * max(0, width - padded.cell_len))
    return padded


class HeadGridView:
    """A head grid laid out for the console's width: as many heads side by side as fit, each
    head's header above its map and its label lines directly under it, in the same columns; the
    heads that do not fit go to a further band of the same layer, with their own headers."""

    GAP = 2  # spaces between two heads' columns

    def __init__(self, grid: HeadGrid) -> None:
        self.grid = grid

    def layout(self, max_width: int) -> tuple[int, int, int]:
        """(left margin, column width, heads per band) for a console ``max_width`` wide: the
        bands are as even as possible (four heads that do not fit in one band make two of two)."""
        layers, heads, _, keys = self.grid.maps.shape
        left = len(f"layer {max(layers - 1, 0)}") + 2
        labels = [
            len(line)
            for layer in range(layers)
            for head in range(heads)
            for line in self.grid.label(layer, head).splitlines()
        ]
        column = max([2 * keys, len(f"head {max(heads - 1, 0)}"), *labels])
        column = max(2 * keys, min(column, max_width - left))  # a label wider than that wraps
        fit = max(1, (max_width - left + self.GAP) // (column + self.GAP))
        bands = -(-heads // fit)
        return left, column, -(-heads // max(bands, 1))

    def _label_lines(self, layer: int, head: int, column: int) -> list[str]:
        lines = []
        for line in self.grid.label(layer, head).splitlines():
            lines += textwrap.wrap(line, column) or [""]
        return lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        layers, heads = self.grid.maps.shape[:2]
        left, column, per_band = self.layout(options.max_width)
        bands = [list(range(start, min(start + per_band, heads))) for start in range(0, heads, per_band)]
        lines: list[Text] = []
        for layer in range(layers):
            for band in bands:
                if len(bands) > 1 or layer == 0:
                    header = Text(" " * left)
                    for head in band:
                        header.append_text(_fitted(Text(f"head {head}"), column + self.GAP))
                    lines.append(header)
                maps = [_mini_rows(self.grid.maps[layer, head]) for head in band]
                labels = [self._label_lines(layer, head, column) for head in band]
                for row in range(len(maps[0])):
                    line = _fitted(Text(f"layer {layer}" if row == 0 else ""), left)
                    for rows in maps:
                        line.append_text(_fitted(rows[row], column + self.GAP))
                    lines.append(line)
                for row in range(max(len(label) for label in labels)):
                    line = Text(" " * left)
                    for label in labels:
                        word = label[row] if row < len(label) else ""
                        line.append_text(_fitted(Text(word, style="bold"), column + self.GAP))
                    lines.append(line)
                lines.append(Text(""))
        for line in lines:
            line.rstrip()
            line.no_wrap = True
            yield line


def head_grid(grid: HeadGrid) -> RenderableType:
    """Layer by head: each head's small map with its label under it, as many heads side by
    side as the console's width holds (``HeadGridView``)."""
    return Group(Text(grid.title, style="bold"), HeadGridView(grid), _legend())


MARKERS = "●▲■◆✚○△□◇✱"


def _marker(index: int) -> str:
    """The index-th series marker: the shapes first, then letters."""
    if index < len(MARKERS):
        return MARKERS[index]
    return "abcdefghijklmnopqrstuvwxyz"[(index - len(MARKERS)) % 26]


def y_axis(low: float, high: float, rows: int) -> tuple[float, float, int, int]:
    """A y axis for values from ``low`` to ``high`` in about ``rows`` text rows: (top, step,
    rows per step, steps). Labels fall at even steps (1, 2, 2.5 or 5 times a power of ten) every
    few rows, at most one label every second row, so that a value between two labels can be
    read off the rows in between."""
    if not (np.isfinite(low) and np.isfinite(high)):
        low, high = 0.0, 1.0
    if high - low < 1e-12:
        pad = abs(high) * 0.1 or 1.0
        low, high = low - pad, high + pad
    most = max(2, rows // 2)
    power = 10.0 ** math.floor(math.log10((high - low) / most))
    for step in (power * m for m in (1, 2, 2.5, 5, 10, 20, 25, 50, 100)):
        bottom = math.floor(low / step + 1e-9) * step
        top = math.ceil(high / step - 1e-9) * step
        steps = max(1, round((top - bottom) / step))
        if steps <= most:
            break
    return top, step, max(1, rows // steps), steps


def _decimals(step: float) -> int:
    """The decimals that write every multiple of ``step`` exactly (0.25: 2, 0.1: 1, 50: 0)."""
    for decimals in range(12):
        if abs(round(step, decimals) - step) <= 1e-9 * abs(step):
            return decimals
    return 12


class LineChartView:
    """A line chart laid out for the console's width: one column per x value (narrower when the
    console is), a y axis labelled at even steps every few rows, the x values that fit under
    their columns, the legend wrapped between entries. Points of several series that fall in the
    same cell are drawn side by side, so no series hides another."""

    def __init__(self, chart: LineChart, markers: Mapping[str, str]) -> None:
        self.chart = chart
        self.markers = markers

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        chart = self.chart
        values = [v for series in chart.series.values() for v in series if not np.isnan(v)]
        low, high = (min(values), max(values)) if values else (0.0, 1.0)
        top, step, per_step, steps = y_axis(low, high, max(chart.height, 2))
        rows = steps * per_step + 1
        row_size = step / per_step
        decimals = _decimals(step)
        labels = {  # + 0.0: never "-0.0"
            k * per_step: f"{round(top - k * step, decimals) + 0.0:.{decimals}f}" for k in range(steps + 1)
        }
        edge = max(len(label) for label in labels.values())
        ticks = [f"{x:g}" for x in chart.x]
        count = max(len(ticks), 1)
        ideal = max([len(t) for t in ticks] + [len(chart.series) + 1, 1]) + 2
        width = max(1, min(ideal, (options.max_width - edge - 2) // count))
        cells: list[list[str]] = [["" for _ in chart.x] for _ in range(rows)]
        for name, series in chart.series.items():
            for column, value in enumerate(series[: len(chart.x)]):
                if not np.isnan(value):
                    row = min(max(round((top - value) / row_size), 0), rows - 1)
                    cells[row][column] += self.markers[name]
        yield Text(chart.title, style="bold")
        if chart.y_label:
            yield Text(chart.y_label)
        for row in range(rows):
            line = Text(f"{labels.get(row, ''):>{edge}} │", no_wrap=True)
            line.append("".join(cell[:width].center(width) for cell in cells[row]).rstrip())
            yield line
        yield Text(" " * edge + " └" + "─" * (width * count), no_wrap=True)
        yield Text(self._ticks(ticks, width, edge + 2).rstrip(), no_wrap=True)
        if chart.x_label:
            yield Text(" " * (edge + 2) + chart.x_label)
        entries = [f"{self.markers[name]} {name}" for name in chart.series]
        for legend in _packed(entries, options.max_width):
            yield Text(legend, style="dim")

    @staticmethod
    def _ticks(ticks: list[str], width: int, indent: int) -> str:
        """The x values, each centred under its column; one that would touch the one before it
        is left out (a narrow chart labels every second or third column)."""
        line = [" "] * (indent + width * len(ticks) + max([len(t) for t in ticks] + [0]))
        end = -1
        for column, tick in enumerate(ticks):
            start = indent + column * width + (width - len(tick)) // 2
            start = max(start, indent)
            if start > end + 1 or end < 0:
                line[start : start + len(tick)] = tick
                end = start + len(tick)
        return "".join(line)


def _packed(entries: list[str], width: int, gap: str = "   ") -> list[str]:
    """``entries`` joined by ``gap`` into lines of at most ``width`` cells, never broken inside
    an entry (a marker stays with its name)."""
    lines: list[str] = []
    for entry in entries:
        if lines and len(lines[-1]) + len(gap) + len(entry) <= width:
            lines[-1] += gap + entry
        else:
            lines.append(entry)
    return lines


def line_chart(chart: LineChart, markers: Mapping[str, str] | None = None) -> RenderableType:
    """The series drawn in text (``LineChartView``), each with its marker from ``markers`` (by
    series name; default: the chart's own order)."""
    assigned = dict(markers or {})
    for name in chart.series:
        if name not in assigned:
            used = set(assigned.values())
            assigned[name] = next(_marker(i) for i in range(len(used) + 1) if _marker(i) not in used)
    return LineChartView(chart, assigned)


def header_lines(header: str) -> str:
    """``header`` on one line, or split at the space that makes its longer line shortest (two
    lines): what a column needs at least above its numbers."""
    words = header.split(" ")
    if len(words) < 2:
        return header
    splits = [(" ".join(words[:k]), " ".join(words[k:])) for k in range(1, len(words))]
    first, second = min(splits, key=lambda pair: max(len(pair[0]), len(pair[1])))
    return f"{first}\n{second}"


class NumberTableView:
    """A number table laid out for the console's width: every column at least as wide as its
    longest cell, so no number or role is ever cut; headers on one line when the table fits,
    else the headers that save the most wrap onto two lines; a table that cannot fit even so
    is written as one record per row, a "column: value" line per cell."""

    def __init__(self, numbers: NumberTable) -> None:
        self.numbers = numbers

    def cells(self) -> list[list[str]]:
        """Every cell's text, row by row."""
        numbers = self.numbers
        return [
            [numbers.cell(row, column) for column in range(len(numbers.columns))]
            for row in range(len(numbers.rows))
        ]

    def headers(self, max_width: int) -> list[str] | None:
        """Each column's header text (with a line break where it wraps), or None when the table
        cannot fit ``max_width``."""
        columns = self.numbers.columns
        cells = self.cells()
        longest = [max([len(row[c]) for row in cells] + [1]) for c in range(len(columns))]
        headers = list(columns)

        def total() -> int:
            widths = [
                max(longest[c], *(len(line) for line in headers[c].splitlines())) for c in range(len(columns))
            ]
            return sum(widths) + 3 * len(columns) - 1

        wrapped = [header_lines(h) for h in columns]
        saving = [
            max(longest[c], len(columns[c]))
            - max(longest[c], *(len(line) for line in wrapped[c].splitlines()))
            for c in range(len(columns))
        ]
        for c in sorted(range(len(columns)), key=lambda c: -saving[c]):
            if total() <= max_width or saving[c] <= 0:
                break
            headers[c] = wrapped[c]
        return headers if total() <= max_width else None

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        cells = self.cells()
        headers = self.headers(options.max_width)
        if headers is None:
            for row in cells:
                for name, value in zip(self.numbers.columns, row, strict=True):
                    yield Text(f"{name}: {value}")
                yield Text("")
            return
        table = Table(show_edge=False)
        for c, header in enumerate(headers):
            width = max([len(row[c]) for row in cells] + [len(line) for line in header.splitlines()])
            table.add_column(Text(header), justify="right", width=width, min_width=width, no_wrap=True)
        for row in cells:
            table.add_row(*row)
        yield table


def number_table(numbers: NumberTable) -> RenderableType:
    """The measured numbers, right-aligned, each column in its own format, laid out for the
    console's width (``NumberTableView``)."""
    return Group(Text(numbers.title, style="bold"), NumberTableView(numbers))
