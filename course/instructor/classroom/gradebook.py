"""Grade a folder of submission bundles in parallel and write the gradebook (CSV) and a report.

Bundles are graded by forked grading processes, one per core, that take them from a shared
counter (``class_stream``: each bundle opened into its own temporary folder, its lesson files
loaded ahead in the engine's sandboxed workers and graded in one pytest session per process).
A bad bundle becomes a row with its problem; a bundle whose process died is graded again once
by a new one. Grading never stops early. Notebook submissions go through a pool of forked
processes, one submission per task (``notebook_submissions``). Once every submission is graded,
files that are the same code as a reference solution or as another bundle's (up to formatting
and comments) are flagged on their rows (``similarity``).

Every output is written whatever a row holds: each text a submission gave is written made safe
(``safe_text``: a lone surrogate or an undecodable file name once left a header-only gradebook),
and a row that cannot be written is one that says so, never the end of the file.
"""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from course import __version__
from course.content.catalog import Lesson
from course.engine.grading import forked
from course.engine.sandbox import cgroups
from course.instructor.classroom import class_stream, literals, shards, similarity
from course.instructor.classroom.safe_text import safe_text
from course.instructor.classroom.shards import Shard

if TYPE_CHECKING:
    from course.instructor.classroom.notebook_submissions import NotebookSubmission


def submissions_in(folder: Path, shard: Shard | None = None) -> int:
    """How many submissions ``folder`` holds (of ``shard``, if given): bundles, else notebook
    submissions."""
    from course.instructor.classroom import notebook_submissions

    def held(name: str) -> bool:
        return shard is None or shard.holds(name)

    bundles = bundles_in(folder)
    if bundles:
        return sum(held(path.name) for path in bundles)
    return sum(held(job.key) for job in notebook_submissions.submissions_in(folder))


def bundles_in(folder: Path) -> list[Path]:
    """The ``*.zip`` files of ``folder`` (not hidden), sorted by name."""
    return sorted(
        p
        for p in folder.iterdir()
        if p.suffix.lower() == ".zip" and not p.name.startswith(".") and not p.is_dir()
    )


def max_points(lessons: Sequence[Lesson]) -> dict[str, int]:
    """Each lesson's number of checks, counted by grading its reference solution (else its
    pristine skeleton): this also fills the grading process's remembered oracles and property
    examples (``course.engine.testing.memo``, ``course.engine.grading.replay``) before the pool
    forks from it, as the warm grader's warm-up does."""
    from course.engine.grading.runner import grade

    counts = {}
    for lesson in lessons:
        result = grade(lesson, lesson.reference.parent)
        counts[lesson.module] = sum(len(e.checks) for e in result.exercises)
    return counts


def grade_bundle(path: str, modules: Sequence[str], same: bool = False) -> dict:
    """One gradebook row (with full results) for one bundle, graded in this process as a
    class's grading process grades each of its bundles (``class_stream``). ``same``: a lesson
    whose files are byte for byte those of a bundle graded before here gets that grade again."""
    rows: list[dict] = []
    take_once = partial(next, iter([0]), None)  # this bundle's index, then None
    class_stream.Ahead([path], modules, take_once, lambda index, row: rows.append(row), same=same).run()
    return rows[0]


@dataclass
class Report:
    rows: list[dict]
    max_points: dict[str, int]
    workers: int
    seconds: float
    inputs: str = field(default_factory=lambda: inputs_graded())
    shard: str = ""  # "K/N" when one shard of a class (``shards``); "" for a whole class


def inputs_graded() -> str:
    """Which inputs this process grades: "public", or "secret <identity>" (an instructor's)."""
    from course.engine.testing import secret

    return f"secret {secret.identity()}" if secret.in_use() else "public"


def grade_folder(
    folder: Path,
    lessons: Sequence[Lesson],
    workers: int | None = None,
    on_row: Callable[[dict, int, int], None] | None = None,
    same: bool = True,
    shard: Shard | None = None,
) -> Report:
    """Grade every submission of ``folder`` (its bundles, else its notebooks:
    ``notebook_submissions``) with ``workers`` processes (default: the cores). ``same``: lesson
    files of bundles identical to ones graded before in the same grading process get that grade
    again; False grades every bundle in full. ``shard``: only the submissions of that shard
    (``shards``). The flags of ``similarity`` and ``literals`` are problems of their rows, and
    kept under ``flags`` too (a feedback file leaves them out)."""
    from course.instructor.classroom import notebook_submissions

    started = time.monotonic()
    folder = Path(folder).absolute()  # its bundles are opened by processes that change folder
    workers = max(1, workers or os.cpu_count() or 1)
    modules = [lesson.module for lesson in lessons]
    paths = [str(path) for path in bundles_in(folder) if shard is None or shard.holds(path.name)]
    # Counting the points grades each solution here first: the grading processes, forked from
    # this one, start with pytest, hypothesis, numpy, the grading tests and what they remember
    # already loaded.
    points = max_points(lessons)
    if paths:
        rows = _grade_bundles(paths, modules, workers, same, on_row)
        ordered = [rows[path] for path in paths]
    else:
        found = notebook_submissions.submissions_in(folder)
        jobs = {job.key: job for job in found if shard is None or shard.holds(job.key)}
        rows = _grade_notebooks(jobs, modules, workers, on_row)
        ordered = [rows[key] for key in jobs]
    flag(ordered, lessons)
    return Report(ordered, points, workers, time.monotonic() - started, shard=str(shard or ""))


def flag(rows: Sequence[dict], lessons: Sequence[Lesson]) -> None:
    """Flag the rows whose code is the same as a reference or as another row's
    (``similarity``) or holds data (``literals``): problems of the rows, and kept under
    ``flags`` too (a feedback file leaves them out). Flags made before are taken away first,
    so that rows graded apart (shards) are flagged as one class."""
    for row in rows:
        before = set(row.pop("flags", []))
        row["problems"] = [problem for problem in row["problems"] if problem not in before]
        row.pop("similar", None)
    unflagged = [len(row["problems"]) for row in rows]
    similarity.flag(rows, lessons)
    literals.flag(rows, lessons)
    for row, count in zip(rows, unflagged, strict=True):
        if row["problems"][count:]:
            row["flags"] = row["problems"][count:]


def merge(paths: Sequence[Path]) -> Report:
    """One class's report from its shards' JSON reports (``shards``): their rows, sorted by
    file as one run sorts them, flagged across all; refused (``ShardError``) when the shards
    were not graded alike or do not make one class."""
    from course.content.catalog import load_catalog

    reports = shards.load_reports(paths)
    shards.check_alike(reports)
    if reports[0].get("course_version") != __version__:
        raise shards.ShardError(
            f"the shards were graded with course {reports[0].get('course_version')!r}, this is "
            f"{__version__}: merge with the version that graded them"
        )
    lessons = shards.lessons_of(reports[0], load_catalog())
    rows = sorted((row for report in reports for row in report["submissions"]), key=lambda row: row["file"])
    for row in rows:
        row.pop("total", None)  # written again from the lessons' points
    flag(rows, lessons)
    seconds = max(float(report.get("seconds") or 0) for report in reports)
    workers = sum(int(report.get("workers") or 0) for report in reports)
    return Report(rows, reports[0]["max_points"], workers, seconds, inputs=str(reports[0].get("inputs", "")))


def _grade_bundles(
    paths: list[str],
    modules: list[str],
    workers: int,
    same: bool,
    on_row: Callable[[dict, int, int], None] | None,
) -> dict[str, dict]:
    """Every bundle's row, graded by ``workers`` forked processes (``class_stream``). A
    bundle whose row never came (its process died, with every bundle it had taken) is graded
    again once, by a process of its own: a bundle that kills its grader twice takes no other
    bundle's grade with it."""
    rows: dict[str, dict] = {}

    def arrived(path: str, row: dict) -> None:
        rows[path] = row
        if on_row:
            on_row(row, len(rows), len(paths))

    _one_round(paths, modules, min(workers, len(paths)), same, arrived)
    for path in [path for path in paths if path not in rows]:
        _one_round([path], modules, 1, same, arrived)
        if path not in rows:
            arrived(path, _crashed(path, "a grading process died twice on this submission"))
    return rows


def _one_round(
    paths: list[str], modules: list[str], processes: int, same: bool, arrived: Callable[[str, dict], None]
) -> None:
    """Grade ``paths`` in ``processes`` forked grading processes sharing one counter; each
    sends its rows back as they are finished (``course.engine.grading.forked``)."""
    shared = class_stream.Shared(len(paths))
    window = class_stream.window_for(len(modules), processes)

    def grade_taken(send: forked.Send) -> None:
        def emit(index: int, row: dict) -> None:
            send([index, row])

        class_stream.Ahead(
            paths, modules, shared.take, emit, same=same, window=window, processes=processes
        ).run()

    def received(value: object) -> None:
        if isinstance(value, list) and len(value) == 2:
            index, row = value
            if isinstance(index, int) and 0 <= index < len(paths) and isinstance(row, dict):
                arrived(paths[index], row)

    forked.fork_each(processes, grade_taken, received)
    cgroups.sweep()  # a grading process a submission killed left its submission's group behind


def _grade_notebooks(
    jobs: dict[str, NotebookSubmission],
    modules: list[str],
    workers: int,
    on_row: Callable[[dict, int, int], None] | None,
) -> dict[str, dict]:
    from course.instructor.classroom import notebook_submissions

    rows: dict[str, dict] = {}
    attempts = dict.fromkeys(jobs, 0)
    pending = list(jobs)
    while pending:
        forked = multiprocessing.get_context("fork")  # warm copies of this process (see above)
        with ProcessPoolExecutor(max_workers=min(workers, len(pending)), mp_context=forked) as pool:
            grade = notebook_submissions.grade_submission
            futures = {pool.submit(grade, jobs[key], modules): key for key in pending}
            pending = []
            while futures:
                done, _ = wait(futures, return_when=FIRST_COMPLETED)
                for future in done:
                    key = futures.pop(future)
                    try:
                        rows[key] = future.result()
                    except BrokenProcessPool:  # a pool process died: retry once in a new pool
                        attempts[key] += 1
                        if attempts[key] < 2:
                            pending.append(key)
                            continue
                        rows[key] = _crashed(key, "a grading process died twice on this submission")
                    except Exception as error:
                        rows[key] = _crashed(key, f"{type(error).__name__}: {error}")
                    if on_row:
                        on_row(rows[key], len(rows), len(jobs))
    return rows


def _crashed(path: str, why: str) -> dict:
    row = class_stream.new_row(Path(path).name)
    class_stream.failed(row, why)
    return row


def exit_code(report: Report) -> int:
    """`course grade`'s exit code: 0 when every row was graded without a problem, 1 when some
    row needs a look (a problem or a flag), 2 when the grader itself failed on some row."""
    if any(row.get("outcome") == class_stream.CRASHED for row in report.rows):
        return 2
    return 1 if any(row.get("problems") for row in report.rows) else 0


def summary(report: Report) -> list[str]:
    """What `course grade` says of the class once it is graded: the rows that need a look."""
    troubled = sum(bool(row.get("problems")) for row in report.rows)
    alike = sum(bool(row.get("similar")) for row in report.rows)
    failed = sum(row.get("outcome") == class_stream.CRASHED for row in report.rows)
    lines = [f"{troubled} with problems (see the problems column)." if troubled else "No problems found."]
    if alike:
        lines.append(f"{alike} with the same code as a reference solution or another submission (flagged).")
    if failed:
        lines.append(
            f"The grader itself failed on {failed} ({class_stream.CRASHED}): not the submission's "
            "fault. Grade the folder again; if it fails again, please report it."
        )
    return lines


def total(row: dict) -> int:
    return sum(entry["points"] for entry in row["lessons"].values())


def spreadsheet_cell(value: object) -> object:
    """A CSV cell: a number as it is; text made safe (``safe_text``: one line, controls
    escaped) and never starting a spreadsheet formula (=, +, -, @): it gets a quote."""
    if value is None or isinstance(value, int | float):
        return value  # csv writes None as an empty cell
    text = safe_text(value)
    if text[:1] in ("=", "+", "-", "@"):  # a leading tab or CR is escaped already
        return "'" + text
    return text


def write_csv(report: Report, out: Path) -> None:
    """One row per submission: file, name, version, inputs (``Report.inputs``), outcome, per
    lesson status and points,
    total, maximum and problems (joined with " | "). Text cells never start a formula; a row
    that cannot be written is one that says so (``_unwritable``), and the others are written."""
    modules = list(report.max_points)
    header = ["file", "name", "course_version", "inputs", "outcome"]
    for module in modules:
        header += [f"{module} status", f"{module} points (of {report.max_points[module]})"]
    header += ["total", "max_total", "problems"]
    most = sum(report.max_points.values())
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8", errors="backslashreplace") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for row in report.rows:
            try:
                cells = [row["file"], row["name"], row["course_version"], report.inputs, row["outcome"]]
                for module in modules:
                    entry = row["lessons"].get(module)
                    cells += [entry["status"], entry["points"]] if entry else ["", 0]
                cells += [total(row), most, " | ".join(row["problems"])]
            except Exception as error:  # a malformed row: said on its own line
                file, name, version, outcome, why = _unwritable(row, error)
                cells = [
                    file,
                    name,
                    version,
                    report.inputs,
                    outcome,
                    *[""] * (2 * len(modules)),
                    0,
                    most,
                    why,
                ]
            writer.writerow([spreadsheet_cell(cell) for cell in cells])


def _unwritable(row: object, error: Exception) -> list[str]:
    """file, name, version, outcome and problem of a row that cannot be written as it is."""
    got = row if isinstance(row, dict) else {}
    why = f"this row could not be written: {type(error).__name__}: {error}"
    return [safe_text(got.get("file", ""))[:200], "", "", class_stream.CRASHED, safe_text(why)[:500]]


def _json_safe(value: object) -> object:
    """``value`` with every text made safe (``safe_text``; newlines kept, keys one line)."""
    if isinstance(value, dict):
        return {safe_text(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return safe_text(value, lines=True)


def report_dict(report: Report) -> dict:
    submissions = []
    for row in report.rows:
        try:
            submissions.append(_json_safe(dict(row, total=total(row))))
        except Exception as error:  # a malformed row: said on its own entry
            file, _, _, outcome, why = _unwritable(row, error)
            submissions.append(
                {"file": file, "outcome": outcome, "lessons": {}, "problems": [why], "total": 0}
            )
    return {
        "course_version": __version__,
        "inputs": report.inputs,
        **({"shard": report.shard} if report.shard else {}),
        "graded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "workers": report.workers,
        "seconds": round(report.seconds, 2),
        "max_points": report.max_points,
        "submissions": submissions,
    }


def write_json(report: Report, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report_dict(report), indent=2) + "\n", encoding="utf-8")
