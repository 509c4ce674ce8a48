"""The instructor's commands: `course submit`, `course grade` and `course classroom`.

``register(app)`` adds them to the main typer app. Exit codes as in ``course.cli.common``: 0 done, 1 done
but something needs the instructor's attention (a bundle with problems), 2 a usage error (and, for
`course grade`, a failure of the grader itself on some row: ``gradebook.exit_code``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from course.cli.common import fail, lessons_named, open_session, show, use_secret
from course.cli.options import (
    FeedbackOption,
    GradebookOption,
    JsonReportOption,
    JunitOption,
    LessonsOption,
    NbgraderCsvOption,
    WorkspaceOption,
)


def submit(
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", metavar="FILE", help="The bundle to write (default: submission-NAME.zip here)."
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="Your name (default: $USER).")] = None,
    lessons: LessonsOption = None,
    workspace: WorkspaceOption = None,
) -> None:
    """Grade your lesson files and pack them, with the helper modules they import and the
    results, into a zip to hand in."""
    from course.instructor.classroom import submissions

    session = open_session(workspace)
    who = submissions.learner_name(name)
    target = out or Path(f"submission-{_safe(who)}.zip")
    try:
        payload = submissions.build_bundle(
            session.workspace.root,
            target,
            session.catalog,
            who,
            lessons=lessons_named(session.catalog, lessons) if lessons else None,
        )
    except submissions.SubmissionProblem as problem:
        fail(str(problem))
    passed = sum(entry["status"] == "passed" for entry in payload["lessons"])
    helpers = payload["helpers"]
    files = f"{len(payload['files']) - len(helpers)} lesson files"
    files += f" and your {', '.join(helpers)}" if helpers else ""
    show(
        f"Wrote {target}: {files} for {who}, {passed} lessons "
        f"passed, {payload['total_points']} of {payload['max_points']} points "
        f"(course {payload['course_version']}). Hand this file in."
    )


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60] or "unknown"


def grade(
    submissions_dir: Annotated[
        Path,
        typer.Argument(
            metavar="SUBMISSIONS_DIR",
            help="A folder of .zip bundles, of .ipynb notebooks, or nbgrader's course or submitted/.",
        ),
    ],
    out: GradebookOption = Path("gradebook.csv"),
    workers: Annotated[
        int | None, typer.Option(min=1, help="Parallel grading processes (default: the number of cores).")
    ] = None,
    report: JsonReportOption = None,
    junit: JunitOption = None,
    nbgrader_csv: NbgraderCsvOption = None,
    lessons: LessonsOption = None,
    fresh: Annotated[
        bool,
        typer.Option(
            "--fresh", help="Grade every bundle in full, even lesson files identical to ones graded before."
        ),
    ] = False,
    secret_file: Annotated[
        Path | None,
        typer.Option(
            "--secret-file",
            metavar="FILE",
            help="Derive every input from the secret in FILE (default: $COURSE_GRADING_SECRET, if set).",
        ),
    ] = None,
    feedback_dir: FeedbackOption = None,
    shard: Annotated[
        str | None,
        typer.Option(
            "--shard",
            metavar="K/N",
            help="Grade only shard K of N (by a stable hash of each file name); merge the shards' "
            "--json reports with `course gradebook merge`.",
        ),
    ] = None,
) -> None:
    """Re-grade every submission (bundles or notebooks) in a folder and write a gradebook.
    Exits 0 when every row was graded without a problem, 1 when some row needs a look, 2 for a
    usage error or when the grader itself failed on a row."""
    from course.content.catalog import load_catalog
    from course.instructor.classroom import gradebook, outputs
    from course.instructor.classroom.safe_text import safe_text
    from course.instructor.classroom.shards import Shard, ShardError

    identity = use_secret(secret_file)
    try:
        part = Shard.parse(shard) if shard else None
    except ShardError as problem:
        fail(f"{problem}.")

    if not submissions_dir.is_dir():
        fail(f"{submissions_dir} is not a folder: name the folder that holds the submissions.")
    if feedback_dir is not None and feedback_dir.exists() and not feedback_dir.is_dir():
        fail(f"{feedback_dir} exists and is not a folder: --feedback names a folder for the feedback files.")
    chosen = lessons_named(load_catalog(), lessons)
    found = gradebook.submissions_in(submissions_dir, part)
    if not found and part is not None and gradebook.submissions_in(submissions_dir):
        show(f"Shard {part} holds none of the submissions in {submissions_dir}.")
    elif not found:
        fail(
            f"No submissions in {submissions_dir}: no .zip bundles (`course submit` makes them), no "
            ".ipynb notebooks, no nbgrader submitted/STUDENT/ASSIGNMENT/*.ipynb."
        )
    count = workers or os.cpu_count() or 1
    show(
        (f"Shard {part}: grading {found} of the submissions" if part else f"Grading {found} submissions")
        + ", lessons "
        f"{', '.join(lesson.id for lesson in chosen)}, with {count} workers, "
        + (f"with an instructor's secret ({identity})." if identity else "on the public inputs.")
    )

    def progress(row: dict, done: int, total: int) -> None:
        """One line per graded submission. Its file name, name and problems are the
        submission's own text: shown made safe (escape sequences, bidi controls and line breaks
        escaped), as plain text (``show``: never markup)."""
        try:
            note = f"  ({row['problems'][0]})" if row["problems"] else ""
            line = f"[{done}/{total}] {row['file']}: {row['outcome']}, {gradebook.total(row)} points{note}"
        except Exception as error:  # a malformed row: said, and the class goes on
            line = f"[{done}/{total}] a row that cannot be shown ({type(error).__name__})"
        show(safe_text(line))

    result = gradebook.grade_folder(submissions_dir, chosen, count, progress, same=not fresh, shard=part)
    written = outputs.write_all(result, out, report, junit, nbgrader_csv, feedback_dir)
    rate = len(result.rows) / result.seconds if result.seconds else 0.0
    show(
        f"Graded {len(result.rows)} submissions in {result.seconds:.1f} s ({rate:.1f} per s). "
        f"Wrote {', '.join(written)}.",
        *gradebook.summary(result),
    )
    raise typer.Exit(gradebook.exit_code(result))


def classroom(
    folder: Annotated[Path, typer.Argument(help="The template repository to write into.")],
    points: Annotated[
        int | None, typer.Option(min=1, help="Points per lesson (default: the lesson's number of checks).")
    ] = None,
    install: Annotated[
        str, typer.Option(help="The command that installs the course on GitHub's runner.")
    ] = "",
    wheel: Annotated[
        Path | None,
        typer.Option(
            help="A wheel of the course to put in the template repository and install from there "
            "(build it in the course's repository: python -m pip wheel --no-deps -w dist .).",
        ),
    ] = None,
    lessons: LessonsOption = None,
) -> None:
    """Write a GitHub Classroom autograding configuration: one test per lesson."""
    from course import __version__
    from course.content.catalog import load_catalog
    from course.instructor.classroom import exports, gradebook

    if folder.exists() and not folder.is_dir():
        fail(f"{folder} exists and is not a folder.")
    if wheel is not None and install:
        fail("Give --wheel or --install, not both: each says how the runner installs the course.")
    if wheel is not None and (not wheel.is_file() or wheel.suffix != ".whl"):
        fail(f"{wheel} is not a wheel file (a .whl).")
    chosen = lessons_named(load_catalog(), lessons)
    counts = {lesson.module: points for lesson in chosen} if points else gradebook.max_points(chosen)
    command = install or f"python -m pip install attention-course=={__version__}"
    if wheel is not None:
        command = f"python -m pip install {exports.add_wheel(folder, wheel)}"
    written = exports.write_classroom(folder, chosen, counts, command)
    show(
        f"Wrote {', '.join(str(path) for path in written)}: {len(chosen)} tests "
        f"(`course check N`), {sum(counts.values())} points in all.",
        "Commit them to the assignment's template repository.",
    )


def register(app: typer.Typer) -> None:
    """Add `submit`, `grade` and `classroom` to the main `course` app."""
    app.command()(submit)
    app.command()(grade)
    app.command()(classroom)
