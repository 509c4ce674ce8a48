"""`course bench N`: time a passing lesson's function against the reference and torch."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from course.cli.common import fail, lesson_named, open_session, show
from course.cli.options import LessonArgument, WorkspaceOption


def bench(
    lesson: LessonArgument,
    sizes: Annotated[
        str | None,
        typer.Option(metavar="LIST", help="Sequence lengths, e.g. 128,512 (lesson 9: cache lengths)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    workspace: WorkspaceOption = None,
) -> None:
    """Time your function of a passed lesson (6, 8, 9, 13) against the reference and PyTorch."""
    from course.bench import run

    session = open_session(workspace)
    try:
        report = run.run_bench(session, lesson_named(session.catalog, lesson), sizes)
    except run.BenchProblem as problem:  # exit 2 for a usage error, 1 for a refusal
        fail(str(problem), 2 if isinstance(problem, run.BadSizes) else 1)
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        from course.render.bench import bench_screen

        show(bench_screen(report))


def register(app: typer.Typer) -> None:
    app.command()(bench)
