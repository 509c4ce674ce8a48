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
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from course import __version__
from course.catalog import Lesson, load_catalog
from course.instructor import similarity
from course.instructor.submissions import disagreements, lesson_summary, open_bundle

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
    """Each lesson's number of checks, counted by grading its pristine skeleton (fast: every
    check stops at the first NotImplementedError)."""
    from course.engine.runner import grade

    counts = {}
    for lesson in lessons:
        result = grade(lesson, lesson.skeleton.parent)
        counts[lesson.module] = sum(len(e.checks) for e in result.exercises)
    return counts


def grade_bundle(path: str, modules: Sequence[str]) -> dict:
    """One gradebook row (with full results) for one bundle. Runs in a pool process; any
    failure of the grader itself becomes a problem on the row."""
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
        _grade_into(row, Path(path), folder, modules)
    except Exception as error:  # the grader's own failure: reported, never fatal
        row["outcome"] = CRASHED
        row["problems"].append(
            f"the grader failed on this bundle: {type(error).__name__}: {str(error)[:200]}"
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return row


def _grade_into(row: dict, path: Path, folder: Path, modules: Sequence[str]) -> None:
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
        result = grade(lesson, folder, sealed=True)  # reads nothing but its own bundle
        summary = lesson_summary(result)
        full = result.to_dict()
        full["output"] = full["output"][-500:]
        row["lessons"][module] = dict(summary, result=full)
    row["problems"] += disagreements(opened.claimed, row["lessons"])


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
) -> Report:
    """Grade every submission of ``folder`` (its bundles, else its notebooks: ``notebook_grading``)
    with ``workers`` processes (default: the cores)."""
    from course.instructor import notebook_grading

    started = time.monotonic()
    workers = max(1, workers or os.cpu_count() or 1)
    modules = [lesson.module for lesson in lessons]
    jobs: dict[str, tuple[Callable[..., dict], object]] = {
        str(path): (grade_bundle, str(path)) for path in bundles_in(folder)
    }
    if not jobs:
        jobs = {
            found.key: (notebook_grading.grade_submission, found)
            for found in notebook_grading.submissions_in(folder)
        }
    rows = _grade_all(jobs, modules, workers, on_row)
    ordered = [rows[key] for key in jobs]
    similarity.flag(ordered, lessons)
    return Report(ordered, max_points(lessons), workers, time.monotonic() - started)


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
        with ProcessPoolExecutor(max_workers=min(workers, len(pending))) as pool:
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
