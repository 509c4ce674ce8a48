"""Grade a folder of submission bundles in parallel and write the gradebook (CSV) and a report.

Each bundle is opened into its own temporary folder and every lesson file in it is re-graded
with ``course.engine.runner.grade`` (learner code runs only in the engine's sandboxed workers),
in a pool of processes, one bundle per task. A bad bundle becomes a row with its problem; a
pool process that dies is replaced and its bundle retried once. Grading never stops early. Once
every bundle is graded, files that are the same code as a reference solution or as another
bundle's (up to formatting and comments) are flagged on their rows (``similarity``).
"""

from __future__ import annotations

import csv
import hashlib
import json
import multiprocessing
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from course import __version__
from course.catalog import Lesson, load_catalog
from course.instructor import similarity
from course.instructor.submissions import disagreements, lesson_summary, open_bundle

if TYPE_CHECKING:
    from course.engine.processes import Worker

GRADED, REFUSED, CRASHED = "graded", "refused", "grader-failed"
MISSING = "missing"


def submissions_in(folder: Path) -> int:
    """How many submissions ``folder`` holds: bundles, else notebook submissions."""
    from course.instructor import notebook_grading

    return len(bundles_in(folder)) or len(notebook_grading.submissions_in(folder))


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
    examples (``course.engine.memo``, ``course.engine.replay``) before the pool forks from it,
    as the warm grader's warm-up does."""
    from course.engine.runner import grade

    counts = {}
    for lesson in lessons:
        result = grade(lesson, lesson.reference.parent)
        counts[lesson.module] = sum(len(e.checks) for e in result.exercises)
    return counts


def grade_bundle(path: str, modules: Sequence[str], same: bool = False) -> dict:
    """One gradebook row (with full results) for one bundle. Runs in a pool process; any
    failure of the grader itself becomes a problem on the row. ``same``: a lesson whose files
    are byte for byte those of a bundle this process graded before gets that grade again
    (see ``_graded_before``)."""
    row: dict = {
        "file": Path(path).name,
        "name": "",
        "course_version": "",
        "outcome": GRADED,
        "lessons": {},
        "problems": [],
    }
    folder = Path(tempfile.mkdtemp(prefix="course-submission-"))
    try:
        _grade_into(row, Path(path), folder, modules, same)
    except Exception as error:  # the grader's own failure: reported, never fatal
        row["outcome"] = CRASHED
        row["problems"].append(
            f"the grader failed on this bundle: {type(error).__name__}: {str(error)[:200]}"
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return row


_GRADED_BEFORE: dict[str, dict] = {}  # content digest -> a lesson's row entry (one pool process)


def _content_digest(folder: Path, module: str) -> str:
    """What a sealed grade of ``module`` in ``folder`` depends on besides the course: the
    bytes of every file there (a bundle's folder holds only its lesson files)."""
    digest = hashlib.sha256(f"{module}\0".encode())
    for path in sorted(folder.iterdir()):
        digest.update(f"{path.name}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest() if path.is_file() else b"-")
    return digest.hexdigest()


def _grade_into(row: dict, path: Path, folder: Path, modules: Sequence[str], same: bool = False) -> None:
    from course.engine.runner import grade

    catalog = load_catalog()
    opened = open_bundle(path, folder, catalog)
    claim = opened.claimed or {}
    row["name"] = str(claim.get("name", ""))[:80]
    row["course_version"] = str(claim.get("course_version", ""))[:40]
    if opened.refused:
        row["outcome"] = REFUSED
        row["problems"].append(opened.refused)
        return
    row["problems"] += opened.problems
    chosen = [lesson for lesson in map(catalog.by_module, modules) if lesson is not None]
    row["fingerprints"] = similarity.fingerprints(opened.sources, chosen)  # before any code runs
    pending: list[tuple[Lesson, str]] = []  # to grade: the lesson, its content digest
    for module in modules:
        lesson = catalog.by_module(module)
        if lesson is None or lesson.file_name not in opened.files:
            row["lessons"][module] = {
                "lesson": module,
                "status": MISSING,
                "points": 0,
                "max_points": 0,
                "exercises": [],
                "result": None,
            }
            continue
        digest = _content_digest(folder, module) if same else ""
        if digest in _GRADED_BEFORE:
            row["lessons"][module] = json.loads(json.dumps(_GRADED_BEFORE[digest]))
        else:
            pending.append((lesson, digest))
    # Each lesson's worker is started while the lesson before it is graded (none is left over).
    spare: tuple[Worker, Path] | None = _spare_worker() if pending else None
    try:
        for index, (lesson, digest) in enumerate(pending):
            current, spare = spare, (_spare_worker() if index + 1 < len(pending) else None)
            try:
                result = grade(lesson, folder, sealed=True, spare=current)  # reads only its bundle
            finally:
                if current is not None:
                    shutil.rmtree(current[1], ignore_errors=True)  # adopted, or left by a refusal
            summary = lesson_summary(result)
            full = result.to_dict()
            full["output"] = full["output"][-500:]
            row["lessons"][lesson.module] = dict(summary, result=full)
            if same and _repeatable(full):
                _GRADED_BEFORE[digest] = json.loads(json.dumps(row["lessons"][lesson.module]))
    finally:
        if spare is not None:
            spare[0].kill()
            spare[0].close_files()
            shutil.rmtree(spare[1], ignore_errors=True)
    row["problems"] += disagreements(opened.claimed, row["lessons"])


def _spare_worker() -> tuple[Worker, Path]:
    """A blank worker (nothing of any learner's loaded yet) and its own scratch folder."""
    from course.engine.processes import Worker

    scratch = Path(tempfile.mkdtemp(prefix="course-"))
    return Worker(scratch), scratch


def _repeatable(result: dict) -> bool:
    """A grade another run gives again: no time limit reached, no error of the whole lesson."""
    statuses = [check["status"] for e in result["exercises"] for check in e["checks"]]
    return result["status"] not in ("error", "timeout") and "timeout" not in statuses


@dataclass
class Report:
    rows: list[dict]
    max_points: dict[str, int]
    workers: int
    seconds: float


def grade_folder(
    folder: Path,
    lessons: Sequence[Lesson],
    workers: int | None = None,
    on_row: Callable[[dict, int, int], None] | None = None,
    same: bool = True,
) -> Report:
    """Grade every submission of ``folder`` (its bundles, else its notebooks: ``notebook_grading``)
    with ``workers`` processes (default: the cores). ``same``: lesson files of bundles identical
    to ones graded before in the same pool process get that grade again (``grade_bundle``);
    False grades every bundle in full."""
    from course.instructor import notebook_grading

    started = time.monotonic()
    workers = max(1, workers or os.cpu_count() or 1)
    modules = [lesson.module for lesson in lessons]
    jobs: dict[str, tuple[Callable[..., dict], object]] = {
        str(path): (partial(grade_bundle, same=same), str(path)) for path in bundles_in(folder)
    }
    if not jobs:
        jobs = {
            found.key: (notebook_grading.grade_submission, found)
            for found in notebook_grading.submissions_in(folder)
        }
    # Counting the points grades each solution here first: the pool's processes, forked from
    # this one, start with pytest, hypothesis, numpy, the grading tests and what they remember
    # already loaded.
    points = max_points(lessons)
    rows = _grade_all(jobs, modules, workers, on_row)
    ordered = [rows[key] for key in jobs]
    similarity.flag(ordered, lessons)
    return Report(ordered, points, workers, time.monotonic() - started)


def _grade_all(
    jobs: dict[str, tuple[Callable[..., dict], object]],
    modules: list[str],
    workers: int,
    on_row: Callable[[dict, int, int], None] | None,
) -> dict[str, dict]:
    rows: dict[str, dict] = {}
    attempts = dict.fromkeys(jobs, 0)
    pending = list(jobs)
    while pending:
        forked = multiprocessing.get_context("fork")  # warm copies of this process (see above)
        with ProcessPoolExecutor(max_workers=min(workers, len(pending)), mp_context=forked) as pool:
            futures = {pool.submit(jobs[key][0], jobs[key][1], modules): key for key in pending}
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
    return {
        "file": Path(path).name,
        "name": "",
        "course_version": "",
        "outcome": CRASHED,
        "lessons": {},
        "problems": [f"the grader failed on this bundle: {why}"],
    }


def total(row: dict) -> int:
    return sum(entry["points"] for entry in row["lessons"].values())


def spreadsheet_cell(value: object) -> object:
    """Text from a bundle cannot start a spreadsheet formula (=, +, -, @): it gets a quote."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def write_csv(report: Report, out: Path) -> None:
    """One row per submission: file, name, version, outcome, per lesson status and points,
    total, maximum and problems (joined with " | "). Text cells never start a formula."""
    modules = list(report.max_points)
    header = ["file", "name", "course_version", "outcome"]
    for module in modules:
        header += [f"{module} status", f"{module} points (of {report.max_points[module]})"]
    header += ["total", "max_total", "problems"]
    most = sum(report.max_points.values())
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for row in report.rows:
            cells = [row["file"], row["name"], row["course_version"], row["outcome"]]
            for module in modules:
                entry = row["lessons"].get(module)
                cells += [entry["status"], entry["points"]] if entry else ["", 0]
            cells += [total(row), most, " | ".join(row["problems"])]
            writer.writerow([spreadsheet_cell(cell) for cell in cells])


def report_dict(report: Report) -> dict:
    return {
        "course_version": __version__,
        "graded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "workers": report.workers,
        "seconds": round(report.seconds, 2),
        "max_points": report.max_points,
        "submissions": [dict(row, total=total(row)) for row in report.rows],
    }


def write_json(report: Report, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report_dict(report), indent=2) + "\n", encoding="utf-8")
