"""Attention maps as terminal heatmaps (learner, reference and their difference, side by side),
and shape traces as tables: the pictures that explain an attention bug.

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

from course.engine.maps import AttentionMaps
from course.engine.shapes import ShapeTrace

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
    """The whole `course show LESSON --map` screen."""
    if maps.problem and maps.learner is None:
        return Group(Text(maps.problem), _legend()) if maps.reference is not None else Text(maps.problem)
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
    return Group(*parts)


def diagnosis(found: AttentionMaps | ShapeTrace) -> RenderableType:
    """The picture that goes under a failed check (see ``progress.diagnose``)."""
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
        title="Shapes through your code (B=7 T=3 S=5 H=4 K=6 D=24 G=2)",
        title_align="left",
        border_style="dim",
    )
