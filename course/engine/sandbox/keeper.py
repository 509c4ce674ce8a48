"""The keeper: a tiny process between the grader and one worker, out of the learner's reach.

``process.Worker`` starts ``python -I -c`` with this module's ``main`` (or the zygote forks one).
It makes itself a child subreaper (orphans of its descendants, such as a learner's double fork or
``setsid`` child, become its children instead of init's), then forks: the child becomes the
worker (its own process group, ``worker.main``) and the parent stays the keeper. The keeper never
imports numpy nor anything of the learner's, and the worker confines itself with Landlock only
after the fork, so learner code may not signal or trace the keeper (where the kernel supports
signal scoping).

The keeper talks to the grader over two pipes:

- control (grader -> keeper): ``u`` asks for a stack dump (SIGUSR1 to the worker, sent by the
  process that reaps it, so never to a recycled pid); ``s`` and ``c`` pause the worker's group
  and let it go on (SIGSTOP, SIGCONT: a class's submission loaded ahead may not take the CPU
  another's grade needs); ``k``, end of file (the grader closed it or died) or SIGTERM means stop.
- status (keeper -> grader): ``P<pid>`` once, the worker's pid; ``X<status>`` when the worker
  ended, its raw wait status; ``E0`` once its sweep is done, just before it exits (a keeper
  forked by the zygote is not the grader's child, so the grader cannot wait for it).

When told to stop, or as soon as the worker ended, the keeper kills its whole subtree, waits until
it has no child left (every descendant, orphans included, is in its subtree) and exits. So a
check kills exactly what its workers started, and nothing of the caller's.

Its arguments: the request, response, control and status pipes, the call inputs' file (a memfd
the grader made, see ``replies.SharedInputs``: only the worker keeps it), and ``measured`` for a
worker whose memory the grader measures. Every worker installs the seccomp filter before anything
of the learner's runs (``seccomp.install_filter``): it may create no socket, so it talks to the
grader through its pipes only. A measured worker may also start no other process, so the kernel's
count of its resident memory is all the memory the learner's code can hold, and every page of
every file it has mapped is made resident before it starts (``_fault_in_mapped_files``), so that
no measurement counts library pages.

Standard library only, and nothing heavy before the fork: a worker's start is on the critical
path of a cold check.
"""

from __future__ import annotations

import ctypes
import os
import sys

from course.engine.sandbox import powers, seccomp

_PR_SET_CHILD_SUBREAPER = 36


def main(argv: list[str]) -> int:
    request_fd, response_fd, control_fd, status_fd, inputs_fd = (int(arg) for arg in argv[:5])
    measured = argv[5:6] == ["measured"]
    if seccomp.libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return 70  # no subreaper, no guarantee: refuse rather than leak escapees (EX_SOFTWARE)
    worker = os.fork()
    if worker == 0:
        os.close(control_fd)  # the learner must not read the grader's orders nor forge a status
        os.close(status_fd)
        os.setpgid(0, 0)
        if not powers.drop(seccomp.libc()):
            os._exit(72)  # root's powers kept: nothing of the learner's may run (EX_OSFILE)
        filtered = seccomp.install_filter(measured)
        if measured and not filtered:
            os._exit(71)  # no filter, no sound measurement: the grader says so (EX_OSERR)
        from course.engine.sandbox.worker.main import main as work

        if measured:
            _fault_in_mapped_files(seccomp.libc())
        return work([str(request_fd), str(response_fd), str(inputs_fd), "filtered" if filtered else ""])
    try:
        os.setpgid(worker, worker)  # also here, so the group exists whichever side runs first
    except OSError:
        pass
    os.close(request_fd)  # only the worker holds these: its death is an end of file for the grader
    os.close(response_fd)
    os.close(inputs_fd)
    _report(status_fd, b"P%d\n" % worker)
    _keep(worker, control_fd, status_fd)
    _sweep(worker)
    _report(status_fd, b"E0\n")  # for a grader that is not our parent (see ``zygote``)
    os._exit(0)


_MADV_POPULATE_READ = 22  # Linux 5.14


def _fault_in_mapped_files(libc: object) -> None:
    """Make every page of every mapped file (Python, numpy, their libraries) resident in this
    process, before its memory is ever measured.

    A worker forked by the zygote inherits numpy without the page-table entries of its files,
    which it would fault in during a measured call: megabytes of library code counted as the
    learner's. An exec'd worker faulted in some of them while importing numpy. With every
    file page resident in both, and in the blank worker a measurement counts from, a call's
    peak counts what its code allocated, however its worker was started."""
    madvise = libc.madvise  # type: ignore[attr-defined]
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[5].startswith("/") or "r" not in fields[1]:
            continue  # anonymous memory, the stack and the like: nothing to read in
        start, end = (int(part, 16) for part in fields[0].split("-"))
        madvise(start, end - start, _MADV_POPULATE_READ)  # refused (an old kernel): as before


def _report(status_fd: int, line: bytes) -> None:
    try:
        os.write(status_fd, line)
    except OSError:  # the grader is gone: keep going, the sweep still has to happen
        pass


def _keep(worker: int, control_fd: int, status_fd: int) -> None:
    """Reap every child as it ends; return when told to stop or when the worker has ended."""
    import _signal as signal  # not ``signal``: its enum classes slow the keeper's start
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
            for order in orders:  # pause, go on: in the order sent
                sent = {ord("s"): signal.SIGSTOP, ord("c"): signal.SIGCONT}.get(order)
                if sent is not None:
                    try:
                        os.killpg(worker, sent)
                    except OSError:
                        pass


def _sweep(worker: int) -> None:
    """Kill every descendant and reap every child, until no child is left. As a subreaper, a
    live descendant means a live child (its topmost living ancestor below us is reparented to
    us), so "no child" is the exact, race-free end.

    Each round kills our children as the kernel lists them (``/proc/self/task/<tid>/children``,
    one short read; a child not reaped yet keeps its pid, so the pid is never a recycled one),
    then reaps one: a grandchild whose parent was killed is our child in the next round. A
    process that keeps changing its pid (fork, the parent exits, again) is caught as soon as a
    round is faster than one of its forks, which a round of a few system calls is."""
    import _signal as signal
    import time

    try:
        os.killpg(worker, signal.SIGKILL)  # most of it in one call: the worker's process group
    except OSError:
        pass
    listing = f"/proc/self/task/{os.getpid()}/children"
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return
        targets = _children(listing)
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not targets:  # a child too new to be listed yet: look again in a moment
            time.sleep(0.001)
            continue
        try:
            os.waitpid(-1, 0)  # a killed child ends at once; then look again
        except ChildProcessError:
            return


def _children(listing: str) -> list[int]:
    """Our children, from the kernel's list, or from a scan of /proc without that list."""
    try:
        with open(listing, "rb") as handle:
            return [int(pid) for pid in handle.read().split()]
    except (OSError, ValueError):
        return _descendants(os.getpid())


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
