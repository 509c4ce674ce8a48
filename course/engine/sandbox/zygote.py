"""The worker zygote: a clean process that forks keepers, so a worker starts without an exec
and numpy's import.

It is started once per grading process (lazily, by its second ``process.Worker``), exec'd exactly
as a keeper is (``python -I -u``, the workers' environment, a new session, no descriptor but its
socket), imports numpy and the worker's modules, and then only waits for orders on a private
socketpair (``SOCK_SEQPACKET``: one order is one message, so processes forked from the grader,
which share its end, can order concurrently). It never runs anything of a learner's.

An order carries the worker's six descriptors (``SCM_RIGHTS``: request, response, control and
status pipes, the inputs file, the output file) and, as JSON, the scratch folder, the measured
flag and the worker's environment (the grader's as of that worker's start, which pytest changes
from test to test). The zygote forks; the child, before anything else, closes the zygote's socket
and every descriptor it was not given, puts the output on 1 and 2, moves to the scratch folder and
a new session, writes ``K<its pid>`` on the status pipe and runs ``keeper.main``, as an exec'd
keeper would. Nothing comes back on the socket: the keeper reports on its status pipe, and the
grader execs the keeper itself if no ``K`` comes in time (``process.Worker``). The zygote ends
when every holder of the grader's end has closed it.

The zygote is not dumpable (its descendants are made dumpable again), so no process of the user
may read its memory or take its descriptors through /proc.
"""

from __future__ import annotations

import _thread
import json
import os
import select
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

# Neither ``threading`` nor ``subprocess`` (which imports it) is imported in the zygote's own
# process: threading's fork handler would run in every keeper and worker forked from it.

_FDS = 6  # request, response, control, status, inputs, output
_ORDER_BYTES = 1 << 20  # the environment is most of an order
_PR_SET_DUMPABLE = 4
_BOOT = (
    f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[3])!r}); "
    "from course.engine.sandbox.zygote import main; sys.exit(main(sys.argv[1:]))"
)


# -- the grader's side ---------------------------------------------------------------------------
class _Zygote:
    """The grader's end of a running zygote."""

    def __init__(self, env: dict[str, str]) -> None:
        import subprocess

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._ready, ready_write = os.pipe()  # closed by the zygote once it has imported
        self.ready = False
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-u", "-c", _BOOT, str(theirs.fileno()), str(ready_write)],
                pass_fds=(theirs.fileno(), ready_write),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd="/",
                env=env,
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            os.close(self._ready)
            raise
        finally:
            theirs.close()
            os.close(ready_write)
        ours.settimeout(5.0)  # a zygote that stops reading must not hang the grader
        self.socket = ours
        self.owner = os.getpid()  # forked graders share it (see the module's docstring)

    def warm(self) -> bool:
        """Whether the zygote has imported what workers need (or died trying: then an order
        fails at once). Never waits: until then workers are exec'd, as without a zygote."""
        if not self.ready and select.select([self._ready], [], [], 0)[0]:
            self.ready = True  # end of file: seen the same by every process that shares it
        return self.ready

    def order(self, fds: Sequence[int], scratch: Path, measured: bool, env: dict[str, str]) -> bool:
        """Send one order; False if the zygote is gone or the socket failed."""
        payload = json.dumps({"scratch": str(scratch), "measured": measured, "env": env}).encode()
        try:
            self.socket.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(_fd_array(fds)))])
        except OSError:
            return False
        return True

    def close(self) -> None:
        import subprocess

        self.socket.close()
        os.close(self._ready)
        if self.owner == os.getpid() and self.process.poll() is None:
            try:
                self.process.wait(timeout=0.5)  # it ends on end of file; reap it if it has
            except subprocess.TimeoutExpired:
                pass


_lock = _thread.allocate_lock()
_current: _Zygote | None = None
_failures = 0
_asked = 0  # workers this process started: the zygote comes with the second
_MAX_FAILURES = 3  # zygotes killed or stopped this often: exec every keeper from then on


def _after_fork() -> None:
    global _lock
    _lock = _thread.allocate_lock()  # a lock held by another thread at the fork would never be released


os.register_at_fork(after_in_child=_after_fork)


def zygote(env: dict[str, str]) -> _Zygote | None:
    """This process's zygote once it is ready to fork, else None. It is started by the second
    call (with environment ``env``: a process that starts one worker, a cold check, does not pay
    for a zygote it would not use) and not waited for: until it has imported, calls get None
    (their workers are exec'd); so do all once zygotes failed too often here or cannot start."""
    global _current, _failures, _asked
    with _lock:
        _asked += 1
        if _current is None and _failures < _MAX_FAILURES and _asked > 1:
            try:
                _current = _Zygote(env)
            except OSError:
                _failures = _MAX_FAILURES
        return _current if _current is not None and _current.warm() else None


def failed(broken: _Zygote) -> None:
    """``broken`` did not fork a keeper in time: forget it (the next worker starts another)."""
    global _current, _failures
    with _lock:
        if _current is broken:
            _current = None
            _failures += 1
    broken.close()


def _fd_array(fds: Sequence[int]) -> bytes:
    import array

    return array.array("i", fds).tobytes()


# -- the zygote's side ---------------------------------------------------------------------------
def main(argv: list[str]) -> int:
    """Preload, then fork a keeper per order until the grader's end is closed."""
    import ctypes
    import signal

    sock = socket.socket(fileno=int(argv[0]))
    ready = int(argv[1])
    libc = ctypes.CDLL(None)
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])  # the keeper must not inherit a blocked signal
    import numpy  # noqa: F401 - what every worker imports first: the point of a zygote

    import course.engine.sandbox.worker.main  # noqa: F401 - what every worker runs
    from course.engine.sandbox import landlock, seccomp

    seccomp.prepare()  # made once here, not in every keeper and worker forked from here
    landlock.prepare()

    os.close(ready)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the keepers
    space = socket.CMSG_SPACE(_FDS * 4)
    while True:
        try:
            data, ancillary, flags, _ = sock.recvmsg(_ORDER_BYTES, space)
        except InterruptedError:
            continue
        except OSError:
            return 0
        fds = _received(ancillary)
        if not data and not fds:
            return 0  # every holder of the grader's end closed it
        order = _parse(data, fds, flags)
        if order is None:
            close_all(fds)
            continue
        try:
            child = os.fork()
        except OSError:
            child = -1
        if child == 0:
            return _keeper(sock, fds, *order, libc)
        close_all(fds)


def _received(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    import array

    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return list(fds)


def _parse(data: bytes, fds: list[int], flags: int) -> tuple[str, bool, dict[str, str]] | None:
    """(scratch folder, measured, environment) of a well-formed order, else None."""
    if flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC) or len(fds) != _FDS or len(set(fds)) != _FDS:
        return None
    try:
        order = json.loads(data)
    except ValueError:
        return None
    if not isinstance(order, dict) or not isinstance(order.get("scratch"), str):
        return None
    env = order.get("env")
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in (*env, *env.values())):
        return None
    return order["scratch"], order.get("measured") is True, env


def close_all(fds: list[int]) -> None:
    """Close each descriptor, whether or not it is still open."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _keeper(
    sock: socket.socket, fds: list[int], scratch: str, measured: bool, env: dict[str, str], libc: object
) -> int:
    """In the forked child: become what an exec'd keeper is, then be one (``keeper.main``)."""
    import signal

    sock.close()  # first: nothing below, least of all learner code, may order forks
    request, response, control, status, inputs, output = fds
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the keeper waits for its worker itself
    os.dup2(output, 1)
    os.dup2(output, 2)
    keep = sorted({0, 1, 2, request, response, control, status, inputs})
    for low, high in zip(keep, [*keep[1:], 1 << 20], strict=True):
        if high > low + 1:
            os.closerange(low + 1, high)  # the output's own number too, and anything else
    me = os.getpid()
    try:
        os.chdir(scratch)
        os.setsid()
        libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)  # type: ignore[attr-defined]  # the grader reads /proc/<worker>
        _reseed()
        if list(os.environ.items()) != list(env.items()):
            os.environ.clear()  # the worker's environment as of its start, not the zygote's
            os.environ.update(env)
        os.write(status, b"K%d\n" % me)
    except OSError:
        os._exit(70)
    from course.engine.sandbox import keeper

    arguments = [str(fd) for fd in (request, response, control, status, inputs)]
    arguments += ["measured"] if measured else []
    sys.argv[:] = ["-c", *arguments]  # what an exec'd keeper's worker sees
    code = keeper.main(arguments)
    if os.getpid() == me:  # the keeper refused to start (it exits itself otherwise)
        try:
            os.write(status, b"E%d\n" % code)
        finally:
            os._exit(code)
    return code  # the worker's, ended as an exec'd worker ends (atexit, flushing)


def _reseed() -> None:
    """Forked children share the zygote's random state: draw a fresh one, as a new process has."""
    for name in ("numpy.random", "random"):
        module = sys.modules.get(name)
        if module is not None:
            module.seed()  # type: ignore[attr-defined]
