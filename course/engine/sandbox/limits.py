"""Resource limits for learner code, enforced from outside the worker (documented in README)."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

# The linear algebra libraries on one thread, in every process that grades or runs learner
# code: grades are then repeatable, and a check does not take every core of the machine.
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# An experiment (``course experiment``, see ``engine.pictures.experiments``) calls the learner's
# code for minutes, not seconds: one call is one chunk of training, the run the whole experiment.
EXPERIMENT_CALL_SECONDS = 120.0
EXPERIMENT_RUN_SECONDS = 1800.0

_NAMES = {"call": "call_seconds", "import": "import_seconds", "run": "run_seconds", "memory": "memory_bytes"}
_UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3}


@dataclass(frozen=True)
class Limits:
    """Resource limits for learner code, enforced from outside the worker (documented in README).

    ``keep_freed_memory``: the worker's C library keeps freed blocks up to 32 MiB for reuse
    instead of handing them back to the system (``worker.allocator``), which makes a numpy
    training step, allocating the same large arrays again every step, much faster."""

    import_seconds: float = 10.0
    call_seconds: float = 5.0
    run_seconds: float = 60.0
    memory_bytes: int = 2 * 1024**3
    keep_freed_memory: bool = False

    @classmethod
    def from_env(cls) -> Limits:
        """The defaults, shortened by ``COURSE_LIMITS`` (``call=1,import=2,run=20,memory=512M``).

        For the project's own tests of hostile code, which would otherwise wait out the full
        limits. A value can only tighten a limit, never loosen it; malformed entries are ignored.
        """
        return cls().tightened(os.environ.get("COURSE_LIMITS", ""))

    @classmethod
    def for_experiments(cls) -> Limits:
        """An experiment's limits: a call may take ``EXPERIMENT_CALL_SECONDS`` and the whole run
        ``EXPERIMENT_RUN_SECONDS``; import and memory as usual; freed memory kept for reuse.
        ``COURSE_LIMITS`` tightens these as it does the defaults."""
        raised = cls(
            call_seconds=EXPERIMENT_CALL_SECONDS, run_seconds=EXPERIMENT_RUN_SECONDS, keep_freed_memory=True
        )
        return raised.tightened(os.environ.get("COURSE_LIMITS", ""))

    def tightened(self, text: str) -> Limits:
        """These limits with each entry of ``text`` (``COURSE_LIMITS``' syntax) that is lower
        applied; higher, unknown or malformed entries change nothing."""
        changes: dict[str, float | int] = {}
        for entry in filter(None, (part.strip() for part in text.split(","))):
            key, _, raw = entry.partition("=")
            field = _NAMES.get(key.strip())
            if field is None:
                continue
            try:
                value = _memory(raw) if field == "memory_bytes" else float(raw)
            except (ValueError, KeyError):
                continue
            if 0 < value < getattr(self, field):
                changes[field] = value
        return replace(self, **changes)  # type: ignore[arg-type]


def _memory(raw: str) -> int:
    """``512M``, ``2G``, ``4096``: bytes."""
    raw = raw.strip().upper()
    return int(float(raw[:-1]) * _UNITS[raw[-1]]) if raw[-1:] in _UNITS else int(raw)
