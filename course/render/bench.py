"""The screen of `course bench N`: a table of the timed rows, the machine's matmul rate (the
roofline), and the advice line. Returns rich objects; nothing here prints."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from course.bench.advice import FULL, TORCH, Row
from course.bench.run import BenchReport


def _megabytes(peak: int | None) -> str:
    return "" if peak is None else f"{peak / 1e6:.1f} MB"


def _impl(row: Row) -> str:
    name = {TORCH: row.function.removeprefix("torch "), FULL: "full matrix"}.get(row.impl, row.impl)
    return f"{name} *" if row.probe else name


def bench_screen(report: BenchReport) -> RenderableType:
    """The rows as a table (median time, GFLOP/s and its share of the matmul rate, peak memory
    where measured), then what the numbers mean and what would make the learner's faster."""
    lesson = report.lesson
    functions = ", ".join(dict.fromkeys(row.function for row in report.rows if row.impl != TORCH))
    table = Table(
        title=f"Lesson {lesson.id} · {functions}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("size", no_wrap=True)
    table.add_column("code")
    table.add_column("ms", justify="right")
    table.add_column("GFLOP/s", justify="right")
    table.add_column("of matmul", justify="right")
    memory = any(row.peak_bytes is not None for row in report.rows)
    if memory:
        table.add_column("peak", justify="right")
    for row in report.rows:
        share = row.gflops / report.matmul_gflops if report.matmul_gflops > 0 else 0.0
        cells = [row.size, _impl(row), f"{row.ms:.2f}", f"{row.gflops:.1f}", f"{share:.0%}"]
        table.add_row(*cells, *([_megabytes(row.peak_bytes)] if memory else []))
    lines = [
        f"ms: the median of the timed calls. This machine's float32 matmul runs at "
        f"{report.matmul_gflops:.1f} GFLOP/s: the roofline, the most any of these can reach.",
    ]
    if any(row.probe for row in report.rows):
        lines.append("* a few tokens, then 4x the heads: how time grows with H (read by the advice).")
    if memory:
        lines.append("full matrix: lesson 3's scaled_dot_product_attention (the reference's).")
        lines.append("peak: what Python allocated during one call (tracemalloc), beyond the inputs.")
    if report.torch_version is None:
        lines.append("PyTorch is not installed: `pip install torch` adds its rows.")
    else:
        lines.append(f"torch {report.torch_version}, on one thread.")
    lines.append("Your timings are taken in the process that runs your code: a bench, not a grade.")
    return Group(
        table,
        *(Text(line, style="dim") for line in lines),
        Text("▸ ", style="bold cyan") + Text(report.advice),
    )
