"""Confine the worker with Linux Landlock before any learner code runs.

Landlock lets an unprivileged process give up rights for itself and its descendants. The worker
keeps the right to read (Python, numpy, the learner's own files) but may create, write, truncate,
rename or delete no file anywhere (``/dev/null`` aside): it writes only through the descriptors
the grader gave it (its output and its inputs file), so what it can write is bounded by their
size limit and nothing it does can swap a file the grader uses. Where the kernel supports it
(Landlock ABI 4 and 6), it also may not open TCP connections nor signal processes outside itself.

A worker grading a class's submission also gives up reading (``restrict_reads``): it may read
only Python, the libraries, the engine's own modules and the submission's folder, so never the
course's reference solutions, its grading tests nor another student's submission.

On kernels without Landlock ``confine`` returns 0 and the worker runs unconfined (the rest of the
grader's defences still hold); ``restrict_reads`` returns 0 and the worker refuses to grade.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import struct
from collections.abc import Iterable
from pathlib import Path

_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_PR_SET_NO_NEW_PRIVS = 38
_RULE_PATH_BENEATH = 1
_CREATE_RULESET_VERSION = 1

_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_REMOVE_DIR, _REMOVE_FILE = 1 << 4, 1 << 5
_MAKE = sum(1 << bit for bit in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
_REFER, _TRUNCATE, _IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

# What a worker that grades a submission may read besides Python and its libraries.
_SYSTEM_READABLE = (
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/lib64",
    "/etc/ld.so.cache",
    "/dev/null",
    "/dev/zero",
    "/dev/urandom",
    "/sys/devices/system/cpu",
)


@functools.cache  # a CDLL makes a class each time; a zygote's workers inherit this one
def _libc() -> tuple[ctypes.CDLL, tuple[int, int, int]] | None:
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc, numbers


def prepare() -> None:
    """Open the C library now (in the zygote), for every worker forked from here."""
    _libc()


def landlock_abi() -> int:
    """The Landlock ABI this kernel offers (0: none), asked here, in the grader's own process:
    what a worker reports of its confinement is learner code's word."""
    return _abi()


def _abi() -> int:
    found = _libc()
    if found is None:
        return 0
    libc, (create, _, _) = found
    return max(0, int(libc.syscall(create, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)))


def _restrict(attr: bytes, rules: Iterable[tuple[str, int]]) -> bool:
    """Create a ruleset of ``attr`` (struct landlock_ruleset_attr), allow each (path, rights)
    of ``rules`` beneath that path (a path that cannot be opened is skipped) and restrict this
    process with it. True on success."""
    found = _libc()
    if found is None:
        return False
    libc, (create, add_rule, restrict) = found
    buffer = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(create, buffer, ctypes.c_size_t(len(attr)), 0)
    if ruleset < 0:
        return False
    try:
        for path, allowed in rules:
            try:
                target = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, target), 12)
                if libc.syscall(add_rule, ruleset, _RULE_PATH_BENEATH, rule, 0) < 0:
                    return False
            finally:
                os.close(target)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        return bool(libc.syscall(restrict, ruleset, 0) == 0)
    finally:
        os.close(ruleset)


def confine() -> int:
    """Forbid this process to write any file but ``/dev/null`` (it keeps the descriptors it
    holds), to use ioctl on a device it opens (a terminal), to open TCP connections and to
    signal outside itself, as far as the kernel's Landlock goes; returns the Landlock ABI
    used, 0 for none."""
    abi = _abi()
    if abi <= 0:
        return 0
    access = _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE
    access |= (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0) | (_IOCTL_DEV if abi >= 5 else 0)
    if abi >= 6:
        attr = struct.pack(
            "=QQQ", access, _NET_BIND_TCP | _NET_CONNECT_TCP, _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL
        )
    elif abi >= 4:
        attr = struct.pack("=QQ", access, _NET_BIND_TCP | _NET_CONNECT_TCP)
    else:
        attr = struct.pack("=Q", access)
    null = _WRITE_FILE | (_TRUNCATE if abi >= 3 else 0)
    return abi if _restrict(attr, [("/dev/null", null)]) else 0


def restrict_reads(paths: Iterable[str]) -> int:
    """Forbid this process to read or run any file but those beneath ``paths`` (see
    ``readable_paths``); returns the Landlock ABI used, 0 if reads could not be restricted."""
    abi = _abi()
    if abi <= 0:
        return 0
    rules = []
    for path in paths:
        rights = _EXECUTE | _READ_FILE | (_READ_DIR if os.path.isdir(path) else 0)
        rules.append((path, rights))
    attr = struct.pack("=Q", _EXECUTE | _READ_FILE | _READ_DIR)
    return abi if _restrict(attr, rules) else 0


def readable_paths(source_dir: Path) -> list[str]:
    """What a worker grading ``source_dir`` (a submission) needs to read: the standard library,
    the installed libraries (numpy), the engine's own modules, the submission, the system's
    shared libraries; and never the rest of the course (its reference solutions, grading
    tests, tiny model), wherever it is installed. A root that holds something hidden is
    allowed entry by entry around it."""
    found = list(_readable_everywhere())
    if os.path.exists(source_dir):
        for path in _around(os.path.realpath(source_dir), _hidden()):
            if path not in found:
                found.append(path)
    return found


def _hidden() -> set[str]:
    package = Path(__file__).resolve().parents[2]
    return {str(package), str(package.parent / "solutions"), str(package.parent / "tests")}


@functools.cache
def _readable_everywhere() -> tuple[str, ...]:
    """``readable_paths`` without the submission: the same for every submission a process
    grades, so worked out once (a class's grading asks for it per lesson of every bundle)."""
    import sysconfig

    import numpy

    engine = Path(__file__).resolve().parents[1]
    hidden = _hidden()
    roots = [sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    numpy_dir = Path(numpy.__file__).resolve().parent
    roots += [str(numpy_dir), str(numpy_dir.parent / "numpy.libs"), str(engine)]
    roots += _SYSTEM_READABLE
    found: list[str] = []
    for root in roots:
        if os.path.exists(root):
            real = os.path.realpath(root)
            for path in _around(real, hidden if real != str(engine) else set()):
                if path not in found:
                    found.append(path)
    return tuple(found)


def _around(root: str, hidden: set[str], depth: int = 0) -> list[str]:
    """``root`` if nothing in ``hidden`` is beneath it, else its entries (each taken around
    ``hidden`` in turn); nothing of a hidden path itself."""
    inside = {path for path in hidden if path == root or path.startswith(root.rstrip("/") + "/")}
    if not inside:
        return [root]
    if root in inside or depth > 12 or not os.path.isdir(root):
        return []
    found = []
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return []
    for name in entries:
        real = os.path.realpath(os.path.join(root, name))
        if real.startswith(root.rstrip("/") + "/"):  # a link out of ``root`` is not followed
            found += _around(real, hidden, depth + 1)
    return found
