"""The seccomp filter every worker installs on its side of the keeper's fork, and the C library handle.

``keeper.main`` calls ``install_filter`` in the forked worker before anything of the learner's
runs; ``prepare`` makes the programs once in the zygote, so keepers and workers forked from it
inherit them. Standard library only (``struct`` and ``platform`` loaded when first needed): every
keeper loads it, on the critical path of a cold check.
"""

from __future__ import annotations

import ctypes

# seccomp, per machine: audit arch; calls refused to every worker (socket, socketpair,
# io_uring_setup, memfd_create, memfd_secret, pidfd_getfd; shmget, semget, msgget, mq_open,
# add_key, request_key, keyctl: kernel objects that outlive a process; bpf, perf_event_open,
# userfaultfd, unshare, setns: root's tools against the kernel, and new namespaces); calls
# refused to a measured worker (fork, vfork, execve, execveat on x86_64; execve, execveat on
# aarch64); clone; clone3; ioctl.
_SECCOMP_ARCH = {
    "x86_64": (
        0xC000003E,
        (41, 53, 425, 319, 447, 438, 29, 64, 68, 240, 248, 249, 250, 321, 298, 323, 272, 308),
        (57, 58, 59, 322),
        56,
        435,
        16,
    ),
    "aarch64": (
        0xC00000B7,
        (198, 199, 425, 279, 447, 438, 194, 190, 186, 180, 217, 218, 219, 280, 241, 282, 97, 268),
        (221, 281),
        220,
        435,
        29,
    ),
}
_LOCKS = {"x86_64": (72, 73), "aarch64": (25, 32)}  # fcntl, flock
# Where a measured worker could keep data its resident memory does not show: pipes of its own
# (pipe, pipe2: their buffers), and madvise's page-dropping advice (a mapped library's pages
# dropped make room for as much data unseen). madvise, and its advice values that drop pages:
# DONTNEED, FREE, REMOVE, COLD, PAGEOUT, DONTNEED_LOCKED.
_HIDING = {"x86_64": ((22, 293), 28), "aarch64": ((59,), 233)}
_DROPPING_ADVICE = (4, 8, 9, 20, 21, 24)
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C  # push input into a terminal; the console's own commands
_CLONE_VM, _CLONE_THREAD, _CLONE_NEWUSER = 0x100, 0x10000, 0x10000000


def install_filter(measured: bool) -> bool:
    """Install a seccomp filter for this process, its threads and everything it starts.

    Every worker: no new socket of any family (nor through io_uring), so learner code reaches
    no one (not the warm grader's socket, not the network, TCP or UDP) and talks to the grader
    through its pipes only; no memfd, System V shared memory, semaphore or message queue, POSIX
    message queue or key (memory outside the worker's limits, and some of it outliving the
    check); no descriptor taken from another process; no bpf, perf_event_open or userfaultfd,
    no new namespace (unshare, setns, clone with CLONE_NEWUSER); no ioctl that types into a
    terminal (TIOCSTI: the learner's shell would run it after the check) or drives the console
    (TIOCLINUX). These fail with EPERM; clone3 fails with ENOSYS, so that libc falls back to
    clone, whose flags the filter can read (EPERM would fail glibc's threads).

    A measured worker also may start no process: fork, vfork, exec and a clone without
    CLONE_VM fail with EPERM. A clone with CLONE_VM (a thread, or the first step of
    posix_spawn, whose exec is refused) shares this process's memory. Nor may it hold data
    where its resident memory does not count it: a pipe of its own (pipe, pipe2), or room made
    by dropping pages (madvise's DONTNEED, FREE, REMOVE, COLD, PAGEOUT); madvise's other
    advice, such as populating pages, still works.

    Returns False when the filter cannot be installed (another machine, an old kernel)."""
    return _install(_filter_program(measured))


def forbid_processes() -> bool:
    """Add a filter by which this process may start no other process: fork, vfork, exec and
    a clone without CLONE_THREAD fail with EPERM (a thread still starts); nor take a file lock
    (flock, fcntl's F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW), the one way left for two
    submissions to signal each other through a file both may read. A worker grading a class's
    submission installs it before loading it, so that a submission's processes are its workers
    alone and its memory is bounded by theirs (see ``class_stream``). Filters stack: the
    keeper's stays. False when it cannot be installed."""
    return _install(_filter_program(True, threads_only=True))


def _install(raw: bytes | None) -> bool:
    """Install the seccomp program ``raw`` on this process (False: none here, or refused)."""
    import struct

    if raw is None:
        return False
    program = ctypes.create_string_buffer(raw, len(raw))
    fprog = struct.pack("=HxxxxxxQ", len(raw) // 8, ctypes.addressof(program))
    c_library = libc()
    if c_library.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS, required for an unprivileged filter
        return False
    return bool(c_library.prctl(22, 2, ctypes.c_char_p(fprog), 0, 0) == 0)  # PR_SET_SECCOMP, FILTER


def filters_of(pid: int) -> int:
    """How many seccomp filters process ``pid`` runs under, as /proc tells (0 when unknown)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Seccomp_filters:"):
                    return int(line.split(":")[1])
    except (OSError, ValueError):
        pass
    return 0


# Made once per process (``prepare``): a zygote's keepers and workers inherit them.
_LIBC: list[ctypes.CDLL] = []
_PROGRAMS: dict[tuple[bool, bool], bytes | None] = {}


def libc() -> ctypes.CDLL:
    """This process's C library (ctypes), opened once: each ``ctypes.CDLL`` makes a class."""
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None))
    return _LIBC[0]


def prepare() -> None:
    """Make now what each keeper and worker forked from this process (the zygote) would
    otherwise make again: the C library's handle and both seccomp programs."""
    libc()
    _filter_program(False)
    _filter_program(True)
    _filter_program(True, threads_only=True)


def _filter_program(measured: bool, threads_only: bool = False) -> bytes | None:
    """The seccomp program of ``install_filter`` for this machine (None: no such program
    here), as the kernel reads it: ``struct sock_filter`` after ``struct sock_filter``.
    ``threads_only``: the program of ``forbid_processes`` instead."""
    if (measured, threads_only) in _PROGRAMS:
        return _PROGRAMS[(measured, threads_only)]
    import platform

    machine = _SECCOMP_ARCH.get(platform.machine())
    if machine is None:
        _PROGRAMS[(measured, threads_only)] = None
        return None
    arch, always, processes, clone, clone3, ioctl = machine
    load, jeq, jge, jset = 0x20, 0x15, 0x35, 0x45
    first_argument, second_argument, third_argument = 16, 24, 32  # struct seccomp_data's args (low half)
    code: list[tuple[int, object, object, int]] = [(load, 0, 0, 4), (jeq, 0, "kill", arch), (load, 0, 0, 0)]
    if platform.machine() == "x86_64":
        code.append((jge, "deny", 0, 0x40000000))  # the x32 numbering of the same calls
    if threads_only:
        code += [(jeq, "deny", 0, number) for number in (*processes, _LOCKS[platform.machine()][1])]
        code += [
            (jeq, 0, 5, _LOCKS[platform.machine()][0]),  # fcntl: its lock commands refused
            (load, 0, 0, second_argument),
            (jeq, "deny", 0, 6),  # F_SETLK
            (jeq, "deny", 0, 7),  # F_SETLKW
            (jge, 0, "allow", 37),  # F_OFD_SETLK, F_OFD_SETLKW
            (jge, "allow", "deny", 39),
            (jeq, 0, "allow", clone),
            (load, 0, 0, first_argument),
            (jset, "allow", "deny", _CLONE_THREAD),
        ]
        return _assembled(code, (measured, threads_only))
    code += [(jeq, "deny", 0, number) for number in always]
    if measured:
        pipes, madvise = _HIDING[platform.machine()]
        code += [(jeq, "deny", 0, number) for number in (*processes, *pipes)]
        code += [
            (jeq, 0, len(_DROPPING_ADVICE) + 1, madvise),  # not madvise: on past its advice checks
            (load, 0, 0, third_argument),
            *[(jeq, "deny", 0, advice) for advice in _DROPPING_ADVICE[:-1]],
            (jeq, "deny", "allow", _DROPPING_ADVICE[-1]),
        ]
    code += [
        (jeq, "nosys", 0, clone3),
        (jeq, 0, 3, ioctl),  # not ioctl: on to clone, three instructions on
        (load, 0, 0, second_argument),
        (jeq, "deny", 0, _TIOCSTI),
        (jeq, "deny", "allow", _TIOCLINUX),
        (jeq, 0, "allow", clone),
        (load, 0, 0, first_argument),
        (jset, "deny", 0, _CLONE_NEWUSER),
        # a measured worker's clone must share its memory (a thread); anyone else's may not
        (jset, "allow", "deny" if measured else "allow", _CLONE_VM),
    ]
    return _assembled(code, (measured, threads_only))


def _assembled(code: list[tuple[int, object, object, int]], key: tuple[bool, bool]) -> bytes:
    """``code`` with its four endings appended and its labels resolved, as the kernel reads it."""
    import struct

    ret, allow, kill = 0x06, 0x7FFF0000, 0x80000000
    eperm, enosys = 0x00050000 | 1, 0x00050000 | 38
    labels = {"allow": len(code), "deny": len(code) + 1, "nosys": len(code) + 2, "kill": len(code) + 3}
    code += [(ret, 0, 0, allow), (ret, 0, 0, eperm), (ret, 0, 0, enosys), (ret, 0, 0, kill)]
    raw = b"".join(
        struct.pack(
            "=HBBI",
            op,
            *(labels[j] - index - 1 if isinstance(j, str) else int(j) for j in (jt, jf)),  # type: ignore[call-overload]
            k,
        )
        for index, (op, jt, jf, k) in enumerate(code)
    )
    _PROGRAMS[key] = raw
    return raw
