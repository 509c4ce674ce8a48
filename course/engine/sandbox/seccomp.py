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
# add_key, keyctl: kernel objects that outlive a process); calls refused to a measured worker
# (fork, vfork, execve, execveat on x86_64; execve, execveat on aarch64); clone; clone3.
_SECCOMP_ARCH = {
    "x86_64": (
        0xC000003E,
        (41, 53, 425, 319, 447, 438, 29, 64, 68, 240, 248, 250),
        (57, 58, 59, 322),
        56,
        435,
    ),
    "aarch64": (
        0xC00000B7,
        (198, 199, 425, 279, 447, 438, 194, 190, 186, 180, 217, 219),
        (221, 281),
        220,
        435,
    ),
}


def install_filter(measured: bool) -> bool:
    """Install a seccomp filter for this process, its threads and everything it starts.

    Every worker: no new socket of any family (nor through io_uring), so learner code reaches
    no one (not the warm grader's socket, not the network, TCP or UDP) and talks to the grader
    through its pipes only; no memfd, System V shared memory, semaphore or message queue, POSIX
    message queue or key (memory outside the worker's limits, and some of it outliving the
    check); no descriptor taken from another process. These fail with EPERM.

    A measured worker also may start no process: fork, vfork, exec and a clone without
    CLONE_VM fail with EPERM and clone3 with ENOSYS (so libc falls back to clone, whose flags
    the filter can read). A clone with CLONE_VM (a thread, or the first step of posix_spawn,
    whose exec is refused) shares this process's memory.

    Returns False when the filter cannot be installed (another machine, an old kernel)."""
    import struct

    raw = _filter_program(measured)
    if raw is None:
        return False
    program = ctypes.create_string_buffer(raw, len(raw))
    fprog = struct.pack("=HxxxxxxQ", len(raw) // 8, ctypes.addressof(program))
    c_library = libc()
    if c_library.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS, required for an unprivileged filter
        return False
    return bool(c_library.prctl(22, 2, ctypes.c_char_p(fprog), 0, 0) == 0)  # PR_SET_SECCOMP, FILTER


# Made once per process (``prepare``): a zygote's keepers and workers inherit them.
_LIBC: list[ctypes.CDLL] = []
_PROGRAMS: dict[bool, bytes | None] = {}


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


def _filter_program(measured: bool) -> bytes | None:
    """The seccomp program of ``install_filter`` for this machine (None: no such program
    here), as the kernel reads it: ``struct sock_filter`` after ``struct sock_filter``."""
    if measured in _PROGRAMS:
        return _PROGRAMS[measured]
    import platform
    import struct

    machine = _SECCOMP_ARCH.get(platform.machine())
    if machine is None:
        _PROGRAMS[measured] = None
        return None
    arch, always, processes, clone, clone3 = machine
    load, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill = 0x7FFF0000, 0x80000000
    eperm, enosys = 0x00050000 | 1, 0x00050000 | 38
    code: list[tuple[int, object, object, int]] = [(load, 0, 0, 4), (jeq, 0, "kill", arch), (load, 0, 0, 0)]
    if platform.machine() == "x86_64":
        code.append((jge, "deny", 0, 0x40000000))  # the x32 numbering of the same calls
    code += [(jeq, "deny", 0, number) for number in always]
    if measured:
        code += [(jeq, "deny", 0, number) for number in processes]
        code += [
            (jeq, "nosys", 0, clone3),
            (jeq, 0, "allow", clone),
            (load, 0, 0, 16),
            (jset, "allow", "deny", 0x100),
        ]
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
    _PROGRAMS[measured] = raw
    return raw
