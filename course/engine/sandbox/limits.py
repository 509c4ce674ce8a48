"""Resource limits for learner code, enforced from outside the worker (documented in README)."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

# The linear algebra libraries on one thread, in every process that grades or runs learner
# code: grades are then repeatable, and a check does not take every core of the machine.
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass(frozen=True)
class Limits:
    """Resource limits for learner code, enforced from outside the worker (documented in README)."""

    import_seconds: float = 10.0
    call_seconds: float = 5.0
    run_seconds: float = 60.0
    memory_bytes: int = 2 * 1024**3

    @classmethod
    def from_env(cls) -> Limits:
        """The defaults, shortened by ``COURSE_LIMITS`` (``call=1,import=2,run=20,memory=512M``).

        For the project's own tests of hostile code, which would otherwise wait out the full
        limits. A value can only tighten a limit, never loosen it; malformed entries are ignored.
        """
        limits = cls()
        text = os.environ.get("COURSE_LIMITS", "")
        names = {
            "call": "call_seconds",
            "import": "import_seconds",
            "run": "run_seconds",
            "memory": "memory_bytes",
        }
        changes: dict[str, float | int] = {}
        for entry in filter(None, (part.strip() for part in text.split(","))):
            key, _, raw = entry.partition("=")
            field = names.get(key.strip())
            if field is None:
                continue
            try:
                if field == "memory_bytes":
                    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
                    raw = raw.strip().upper()
                    value: float | int = (
                        int(float(raw[:-1]) * units[raw[-1]]) if raw[-1:] in units else int(raw)
                    )
                else:
                    value = float(raw)
            except (ValueError, KeyError):
                continue
            if 0 < value < getattr(limits, field):
                changes[field] = value
        return replace(limits, **changes)  # type: ignore[arg-type]
