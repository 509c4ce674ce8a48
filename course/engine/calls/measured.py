"""Memory measured by the grader: the measured call, what it gives back, and the baseline it counts from.

``learner_module.LearnerModule.measure`` hands over to ``measure_call``, which runs a call in a
worker of its own and reads that worker's peak resident memory from the kernel. The peak is
counted above a blank worker's, started the same way (``blank_resident``): numpy loaded, nothing
of the learner's. The debug run's stand-in (``debug.InProcessModule.measure``) returns the same
``Measurement`` without a worker.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from course.engine.calls.errors import LearnerError
from course.engine.calls.replies import SharedInputs
from course.engine.sandbox.landlock import landlock_abi
from course.engine.sandbox.limits import Limits
from course.engine.sandbox.process import Worker
from course.engine.wire import messages


@dataclass(frozen=True)
class Measurement:
    """One call measured by the grader (``learner_module.LearnerModule.measure``): what it
    returned, the peak of the worker's resident memory above a blank worker's (numpy loaded,
    nothing of the learner's) from before the module was imported to the call's reply (an
    import that computes answers ahead is counted), and the wall time from sending the call
    to reading its reply."""

    result: Any
    peak_bytes: int
    seconds: float
    import_bytes: int = 0  # the peak of the module's import, above a blank worker's (counted)


# (memory limit, forked) -> (resident size, peak resident since the worker started)
_BLANK_RESIDENT: dict[tuple[int, bool], tuple[int, int]] = {}


def _files_of(worker: Worker) -> list[bytes]:
    """The contents of the worker's two files (its output and its inputs memfds), read through
    the grader's own descriptors: data learner code writes there is outside its resident
    memory, so ``_written`` counts it."""
    contents = []
    for fd in (worker.output, worker.inputs):
        try:
            contents.append(os.pread(fd, os.fstat(fd).st_size, 0))
        except OSError:
            contents.append(b"")
    return contents


def _written(before: list[bytes], after: list[bytes]) -> int:
    """The bytes of the worker's files that changed or were added between two readings."""
    import numpy as np

    total = 0
    for old, new in zip(before, after, strict=True):
        common = min(len(old), len(new))
        same = np.frombuffer(old, np.uint8, common) == np.frombuffer(new, np.uint8, common)
        total += int(common - np.count_nonzero(same)) + max(0, len(new) - len(old))
    return total


def blank_resident(limits: Limits, forked: bool) -> tuple[int, int] | None:
    """(resident memory, its peak since the start) of a measured worker that imported an empty
    module, started as ``forked`` says (by the zygote, else exec'd): what a call's and an
    import's figures in a worker started that way count from. Measured once per grading
    process and kind, in a worker of its own; None when a worker of that kind cannot be had
    now (no zygote)."""
    key = (limits.memory_bytes, forked)
    if key not in _BLANK_RESIDENT:
        folder = Path(tempfile.mkdtemp(prefix="course-blank-"))
        (folder / "course_blank.py").write_text("", encoding="utf-8")
        worker = Worker(folder, measured=True, may_fork=forked)
        try:
            if worker.forked != forked:
                return None
            worker.load(folder, "course_blank", limits)
            if not worker.wait_imported(time.monotonic() + 30).get("ok"):
                raise RuntimeError("the grader could not start a worker to measure memory")
            _BLANK_RESIDENT[key] = worker.memory()
        except (EOFError, TimeoutError, OSError, messages.ProtocolError) as problem:
            raise RuntimeError(
                f"the grader could not start a worker to measure memory: {problem!r}"
            ) from None
        finally:
            worker.kill()
            worker.close_files()
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
    return _BLANK_RESIDENT[key]


def _peak_or_zero(worker: Worker) -> int:
    try:
        return worker.memory()[1]
    except OSError:  # gone: the call that follows says so
        return 0


class _Measurable(Protocol):
    """What ``measure_call`` uses of a ``learner_module.LearnerModule`` (not imported here: it
    imports this module)."""

    limits: Limits
    scratch: Path
    worker: Worker | None
    meter: Worker | None
    meter_import: int
    inputs: SharedInputs | None

    def start(self, spare: Worker | None = None) -> Worker: ...

    def import_report(self) -> dict: ...

    def retire(self, worker: Worker) -> None: ...

    def call(self, name: str, args: tuple, kwargs: dict, trace: bool = False) -> Any: ...


def measure_call(module: _Measurable, name: str, args: tuple, kwargs: dict) -> Measurement:
    """Call ``name(*args, **kwargs)`` in a worker of its own whose memory the grader reads
    from the kernel, never from the worker: the high-water mark of its resident memory is
    reset (``/proc/<pid>/clear_refs``) just before the call and read (``VmHWM``) just after
    the reply. That worker may not start other processes (its keeper forbids fork and
    exec), so everything the learner's code holds is in that one figure. ``peak_bytes``
    counts from a blank worker's resident size, so it includes what the learner's module
    keeps between calls and the call's inputs; see ``testing.check_peak_below``.

    Raises like an ordinary call; a RuntimeError if this machine cannot measure soundly
    (no Landlock, so learner code could reset the mark itself)."""
    usual = module.worker
    meter = module.meter if module.meter is not None and module.meter.running() else None
    if meter is None:
        # The blank figure is taken before the meter is told to load: its import's time limit
        # counts from then (``Worker.loaded_at``), not while a blank worker starts beside it.
        meter = Worker(module.scratch, measured=True)
        blank = blank_resident(module.limits, meter.forked)
        if blank is None:  # forked, and no blank forked worker can be had now: exec both
            meter.kill()
            meter.close_files()
            meter = Worker(module.scratch, measured=True, may_fork=False)
            blank = blank_resident(module.limits, False)
        module.start(meter)  # loaded as any worker is
        module.meter_import = -1  # its import's figure, read once it has imported
    else:
        blank = blank_resident(module.limits, meter.forked)
    assert blank is not None  # an exec'd worker is always exec'd, and its figure taken
    module.worker = meter
    try:
        report = module.import_report()
        if module.meter_import < 0 and module.worker is meter:
            # Never reset before: the peak since the worker started, its import included, and
            # what the import printed.
            printed = len(_files_of(meter)[0])
            module.meter_import = max(0, _peak_or_zero(meter) - blank[1]) + printed
        # The worker's report can say it is not confined, never that it is: its claim is
        # written after the learner's module ran, so the kernel is asked here too.
        if report.get("ok") and not (report.get("sandbox") and landlock_abi() > 0):
            raise RuntimeError(
                "Memory cannot be measured on this machine: its Linux kernel has no Landlock, "
                "without which the code measured could reset its own measurement."
            )
        if module.worker is meter:  # else the import failed and call() raises for it
            try:
                meter.reset_peak()
            except OSError:
                module.retire(meter)
                raise LearnerError(
                    f"The grader could not measure the memory of {name}: the process running "
                    "your code no longer lets it (did your code change its own process "
                    "settings, e.g. with prctl?)."
                ) from None
        held_before = _files_of(meter)
        start = time.monotonic()
        try:
            result = module.call(name, args, kwargs)
        except LearnerError as problem:
            if problem.kind in ("PermissionError", "BlockingIOError") and "not permitted" in problem.text:
                raise LearnerError(
                    f"{problem}\n(While its memory is measured, {name} may not start other "
                    "processes nor keep data outside its own memory: compute the result in the "
                    "function itself.)",
                    {"type": problem.kind, "message": problem.text},
                ) from None
            raise
        seconds = time.monotonic() - start
        if module.worker is not meter:
            raise LearnerError(f"The process running {name} ended before its memory could be read.")
        try:
            _, peak = meter.memory()
        except OSError:
            module.retire(meter)
            raise LearnerError(f"The process running {name} ended before its memory could be read.") from None
        # What the call printed, or wrote into its inputs' file, is memory too, outside its
        # resident count (memfds): counted here, from the grader's own descriptors.
        inputs = held_before[1] if module.inputs is None else module.inputs.as_written(held_before[1])
        written = _written([held_before[0], inputs], _files_of(meter))
        imported = max(0, module.meter_import)
        return Measurement(result, max(peak - blank[0] + written, imported, 0), seconds, imported)
    finally:
        module.meter = module.worker if module.worker is meter else None
        module.worker = usual if usual is not None and usual is not meter else None
