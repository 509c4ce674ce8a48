"""Keep freed memory for reuse: the C library's allocator settings of an experiment's worker.

glibc hands a freed block back to the system at once when it was mapped on its own (every block
above the mmap threshold, 128 KiB at first) and trims the heap's free top above the trim
threshold. A numpy training step allocates and frees the same large arrays every step, so each
step pays for fresh pages from the kernel again: a numpy training step measured 1.43x the time of
a PyTorch step with glibc's defaults, 0.8x with both thresholds at 32 MiB (the ceiling of glibc's
own dynamic mmap threshold on 64-bit systems; some glibc versions refuse a larger one, 2.36
accepts it). The worker calls ``keep_freed_memory`` before it imports the learner's module when
its limits ask for it (``Limits.keep_freed_memory``); a benchmark calls the same function to time
what the worker runs.

It only changes parameters inside the C library (no system call of its own), so the worker's
seccomp filter has nothing to refuse; the memory limit (RLIMIT_AS) still counts what is kept.
Standard library only.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
KEPT_BYTES = 32 * 1024**2  # both thresholds (see above: safe for every glibc on 64-bit)


def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds to ``KEPT_BYTES`` in this process. True when both
    were accepted; False, changing nothing else, on a C library without ``mallopt`` (musl,
    macOS) or one that refused a value."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    mapped = mallopt(M_MMAP_THRESHOLD, KEPT_BYTES) == 1  # mallopt returns 1 on success, 0 on error
    trimmed = mallopt(M_TRIM_THRESHOLD, KEPT_BYTES) == 1
    return mapped and trimmed
