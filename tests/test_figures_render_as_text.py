"""The picture kinds a lesson can ask for by data (a grid of labelled per-head maps over layers,
a line chart, a table of numbers) render to readable text without colour."""

import numpy as np
from rich.console import Console

from course.engine.pictures.figures import HeadGrid, LineChart, NumberTable
from course.engine.pictures.shapes import ShapeTrace
from course.render.pictures import figure, shape_trace_table


def text_of(renderable) -> str:
    console = Console(record=True, width=100, color_system=None)
    console.print(renderable)
    return console.export_text()


def previous_token(t: int = 4) -> np.ndarray:
    weights = np.zeros((t, t))
    weights[0, 0] = 1.0
    for row in range(1, t):
        weights[row, row - 1] = 1.0
    return weights


def test_a_head_grid_shows_every_layer_and_head_with_its_label_under_its_map():
    uniform = np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]
    maps = np.stack([[previous_token(), uniform, np.eye(4)], [uniform, np.eye(4), previous_token()]])
    labels = (("prev-token", "uniform", "self"), ("uniform", "self", "prev-token"))
    text = text_of(figure(HeadGrid("Head roles", maps, labels)))
    lines = text.splitlines()
    assert lines[0].startswith("Head roles")
    assert all(f"head {h}" in lines[1] for h in range(3))
    assert "layer 0" in text and "layer 1" in text and "layer 2" not in text
    assert text.count("prev-token") == 2 and text.count("self") == 2 and text.count("uniform") == 2
    # the label sits under its own map: layer 0's first column ends with "prev-token"
    first = next(i for i, line in enumerate(lines) if "layer 0" in line)
    label_row = next(i for i in range(first, len(lines)) if "prev-token" in lines[i])
    assert label_row - first == 4  # four query rows of the map, then the label
    assert lines[label_row].index("prev-token") < lines[label_row].index("uniform")
    # a full weight is the darkest shade: layer 0, head 0 looks one token back
    assert lines[first].split("layer 0")[1].lstrip().startswith("@@")
    assert lines[first + 1].lstrip().startswith("@@") and lines[first + 2].lstrip().startswith("@@")
    assert lines[first + 2].index("@@") == lines[first + 1].index("@@") + 2


def chart_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if "│" in line]


def y_labels(rows: list[str]) -> dict[int, float]:
    """Plot row -> the value labelled at its left, for the rows that carry a label."""
    return {i: float(row.split("│")[0]) for i, row in enumerate(rows) if row.split("│")[0].strip()}


def read_off(rows: list[str], row: int) -> tuple[float, float]:
    """The value a reader reads at ``row`` between the labels, and the value of one row."""
    labels = y_labels(rows)
    (first, top), (second, below) = sorted(labels.items())[:2]
    per_row = (top - below) / (second - first)
    return top - (row - first) * per_row, per_row


def test_a_line_chart_puts_each_point_at_its_height_and_column():
    pruned = (0, 1, 2, 3, 4, 5)
    accuracy = (0.95, 0.94, 0.94, 0.90, 0.70, 0.40)
    chart = LineChart(
        "Accuracy as heads are pruned", pruned, {"accuracy": accuracy}, "heads pruned", "accuracy"
    )
    text = text_of(figure(chart))
    rows = chart_rows(text)
    assert "Accuracy as heads are pruned" in text and "heads pruned" in text and "● accuracy" in text
    # the y axis: labels at even steps, every few rows, the first row and the last labelled,
    # covering the values
    labels = y_labels(rows)
    assert len(labels) >= 3 and 0 in labels and len(rows) - 1 in labels
    places, values = sorted(labels), [labels[i] for i in sorted(labels)]
    assert len({b - a for a, b in zip(places, places[1:], strict=False)}) == 1
    assert len({round(a - b, 9) for a, b in zip(values, values[1:], strict=False)}) == 1
    assert values[0] >= 0.95 and values[-1] <= 0.4
    plot = [row.split("│", 1)[1] for row in rows]
    columns = [[i for i, ch in enumerate(row) if ch == "●"] for row in plot]
    # each point reads off the axis as its value, to half a row
    heights = {c: row for row, cs in enumerate(columns) for c in cs}
    for value, column in zip(accuracy, sorted(heights), strict=True):
        read, per_row = read_off(rows, heights[column])
        assert abs(read - value) <= per_row / 2 + 1e-9, (value, read)
    # the highest point (0 pruned) leftmost, the lowest (5 pruned) rightmost
    assert [heights[c] for c in sorted(heights)] == sorted(heights.values())  # falls left to right
    ticks = text.splitlines()[text.splitlines().index(next(r for r in text.splitlines() if "└" in r)) + 1]
    assert ticks.split() == ["0", "1", "2", "3", "4", "5"]
    # each tick stands under its points
    assert ticks.index("5") == max(heights) + len(rows[-1].split("│")[0]) + 1


def test_a_rising_series_has_its_highest_point_in_the_right_column_and_every_series_a_marker():
    chart = LineChart("loss and accuracy", (1, 2, 3, 4), {"rising": (0.1, 0.2, 0.5, 0.9), "flat": (0.3,) * 4})
    text = text_of(figure(chart))
    plot = [row.split("│", 1)[1] for row in chart_rows(text)]
    top = next(row for row in plot if row.strip())
    assert top.strip() == "●" and top.index("●") == max(r.rfind("●") for r in plot)
    assert sum("▲" in row for row in plot) == 1 and next(r for r in plot if "▲" in r).count("▲") == 4
    assert "● rising" in text and "▲ flat" in text


def test_points_of_two_series_in_one_cell_are_drawn_side_by_side():
    chart = LineChart("two orders", (0, 1, 2), {"first": (1.0, 0.5, 0.0), "second": (1.0, 0.2, 0.0)})
    plot = [row.split("│", 1)[1] for row in chart_rows(text_of(figure(chart)))]
    assert sum("●▲" in row for row in plot) == 2  # both 1.0 and both 0.0: neither hides the other
    assert sum(row.count("●") for row in plot) == 3 and sum(row.count("▲") for row in plot) == 3


def test_the_charts_of_one_screen_give_a_series_name_the_same_marker_and_two_names_two():
    from course.render.pictures import series_markers

    before = LineChart("before", (1, 2), {"mean": (0.1, 0.9), "modulo": (0.1, 0.2)})
    after = LineChart("after", (1, 2), {"mha": (0.9, 0.9), "mean": (0.5, 0.8)})
    markers = series_markers([before, NumberTable("t", ("a",), ((1,),)), after])
    assert markers == {"mean": "●", "modulo": "▲", "mha": "■"}
    assert "■ mha   ● mean" in text_of(figure(after, markers))


def test_a_chart_wider_than_the_console_narrows_its_columns_and_keeps_its_ticks_apart():
    chart = LineChart("many points", tuple(range(1000, 1030)), {"flat": (0.5,) * 30})
    console = Console(record=True, width=60, color_system=None)
    console.print(figure(chart))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 60
    ticks = lines[lines.index(next(r for r in lines if "└" in r)) + 1].split()
    assert ticks[0] == "1000" and all(len(t) == 4 for t in ticks) and 2 <= len(ticks) < 30


def test_a_number_table_shows_its_columns_and_each_value_in_its_format():
    table = NumberTable(
        "Head importance",
        ("layer", "head", "importance", "role"),
        ((0, 1, 0.123456, "prev-token"), (1, 3, float("nan"), "")),
        ("d", "d", ".3f", ""),
    )
    text = text_of(figure(table))
    assert "Head importance" in text
    header = next(line for line in text.splitlines() if "importance" in line and "layer" in line)
    assert [cell.strip() for cell in header.split("┃")] == ["layer", "head", "importance", "role"]
    cells = [[cell.strip() for cell in line.split("│")] for line in text.splitlines() if "│" in line]
    assert cells == [["0", "1", "0.123", "prev-token"], ["1", "3", "NaN", ""]]


def test_the_shape_trace_title_shows_the_lessons_own_sizes():
    trace = ShapeTrace(
        rows=[("w_q", "two_head_weights", "(D, D)", "(D, D)", True)], sizes={"D": 22, "HK": 22}
    )
    assert "Shapes through your code (D=22)" in text_of(shape_trace_table(trace))
