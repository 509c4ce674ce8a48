"""Memory measured by the grader: what a measured call gives back, and the baseline it counts from.

``client.LearnerModule.measure`` runs a call in a worker of its own and reads that worker's peak
resident memory from the kernel. The peak is counted above a blank worker's, started the same
way (``blank_resident``): numpy loaded, nothing of the learner's. Kept apart from the call path
so that the debug run's stand-in (``debug.InProcessModule.measure``) returns the same
``Measurement`` without the worker machinery.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course.engine import protocol
from course.engine.limits import Limits
from course.engine.processes import Worker


@dataclass(frozen=True)
class Measurement:
    """One call measured by the grader (``client.LearnerModule.measure``): what it returned, the peak
    of the worker's resident memory during the call above a blank worker's (numpy loaded,
    nothing of the learner's), and the wall time from sending the call to reading its reply."""

    result: Any
    peak_bytes: int
    seconds: float


_BLANK_RESIDENT: dict[tuple[int, bool], int] = {}  # (memory limit, forked) -> resident size


def blank_resident(limits: Limits, forked: bool) -> int | None:
    """The resident memory of a measured worker that imported an empty module, started as
    ``forked`` says (by the zygote, else exec'd): what a measurement in a worker started that
    way is counted from. Measured once per grading process and kind, in a worker of its own;
    None when a worker of that kind cannot be had now (no zygote)."""
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
            _BLANK_RESIDENT[key] = worker.memory()[0]
        except (EOFError, TimeoutError, OSError, protocol.ProtocolError) as problem:
            raise RuntimeError(
                f"the grader could not start a worker to measure memory: {problem!r}"
            ) from None
        finally:
            worker.kill()
            worker.close_files()
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
    return _BLANK_RESIDENT[key]
