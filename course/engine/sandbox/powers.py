"""Root without powers: a worker started with capabilities gives up every one of them.

Learners run as root in VMs, WSL and some containers, and root's capabilities reach past every
other confinement (bpf, perf_event_open, ptrace of the learner's own shell, typing into its
terminal). Before anything of the learner's runs, a worker that holds any capability locks the
securebits that would give root its powers back on exec, empties its bounding set, clears its
ambient set and sets its effective, permitted and inheritable sets to nothing (``drop``); the
grader reads the result from ``/proc`` on its side (``held``), never from the worker's word.
Standard library only: every keeper loads it, on the critical path of a cold check.
"""

from __future__ import annotations

import ctypes

_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
_PR_CAPBSET_DROP, _PR_SET_SECUREBITS, _PR_CAP_AMBIENT, _AMBIENT_CLEAR_ALL = 24, 28, 47, 4
# SECBIT_NOROOT, SECBIT_NO_SETUID_FIXUP, SECBIT_KEEP_CAPS_LOCKED and SECBIT_NO_CAP_AMBIENT_RAISE,
# each with its lock: uid 0 gains nothing by exec, nor by changing uid.
_SECUREBITS = 0b11101111
_CAPABILITY_VERSION_3 = 0x20080522


def held(pid: int | str = "self") -> dict[str, int] | None:
    """The capability sets of process ``pid`` as /proc tells them (CapInh, CapPrm, CapEff,
    CapBnd, CapAmb), or None when they cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            lines = status.read().splitlines()
    except OSError:
        return None
    found = {}
    for line in lines:
        name, _, value = line.partition(":")
        if name in _FIELDS:
            try:
                found[name] = int(value.strip(), 16)
            except ValueError:
                return None
    return found if len(found) == len(_FIELDS) else None


def powerless(caps: dict[str, int] | None, privileged: bool) -> bool:
    """No capability in effect, permitted or ambient; for a worker started ``privileged`` (its
    grader holds capabilities), none in its bounding set either. A process that never held
    one cannot empty its bounding set, and with no_new_privs (the seccomp filter) gains none."""
    if caps is None:
        return False
    names = ("CapEff", "CapPrm", "CapAmb", "CapBnd") if privileged else ("CapEff", "CapPrm", "CapAmb")
    return not any(caps[name] for name in names)


def privileged() -> bool:
    """Whether this process holds any capability (root, or a capable container's user)."""
    caps = held()
    return caps is None or bool(caps["CapEff"] or caps["CapPrm"])


def drop(libc: ctypes.CDLL) -> bool:
    """Give up every capability this process holds, for good (see the module); True when it
    holds none afterwards, bounding set included, or never held one."""
    if not privileged():
        return powerless(held(), False)
    libc.prctl(_PR_SET_SECUREBITS, _SECUREBITS, 0, 0, 0)
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as last:
            top = int(last.read().strip())
    except (OSError, ValueError):
        top = 63
    for capability in range(top + 1):
        libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0)
    libc.prctl(_PR_CAP_AMBIENT, _AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two structs of effective, permitted, inheritable: all empty
    libc.capset(ctypes.byref(header), ctypes.byref(data))
    return powerless(held(), True)
