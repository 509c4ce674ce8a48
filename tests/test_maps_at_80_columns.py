"""Every `course show N --map` reads at 80 columns (and at 120): no line is wider than the
console, nothing is cut ("…"), each head grid's label stands on its own rows directly under its
own map, each number table's rows appear whole, one line each, and a series name keeps one
marker over all the charts of a screen.

The screens are made as the command makes them (``actions.attention_maps`` then
``maps_screen``), on the solutions, like tests/test_maps.py; each lesson is its own test, so the
slow ones (lesson 11 measures 300 sequences in the worker) run beside the others.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from rich.cells import cell_len
from rich.console import Console

from course.content.catalog import load_catalog
from course.engine.pictures import load
from course.engine.pictures.figures import HeadGrid, LineChart, NumberTable
from course.engine.pictures.maps import AttentionMaps, MapPipeline
from course.render.pictures import SHADES, figure, maps_screen
from course.workspace import actions
from tests.helpers import SOLUTIONS

CATALOG = load_catalog()
WITH_PICTURES = [
    lesson.module
    for lesson in CATALOG.available()
    if load.part(lesson, "MAPS", MapPipeline) is not None
    or callable(getattr(load.load(lesson), "figures", None))
]
WIDTHS = (80, 120)
HEADER = re.compile(r" *head \d+( +head \d+)* *")
LAYER = re.compile(r"layer (\d+)(?: |$)")


def screen_of(folder: Path, module: str) -> AttentionMaps:
    """What `course show N --map` draws for the lesson files in ``folder``."""
    session = SimpleNamespace(workspace=SimpleNamespace(root=folder))
    return actions.attention_maps(session, CATALOG.by_module(module))  # type: ignore[arg-type]


def rendered(renderable: object, width: int) -> list[str]:
    console = Console(record=True, width=width, color_system=None)
    console.print(renderable)
    return console.export_text().splitlines()


def shades(row: np.ndarray) -> str:
    """A map row as the head grid draws it: two shade characters per weight."""
    return "".join(2 * SHADES[int(round(min(max(abs(float(v)), 0.0), 1.0) * (len(SHADES) - 1)))] for v in row)


def head_grid_places(lines: list[str]) -> dict[tuple[int, int], tuple[int, int]]:
    """(layer, head) -> (line of the map's first row, column of the map) of every head grid
    band in ``lines``: a band is a header line of "head h" names and, under the header's
    columns, maps whose first row starts with "layer l" (a later layer of a grid that fits
    in one band reuses the header above it)."""
    places: dict[tuple[int, int], tuple[int, int]] = {}
    columns: list[tuple[int, int]] = []
    for index, line in enumerate(lines):
        if HEADER.fullmatch(line):
            columns = [(m.start(), int(m.group(1))) for m in re.finditer(r"head (\d+)", line)]
        elif (found := LAYER.match(line)) and columns:
            for column, head in columns:
                assert (int(found.group(1)), head) not in places, f"layer {found.group(1)} head {head} twice"
                places[(int(found.group(1)), head)] = (index, column)
    return places


def check_head_grid(lines: list[str], grid: HeadGrid) -> None:
    """Every map sits under its header, whole, and every line of its label directly under it,
    in the map's own columns."""
    layers, heads, queries, _ = grid.maps.shape
    places = head_grid_places(lines)
    assert set(places) == {(layer, head) for layer in range(layers) for head in range(heads)}, places
    for (layer, head), (first, column) in places.items():
        for row in range(queries):
            want = shades(grid.maps[layer, head, row])
            got = lines[first + row][column : column + len(want)].ljust(len(want))
            assert got == want, f"layer {layer} head {head}, query {row}: {got!r} under its header"
        for offset, label in enumerate(grid.label(layer, head).splitlines()):
            line = lines[first + queries + offset]
            assert line[column : column + len(label)] == label, (layer, head, label, line)
            assert line[column - 1 : column].strip() == "", f"{label!r} does not start its column"
            assert line[column + len(label) : column + len(label) + 1].strip() == "", line


def check_number_table(lines: list[str], table: NumberTable) -> None:
    """Each row of the table is one line, its cells whole and in order."""
    split = [[cell.strip() for cell in line.split("│")] for line in lines if "│" in line]
    for row in range(len(table.rows)):
        cells = [table.cell(row, column) for column in range(len(table.columns))]
        assert cells in split, f"row {cells} is not one whole line of {table.title!r}"


def check_markers(lines: list[str], charts: list[LineChart]) -> None:
    """In the legends of the screen's charts, each series name has one marker, and two names
    never share one."""
    names = {name for chart in charts for name in chart.series}
    seen: dict[str, set[str]] = {name: set() for name in names}
    for line in lines:
        for name in names:
            for found in re.finditer(rf"(?:^|   )(\S) {re.escape(name)}(?=   |$)", line):
                seen[name].add(found.group(1))
    assert all(len(markers) == 1 for markers in seen.values()), seen
    assert len({marker for markers in seen.values() for marker in markers}) == len(names), seen


def check_screen(lines: list[str], maps: AttentionMaps, width: int) -> None:
    wide = [line for line in lines if cell_len(line) > width]
    assert not wide, f"lines wider than {width}: {wide[:3]}"
    cut = [line for line in lines if "…" in line]
    assert not cut, f"cut at {width} columns: {cut[:3]}"
    for found in maps.figures:
        if isinstance(found, HeadGrid):
            check_head_grid(lines, found)
        elif isinstance(found, NumberTable):
            check_number_table(lines, found)
    check_markers(lines, [found for found in maps.figures if isinstance(found, LineChart)])


def test_every_lesson_from_3_to_14_draws_pictures():
    assert [CATALOG.by_module(m).number for m in WITH_PICTURES] == list(range(3, 15))


@pytest.mark.parametrize("module", WITH_PICTURES)
def test_the_map_screen_reads_at_80_and_at_120_columns(module):
    maps = screen_of(SOLUTIONS, module)
    assert maps.problem == "" and maps.figures_problem == "", (maps.problem, maps.figures_problem)
    for width in WIDTHS:
        check_screen(rendered(maps_screen(maps), width), maps, width)


def role_grid(heads: int = 4, queries: int = 10) -> HeadGrid:
    previous = np.eye(queries, k=-1)
    previous[0, 0] = 1.0
    maps = np.stack([[previous, np.eye(queries)] * (heads // 2)] * 2)
    labels = tuple(
        tuple(
            f"{role}\nconf 0.{layer}{head}"
            for head, role in enumerate(["positional -1", "copy"] * (heads // 2))
        )
        for layer in range(2)
    )
    return HeadGrid("roles", maps, labels)


@pytest.mark.parametrize("width, bands", [(120, 1), (80, 2), (40, 4)])
def test_a_head_grid_puts_as_many_heads_side_by_side_as_fit(width, bands):
    grid = role_grid()
    lines = rendered(figure(grid), width)
    assert max(cell_len(line) for line in lines) <= width and not any("…" in line for line in lines)
    check_head_grid(lines, grid)
    headers = [line for line in lines if HEADER.fullmatch(line)]
    assert len(headers) == (1 if bands == 1 else 2 * bands)  # one band: the header once
    assert all(line.count("head ") == 4 // bands for line in headers)


def test_a_number_table_wraps_a_header_rather_than_cut_a_cell():
    table = NumberTable(
        "measured",
        ("head", "role (card)", "loss change", "accuracy before", "importance", "imp. step"),
        (
            ("L0 H1", "positional -1", 0.957, 0.046, 0.286, 4),
            ("L1 H2", "positional +0", 0.031, 0.5, 0.156, 2),
        ),
        ("", "", "+.3f", ".3f", ".3f", "d"),
    )
    wide, narrow = rendered(figure(table), 120), rendered(figure(table), 64)
    assert any("accuracy before" in line for line in wide)  # room enough: headers on one line
    assert not any("accuracy before" in line for line in narrow)
    assert any("accuracy" in line for line in narrow) and any("before" in line for line in narrow)
    for lines, width in ((wide, 120), (narrow, 64)):
        assert max(cell_len(line) for line in lines) <= width and not any("…" in line for line in lines)
        check_number_table(lines, table)


def test_a_number_table_too_wide_for_the_console_is_written_as_records():
    table = NumberTable("wide", ("name", "value"), (("a" * 30, "b" * 30),))
    lines = rendered(figure(table), 40)
    assert f"name: {'a' * 30}" in lines and f"value: {'b' * 30}" in lines
