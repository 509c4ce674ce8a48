"""`course gradebook ...`: one class graded in shards on several machines.

`merge` makes one gradebook of the shards' JSON reports (`course grade --shard K/N --json`);
`github-actions` and `kubernetes` write the files that run the shards on those engines
(``course.instructor.classroom.engines``). Exit codes: merge as `course grade` (0 no row needs
a look, 1 some row does, 2 a usage error); the writers 0, or 2 for a usage error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from course.cli.common import fail, lessons_named, show
from course.cli.options import (
    FeedbackOption,
    GradebookOption,
    JsonReportOption,
    JunitOption,
    LessonsOption,
    NbgraderCsvOption,
    new_app,
)

gradebook_app = new_app("gradebook", "One class graded in shards: merge them, or run them on an engine.")
ShardsOption = Annotated[int, typer.Option("--shards", min=1, max=256, help="How many shards (N).")]


@gradebook_app.command()
def merge(
    reports: Annotated[
        list[Path],
        typer.Argument(metavar="REPORT.json...", help="The shards' `course grade --json` reports."),
    ],
    out: GradebookOption = Path("gradebook.csv"),
    report: JsonReportOption = None,
    junit: JunitOption = None,
    nbgrader_csv: NbgraderCsvOption = None,
    feedback_dir: FeedbackOption = None,
) -> None:
    """Merge the shards of one class into one gradebook, flagging similar code across all."""
    from course.instructor.classroom import gradebook, outputs
    from course.instructor.classroom.shards import ShardError

    try:
        merged = gradebook.merge(reports)
    except ShardError as problem:
        fail(f"{problem}.")
    written = outputs.write_all(merged, out, report, junit, nbgrader_csv, feedback_dir)
    show(
        f"Merged {len(reports)} reports: {len(merged.rows)} submissions. Wrote {', '.join(written)}.",
        *gradebook.summary(merged),
    )
    raise typer.Exit(gradebook.exit_code(merged))


@gradebook_app.command("github-actions")
def github_actions(
    folder: Annotated[Path, typer.Argument(help="The repository that holds the submissions.")],
    shards: ShardsOption = 2,
    submissions: Annotated[
        str, typer.Option(metavar="DIR", help="The submissions' folder, from the repository's root.")
    ] = "submissions",
    install: Annotated[str, typer.Option(help="The command that installs the course on the runner.")] = "",
    lessons: LessonsOption = None,
) -> None:
    """Write .github/workflows/grade-class.yml: one job per shard, then a merge job."""
    from course import __version__
    from course.content.catalog import load_catalog
    from course.instructor.classroom import engines

    if folder.exists() and not folder.is_dir():
        fail(f"{folder} exists and is not a folder.")
    chosen = lessons_named(load_catalog(), lessons)
    command = install or f"python -m pip install attention-course=={__version__}"
    path = folder / ".github" / "workflows" / "grade-class.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(engines.github_actions(chosen, shards, submissions, command), encoding="utf-8")
    show(f"Wrote {path}: {shards} shard jobs, then one merge job; run it from the Actions tab.")


@gradebook_app.command()
def kubernetes(
    out: Annotated[Path, typer.Argument(metavar="FILE", help="The Job manifest to write.")],
    image: Annotated[str, typer.Option(help="A container image with the course installed.")],
    shards: ShardsOption = 2,
    claim: Annotated[
        str, typer.Option(help="The volume claim holding submissions/ (and, once done, shards/).")
    ] = "course-class",
    name: Annotated[str, typer.Option(help="The Job's name.")] = "course-grade",
    lessons: LessonsOption = None,
) -> None:
    """Write an indexed Job: pod K-1 (JOB_COMPLETION_INDEX) grades shard K of N."""
    from course.content.catalog import load_catalog
    from course.instructor.classroom import engines

    if out.is_dir():
        fail(f"{out} is a folder: name the manifest file to write.")
    chosen = lessons_named(load_catalog(), lessons)
    out.write_text(engines.kubernetes_job(chosen, shards, image, claim, name), encoding="utf-8")
    show(
        f"Wrote {out}: an indexed Job of {shards} pods (pod K-1 grades shard K).",
        "Then merge from the volume: course gradebook merge shards/shard-*.json --out gradebook.csv",
    )


def register(app: typer.Typer) -> None:
    """Add the `gradebook` group to the main `course` app."""
    app.add_typer(gradebook_app, name="gradebook")
