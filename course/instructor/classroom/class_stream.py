"""Grade a class's bundles as a stream: each grading process opens bundles a few ahead, loads
their lesson modules in workers of their own at once, and grades whichever is ready first.

Grading lesson after lesson would wait for each module's import in turn, and a module that
loops at import would hold the grader for the whole import limit. Here a grading process (one
per core, forked from the warm process that counted the points) takes bundles from a shared
counter (``Shared``) while fewer than ``window`` lesson modules are loading or loaded ahead of
it; each lesson of a taken bundle gets a worker that starts importing at once (``Ahead``). The
grades run in one pytest session (``course.engine.grading.one_session``), and the next one is
always a module whose import is over: finished, or past its limit. So one module's endless
import costs its own limit in the background while the others are graded.

The import limit is the same as in any check, counted from when the worker was told to load:
a module whose import was seen finished before its limit is graded with that import; one seen
unfinished after its limit is graded as over it (``LearnerModule.expire_import``); one whose
import ended unseen, between two looks, is loaded again and waited for, as a check waits.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import multiprocessing
import os
import select
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

from course.content.catalog import load_catalog
from course.engine.calls.learner_module import LearnerModule
from course.engine.grading import blame, one_session
from course.engine.grading.report import oversized_file_result
from course.engine.results import PASSED, LessonResult
from course.engine.sandbox import cgroups, landlock
from course.engine.sandbox.limits import Limits
from course.engine.sandbox.process import Worker
from course.instructor.classroom import lesson_problems, literals, similarity
from course.instructor.classroom.safe_text import safe_text
from course.instructor.classroom.submissions import disagreements, lesson_summary, open_bundle

GRADED, REFUSED, CRASHED, MISSING = "graded", "refused", "grader-failed", "missing"

_GRADED_BEFORE: dict[str, dict] = {}  # content digest -> a lesson's row entry (one grading process)


class Shared:
    """A counter every forked grading process shares: the index of the next bundle to take."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._next = multiprocessing.get_context("fork").Value("l", 0)

    def take(self) -> int | None:
        with self._next.get_lock():
            index = self._next.value
            if index >= self.count:
                return None
            self._next.value = index + 1
            return index


AHEAD_IN_ALL = 48  # lesson modules loaded ahead by all of a machine's grading processes together
SUBMISSION_MEMORY = 6 * 1024**3  # what one submission's workers may hold at once, together
AHEAD_CPU_SECONDS = 0.05  # CPU an import loaded ahead may take before it waits for its turn
WATCH_SECONDS = 0.02  # how often imports loaded ahead are looked at while a module is graded


def submission_limits(lessons: int) -> Limits:
    """Each worker's limits when a submission's ``lessons`` load together and no memory cgroup
    can bound them (``cgroups``): memory is limited per process (RLIMIT_AS), so each gets its
    share of ``SUBMISSION_MEMORY``, one share kept for a lesson's measured worker. A sealed
    worker starts no process (see ``seccomp.forbid_processes``), so its share is all a
    submission's code can hold."""
    limits = Limits.from_env()
    share = SUBMISSION_MEMORY // (lessons + 1)
    return dataclasses.replace(limits, memory_bytes=min(limits.memory_bytes, share))


def window_for(lessons: int, processes: int) -> int:
    """How many lesson modules one of ``processes`` grading processes keeps loaded ahead: those
    of three bundles (at least 6), fewer when many processes share the machine (each holds a
    worker of about 17 MB), never fewer than one bundle's and one more."""
    return max(lessons + 1, min(max(6, 3 * lessons), AHEAD_IN_ALL // processes))


class _Bundle:
    """A bundle being graded: its row, its folder, and how many of its lessons are pending."""

    def __init__(self, index: int, row: dict, folder: Path) -> None:
        self.index, self.row, self.folder = index, row, folder
        self.pending = 0
        self.claimed: dict | None = None  # what its result file says
        self.group: cgroups.SubmissionGroup | None = None  # its workers' memory cgroup, if any


class Ahead:
    """One grading process's bundles: taken, loaded ahead, graded as their imports settle.

    ``take`` gives the next bundle's index in ``paths`` (None: no more); ``emit(index, row)``
    receives each finished row. ``same``: a lesson whose files are byte for byte those of one
    graded before in this process gets that grade again (only a grade another run would give
    again: ``LessonResult.repeatable``). ``window``: how many lesson modules may be loading or
    loaded ahead of their grades (default: ``window_for`` one process)."""

    def __init__(
        self,
        paths: Sequence[str],
        modules: Sequence[str],
        take: Callable[[], int | None],
        emit: Callable[[int, dict], None],
        same: bool = False,
        window: int | None = None,
        processes: int = 1,
    ) -> None:
        self.paths, self.modules, self.take, self.emit = paths, modules, take, emit
        self.same = same
        self.window = window or window_for(len(modules), processes)
        # Costly imports that may run while this process waits: the cores the other grading
        # processes do not need, so that they run beside a grade, never in its way.
        self.running_while_waiting = max(1, (os.cpu_count() or 1) // processes)
        self.catalog = load_catalog()
        self.lessons = [lesson for lesson in map(self.catalog.by_module, modules) if lesson is not None]
        # A memory cgroup per submission where one can be made below ours; else workers that
        # start no process, each with its share of the budget (``submission_limits``).
        probe = cgroups.SubmissionGroup.make(SUBMISSION_MEMORY)
        self.grouped = probe is not None
        if probe is not None:
            probe.close()
        self.limits = Limits.from_env() if self.grouped else submission_limits(len(self.lessons))
        self.groups: list[cgroups.SubmissionGroup] = []
        self.units: list[one_session.Unit] = []  # loading or loaded, in the order taken
        self._turns = threading.Lock()  # held to change units or who runs (``_take_turns``, ``_watch``)
        self._grading = False
        self.open: dict[int, _Bundle] = {}
        self.exhausted = False

    def run(self) -> None:
        """Grade every bundle ``take`` gives; a bundle left unfinished (the session itself
        failed) gets a row that says the grader failed."""
        watching = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(watching,), daemon=True)
        watcher.start()
        try:
            if self.lessons:
                one_session.grade_units(self.lessons, self.next_unit, self.done)
            else:  # no lesson to grade: rows of the bundles' own problems only
                while not self.exhausted:
                    self._take_one()
        finally:
            watching.set()
            watcher.join()
            for unit in self.units:
                unit.learner.close()
            for group in self.groups:
                group.close()  # those whose last worker ended after its submission's row
            for bundle in list(self.open.values()):
                failed(bundle.row, "its grading session ended early")
                self._finish(bundle)

    # -- taking and loading ----------------------------------------------------------------
    def _take_one(self) -> None:
        index = self.take()
        if index is None:
            self.exhausted = True
            return
        path = Path(self.paths[index])
        folder = Path(tempfile.mkdtemp(prefix="course-submission-"))
        row = new_row(path.name)
        bundle = _Bundle(index, row, folder)
        self.open[index] = bundle
        try:
            self._open(bundle, path)
        except Exception as error:  # the grader's own failure: reported, never fatal
            failed(row, f"{type(error).__name__}: {str(error)[:200]}")
            for unit in [unit for unit in self.units if _tag(unit)[0] is bundle]:
                unit.learner.close()
                self.units.remove(unit)
            bundle.pending = 0
        if bundle.pending == 0:
            self._finish(bundle)

    def _open(self, bundle: _Bundle, path: Path) -> None:
        row = bundle.row
        opened = open_bundle(path, bundle.folder, self.catalog)
        claim = opened.claimed or {}
        row["name"] = safe_text(str(claim.get("name", ""))[:80])
        row["course_version"] = safe_text(str(claim.get("course_version", ""))[:40])
        bundle.claimed = opened.claimed
        if opened.refused:
            row["outcome"] = REFUSED
            row["problems"].append(opened.refused)
            return
        row["problems"] += opened.problems
        row["fingerprints"] = similarity.fingerprints(opened.sources, self.lessons)  # before any code runs
        row["helper_fingerprints"] = similarity.helper_fingerprints(opened.helpers)
        row["literals"] = literals.sizes(opened.sources, self.lessons)
        row["helper_literals"] = literals.helper_sizes(opened.helpers)
        if self.grouped:
            bundle.group = cgroups.SubmissionGroup.make(SUBMISSION_MEMORY)
            if bundle.group is None:
                raise RuntimeError("no memory cgroup could be made for this submission")
            self.groups.append(bundle.group)
        for module in self.modules:
            lesson = self.catalog.by_module(module)
            row["lessons"][module] = None  # filled in as graded, in this order
            if lesson is None or lesson.file_name not in opened.files:
                row["lessons"][module] = _missing(module)
                continue
            digest = _content_digest(bundle.folder, module) if self.same else ""
            if digest in _GRADED_BEFORE:
                row["lessons"][module] = json.loads(json.dumps(_GRADED_BEFORE[digest]))
                continue
            oversized = oversized_file_result(lesson, bundle.folder)
            if oversized is not None:
                row["lessons"][module] = _entry(oversized)
                continue
            self.units.append(
                one_session.Unit(
                    lesson,
                    bundle.folder,
                    _sealed(bundle.folder, module, self.limits, bundle.group),
                    tag=(bundle, digest),
                )
            )
            bundle.pending += 1

    # -- choosing the next grade -------------------------------------------------------------
    def _take_turns(self, waiting: bool) -> None:
        """A module loaded ahead imports freely while its import costs little (the course's
        take hundredths of a second). Past ``AHEAD_CPU_SECONDS`` it is paused while another
        module is graded, and while this process waits for imports only the first
        ``running_while_waiting`` such modules in line run: a submission that loops at import
        takes no CPU another's grade needs. A paused import's time limit does not run
        (``Worker.pause``). Called with ``_turns`` held."""
        self._grading = not waiting
        taken = 0
        for unit in self.units:
            worker = unit.learner.workers[-1]
            if worker.import_settled():
                worker.resume()
                continue
            if not worker.paused and not _costly(worker):
                continue
            if waiting and taken < self.running_while_waiting:
                worker.resume()
                taken += 1
            else:
                worker.pause()

    def _watch(self, stop: threading.Event) -> None:
        """While a module is graded, pause every import loaded ahead as soon as it costs more
        than ``AHEAD_CPU_SECONDS`` (between two grades ``_take_turns`` does it too), so that a
        loop at import takes little from the grade running meanwhile. Every unit it looks at
        is one of ``units`` under the lock, so never a closed worker's reused descriptor."""
        while not stop.wait(WATCH_SECONDS):
            with self._turns:
                if not self._grading:
                    continue
                for unit in self.units:
                    worker = unit.learner.workers[-1]
                    if not worker.paused and not worker.import_settled() and _costly(worker):
                        worker.pause()

    def next_unit(self) -> one_session.Unit | None:
        """The first module (in the order taken) whose import is over; waits for one if none
        is, and takes more bundles while fewer than ``window`` modules are ahead."""
        while True:
            with self._turns:
                while not self.exhausted and len(self.units) < self.window:
                    self._take_one()
                if not self.units:
                    return None
                self._take_turns(waiting=True)
                chosen, soonest = self._choose()
                if chosen is not None:
                    self.units.remove(chosen)
                    chosen.learner.workers[-1].resume()
                    self._take_turns(waiting=False)  # the others, while this one is graded
                    return chosen
                waiting_on = [unit.learner.workers[-1] for unit in self.units]
            select.select(waiting_on, [], [], max(0.0, soonest - time.monotonic()))

    def _choose(self) -> tuple[one_session.Unit | None, float]:
        """The unit to grade now, if one is ready (its import over, or past its limit), else
        None and when the soonest limit falls."""
        soonest = float("inf")
        for unit in self.units:
            worker = unit.learner.workers[-1]
            assert worker.loaded_at is not None  # LearnerModule loads as it starts a worker
            if worker.paused:
                continue  # it runs again when first in line
            limit = worker.loaded_at + unit.learner.limits.import_seconds
            before = time.monotonic()
            settled = worker.import_settled()
            after = time.monotonic()
            if settled and after <= limit:
                return unit, soonest  # finished within its limit: graded with that import
            if settled:  # ended unseen between two looks: when, nobody knows; load it again
                unit.learner.close()
                unit.learner = _sealed(unit.source_dir, unit.lesson.module, self.limits, _tag(unit)[0].group)
                return unit, soonest  # its grade waits for the new import, as a check does
            if before >= limit:
                unit.learner.expire_import()
                return unit, soonest
            soonest = min(soonest, limit)
        return None, soonest

    def done(self, unit: one_session.Unit, result: LessonResult | Exception) -> None:
        bundle, digest = _tag(unit)
        if isinstance(result, Exception):
            failed(bundle.row, f"{type(result).__name__}: {str(result)[:200]}")
            bundle.row["lessons"].pop(unit.lesson.module, None)
        else:
            entry = _entry(result)
            bundle.row["lessons"][unit.lesson.module] = entry
            if self.same and result.repeatable():
                _GRADED_BEFORE[digest] = json.loads(json.dumps(entry))
        bundle.pending -= 1
        if bundle.pending == 0:
            self._finish(bundle)

    def _finish(self, bundle: _Bundle) -> None:
        self.open.pop(bundle.index, None)
        row = bundle.row
        row["lessons"] = {module: entry for module, entry in row["lessons"].items() if entry is not None}
        _blame_earlier_lessons(row["lessons"])
        lesson_problems.explain(row)  # why a lesson is "error", timed out, or the row not graded
        if row["outcome"] == GRADED:
            row["problems"] += disagreements(bundle.claimed, row["lessons"])
        row["problems"] = [safe_text(problem) for problem in row["problems"]]  # they quote the bundle
        shutil.rmtree(bundle.folder, ignore_errors=True)
        if bundle.group is not None:
            bundle.group.close(seconds=0)  # empty once its workers have died: else at the end
        self.emit(bundle.index, row)


def new_row(file: str) -> dict:
    """A gradebook row for the bundle ``file`` (its name made safe: a learner chose it), before
    anything of it is read."""
    return {
        "file": safe_text(file),
        "name": "",
        "course_version": "",
        "outcome": GRADED,
        "lessons": {},
        "problems": [],
    }


def failed(row: dict, why: str) -> None:
    """Mark ``row`` as one the grader itself failed on, saying ``why``."""
    row["outcome"] = CRASHED
    row["problems"].append(safe_text(f"the grader failed on this bundle: {why}"))


def _sealed(
    folder: Path, module: str, limits: Limits, group: cgroups.SubmissionGroup | None
) -> LearnerModule:
    """``module`` of a submission's ``folder``, loading at once in a worker that may read nothing
    but its folder and the libraries (``landlock.readable_paths``) and start no process, in
    the submission's memory cgroup where there is one."""
    return LearnerModule(folder, module, limits, readable=landlock.readable_paths(folder), group=group)


def _tag(unit: one_session.Unit) -> tuple[_Bundle, str]:
    """The bundle a unit of this module belongs to, and its lesson's content digest."""
    return cast("tuple[_Bundle, str]", unit.tag)


def _costly(worker: Worker) -> bool:
    """Whether an import loaded ahead has cost more CPU than it may before its turn."""
    return worker.cpu_seconds() > AHEAD_CPU_SECONDS


def _blame_earlier_lessons(entries: dict[str, dict]) -> None:
    """Where a failing check's exercise uses a function of an earlier lesson that fails in the
    same submission, the check says so instead of naming a mistake (``blame.earlier_lessons``)."""
    catalog = load_catalog()
    for module, entry in entries.items():
        if entry.get("result") is None or entry["status"] == PASSED:
            continue
        result, lesson = LessonResult.from_dict(entry["result"]), catalog.by_module(module)
        failing = [m for m in result.uses if m in entries and entries[m]["status"] != PASSED]
        if failing and lesson is not None:
            blame.earlier_lessons(result, lesson, failing)
            entry["result"] = _entry(result)["result"]


def _entry(result: LessonResult) -> dict:
    full = result.to_dict()
    full["output"] = full["output"][-500:]
    return dict(lesson_summary(result), result=full)


def _missing(module: str) -> dict:
    return {
        "lesson": module,
        "status": MISSING,
        "points": 0,
        "max_points": 0,
        "exercises": [],
        "result": None,
    }


def _content_digest(folder: Path, module: str) -> str:
    """What a sealed grade of ``module`` in ``folder`` depends on besides the course: the
    bytes of every file there (a bundle's folder holds only its lesson files and helpers)."""
    digest = hashlib.sha256(f"{module}\0".encode())
    for path in sorted(folder.iterdir()):
        digest.update(f"{path.name}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest() if path.is_file() else b"-")
    return digest.hexdigest()
