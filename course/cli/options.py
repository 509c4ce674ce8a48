"""The typer side that the command modules share: the app's settings and the options and
arguments several commands declare. Only the typer app imports this (course.cli.commands);
``course.cli.quick`` runs the learner's everyday commands without it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

WorkspaceOption = Annotated[
    str | None,
    typer.Option(
        "--workspace",
        "-w",
        envvar="COURSE_WORKSPACE",
        metavar="DIR",
        help="The workspace folder (default: found from the current folder).",
    ),
]
LessonArgument = Annotated[str, typer.Argument(help="3, 03, l03_attention or attention.")]
LessonsOption = Annotated[
    str | None,
    typer.Option("--lessons", metavar="LIST", help="Comma-separated lessons, e.g. 1,2,3 (default: all)."),
]

# What a graded class is written to (`course grade`, `course gradebook merge`).
GradebookOption = Annotated[Path, typer.Option("--out", metavar="FILE", help="The CSV gradebook.")]
JsonReportOption = Annotated[
    Path | None, typer.Option("--json", metavar="FILE", help="Also write a JSON report.")
]
JunitOption = Annotated[Path | None, typer.Option("--junit", metavar="FILE", help="Also write JUnit XML.")]
NbgraderCsvOption = Annotated[
    Path | None,
    typer.Option("--nbgrader-csv", metavar="FILE", help="Also write scores as nbgrader export does."),
]
FeedbackOption = Annotated[
    Path | None,
    typer.Option(
        "--feedback",
        metavar="DIR",
        help="Also write one Markdown feedback file per submission into DIR (ada.zip: DIR/ada.md).",
    ),
]


def new_app(name: str, help: str) -> typer.Typer:
    """A typer app configured as every `course` app is: plain help, no completion, no rich
    tracebacks (a learner never sees one of ours)."""
    return typer.Typer(
        name=name,
        help=help,
        no_args_is_help=True,
        add_completion=False,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
    )
