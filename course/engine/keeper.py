"""The keeper: a tiny process between the grader and one worker, out of the learner's reach.

``processes.Worker`` starts ``python -I -c`` with this module's ``main``. It makes itself a child
subreaper (orphans of its descendants, such as a learner's double fork or ``setsid`` child, become
its children instead of init's), then forks: the child becomes the worker (its own process group,
``worker.main``) and the parent stays the keeper. The keeper never imports numpy nor anything of
the learner's, and the worker confines itself with Landlock only after the fork, so learner code
may not signal or trace the keeper (where the kernel supports signal scoping).

The keeper talks to the grader over two pipes:

- control (grader -> keeper): ``u`` asks for a stack dump (SIGUSR1 to the worker, sent by the
  process that reaps it, so never to a recycled pid); ``k``, end of file (the grader closed it or
  died) or SIGTERM means stop.
- status (keeper -> grader): ``P<pid>`` once, the worker's pid; ``X<status>`` when the worker
  ended, its raw wait status.

When told to stop, or as soon as the worker ended, the keeper kills its whole subtree, waits until
it has no child left (every descendant, orphans included, is in its subtree) and exits. So a
check kills exactly what its workers started, and nothing of the caller's.

A worker started for measuring memory (a fifth argument ``measured``) may start no other
process: before anything of the learner's runs, its side of the fork installs a seccomp filter
that refuses fork, vfork, clone without a shared address space, clone3 and exec (see
``_forbid_new_processes``). Its threads share its memory, so the kernel's count of its resident
memory (read by the grader in ``/proc``) is all the memory the learner's code can hold.

Standard library only, and nothing heavy before the fork: the worker start is on the critical
path of a cold check.
"""

from __future__ import annotations

import os
import sys

_PR_SET_CHILD_SUBREAPER = 36


def main(argv: list[str]) -> int:
    request_fd, response_fd, control_fd, status_fd = (int(arg) for arg in argv[:4])
    measured = argv[4:5] == ["measured"]
    import ctypes

    if ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return 70  # no subreaper, no guarantee: refuse rather than leak escapees (EX_SOFTWARE)
    worker = os.fork()
    if worker == 0:
        os.close(control_fd)  # the learner must not read the grader's orders nor forge a status
        os.close(status_fd)
        os.setpgid(0, 0)
        if measured and not _forbid_new_processes():
            os._exit(71)  # no filter, no sound measurement: the grader says so (EX_OSERR)
        from course.engine.worker import main as work

        return work([str(request_fd), str(response_fd)])
    try:
        os.setpgid(worker, worker)  # also here, so the group exists whichever side runs first
    except OSError:
        pass
    os.close(request_fd)  # only the worker holds these: its death is an end of file for the grader
    os.close(response_fd)
    _report(status_fd, b"P%d\n" % worker)
    _keep(worker, control_fd, status_fd)
    _sweep(worker)
    os._exit(0)


# seccomp: (audit arch, denied syscalls, clone, clone3) per machine; x86_64 also denies x32 numbers
_SECCOMP_ARCH = {
    "x86_64": (0xC000003E, (57, 58, 59, 322), 56, 435),  # fork, vfork, execve, execveat
    "aarch64": (0xC00000B7, (221, 281), 220, 435),  # execve, execveat
}


def _forbid_new_processes() -> bool:
    """Install a seccomp filter (for this process and any thread it starts) that makes fork,
    vfork, exec and a clone without CLONE_VM fail with EPERM and clone3 with ENOSYS (so libc
    falls back to clone, whose flags the filter can read). A clone with CLONE_VM (a thread, or
    the first step of posix_spawn, whose exec is refused) shares this process's memory. Returns
    False when the filter cannot be installed."""
    import ctypes
    import platform
    import struct

    machine = _SECCOMP_ARCH.get(platform.machine())
    if machine is None:
        return False
    arch, denied, clone, clone3 = machine
    load, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill = 0x7FFF0000, 0x80000000
    eperm, enosys = 0x00050000 | 1, 0x00050000 | 38
    code: list[tuple[int, object, object, int]] = [(load, 0, 0, 4), (jeq, 0, "kill", arch), (load, 0, 0, 0)]
    if platform.machine() == "x86_64":
        code.append((jge, "deny", 0, 0x40000000))  # the x32 numbering of the same calls
    code += [(jeq, "deny", 0, number) for number in denied]
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
    program = ctypes.create_string_buffer(raw, len(raw))
    fprog = struct.pack("=HxxxxxxQ", len(code), ctypes.addressof(program))
    libc = ctypes.CDLL(None)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS, required for an unprivileged filter
        return False
    return bool(libc.prctl(22, 2, ctypes.c_char_p(fprog), 0, 0) == 0)  # PR_SET_SECCOMP, FILTER


def _report(status_fd: int, line: bytes) -> None:
    try:
        os.write(status_fd, line)
    except OSError:  # the grader is gone: keep going, the sweep still has to happen
        pass


def _keep(worker: int, control_fd: int, status_fd: int) -> None:
    """Reap every child as it ends; return when told to stop or when the worker has ended."""
    import _signal as signal  # not ``signal``: its enum classes cost milliseconds of start-up
    import select

    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    stop = []
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select through wake_write
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    while not stop:
        while True:  # reap the worker and orphans that were handed to us
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                break
            if pid == worker:
                _report(status_fd, b"X%d\n" % status)
                return
        ready, _, _ = select.select([control_fd, wake_read], [], [])
        if wake_read in ready:
            try:
                while os.read(wake_read, 512):
                    pass
            except BlockingIOError:
                pass
        if control_fd in ready:
            try:
                orders = os.read(control_fd, 512)
            except OSError:
                orders = b""
            if not orders or b"k" in orders:
                return
            if b"u" in orders:  # the worker is not reaped yet (we reap it above), so it is ours
                os.kill(worker, signal.SIGUSR1)


def _sweep(worker: int) -> None:
    """Kill every descendant and reap every child, until no child is left. As a subreaper, a
    live descendant means a live child (its topmost living ancestor below us is reparented to
    us), so "no child" is the exact, race-free end."""
    import _signal as signal
    import time

    try:
        os.killpg(worker, signal.SIGKILL)  # most of it in one call: the worker's process group
        os.waitpid(worker, 0)  # killed: ends at once (unless it had ended and was reaped before)
    except (OSError, ChildProcessError):
        pass
    while True:  # usually no child is left here, and no scan of /proc is needed
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return
        targets = _descendants(os.getpid())
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if targets:
            try:
                os.waitpid(-1, 0)  # one child ended (they all were just killed); look again
            except ChildProcessError:
                return
        else:  # a child we could not see in /proc yet (born during the scan): look again
            time.sleep(0.001)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    parent = int(handle.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, stack = [], list(children.get(root, []))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
