"""The warm grader: a background process that keeps pytest, hypothesis and numpy imported.

A cold ``course check`` spends most of its time importing; the checks themselves take a tenth of
a second. So the first check also starts this server (detached, one per user and course build),
and later checks send it their request over a Unix socket:

    server: imports everything, grades each lesson once to warm every code path, then keeps one
            *ready child* forked: a copy of itself that has already started a blank worker and
            waits in accept(). A request is graded by that child, with the same ``runner.grade``
            as a cold check, and the child exits; the server forks the next ready child.

The socket's name carries a fingerprint of the course's files, so a changed course is never
graded by an old server. The server exits after ``IDLE_SECONDS`` without a request. Anything
unexpected on the way (no server, a refused connection, a malformed answer) makes the caller
grade in its own process: the server only ever makes a check faster.

Another local user must not be able to answer for the server, nor to run code in it. The socket
lives in a folder of ours that nobody else can enter, and each end checks that the other runs as
us (see ``private_socket``); on any doubt the check is graded in the calling process. The
server starts isolated (``python -I``: no current folder, no PYTHONPATH, no user site) with that
private folder as its working folder, so a ``numpy.py`` planted in the temporary folder is
never imported.

Set ``COURSE_SERVER=off`` to grade every check in the calling process.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from course.engine import private_socket

TYPE_CHECKING = False  # as typing's: mypy reads it as True; importing typing costs a check ~6 ms

if TYPE_CHECKING:  # the calling side must not import numpy: see request()
    from course.engine.processes import Worker

PACKAGE = Path(__file__).resolve().parents[1]
IDLE_SECONDS = 600
REQUEST_SECONDS = 75.0  # above the 60 s a whole check may take (limits.Limits.run_seconds)


def enabled() -> bool:
    return os.environ.get("COURSE_SERVER", "on").lower() not in ("off", "0", "no", "false")


_LAST: list[tuple[float, str]] = []  # (when, fingerprint) this process computed last
_REUSE_FOR = 2.0  # seconds: a check asks twice (its cache key, the socket); a watch, on every save


def fingerprint(again: bool = True) -> str:
    """A digest of the interpreter and of every course file the grade depends on. ``again``
    False: the one this process computed in the last two seconds, if any (a check reads the
    build twice within milliseconds; the server, watching for a changed build, always
    computes it again)."""
    if not again and _LAST and time.monotonic() - _LAST[0][0] < _REUSE_FOR:
        return _LAST[0][1]
    from course import resources

    digest = hashlib.sha256(
        f"{sys.prefix}:{os.path.realpath(sys.executable)}:{os.environ.get('COURSE_LIMITS', '')}".encode()
    )
    for folder in (PACKAGE, resources.data_dir("grading")):
        for path in sorted(folder.rglob("*")):
            if path.suffix in (".py", ".toml", ".ini", ".npz") and "__pycache__" not in path.parts:
                stat = path.stat()
                digest.update(f"{path}:{stat.st_mtime_ns}:{stat.st_size}".encode())
    _LAST[:] = [(time.monotonic(), digest.hexdigest()[:20])]
    return _LAST[0][1]


def socket_path() -> Path | None:
    """This build's socket in our private folder; None when no such folder can be had."""
    return private_socket.socket_in_private_folder(f"grader-{fingerprint(again=False)}.sock")


# -- the calling side: standard library only, so a warm check never imports numpy ------------
def request(module: str, source_dir: Path, timeout: float) -> dict | None:
    """The server's grade of ``source_dir/<module>.py`` as a dict, or None if it cannot help."""
    answers = request_many([module], source_dir, timeout)
    return answers[0] if answers else None


def request_many(
    modules: list[str], source_dir: Path, timeout: float, while_waiting: Callable[[], object] | None = None
) -> list[dict | None] | None:
    """The server's grades of these lessons of ``source_dir`` (one request: the server grades
    them side by side, one process per core), as dicts in order (None for a lesson it could
    not grade); None if it cannot help at all. ``while_waiting`` is called once the request is
    sent, before the answer is read (the caller's own preparation, done while the server
    grades; whatever it raises is ignored)."""
    return answer(send(modules, source_dir, timeout), len(modules), while_waiting)


def send(modules: list[str], source_dir: Path, timeout: float) -> socket.socket | None:
    """The request of ``request_many``, sent: the connection its answer comes on, or None if
    no server could take it."""
    try:
        connection = private_socket.connect(socket_path(), timeout)
        if connection is None:
            return None
        try:
            order = {"modules": list(modules), "source_dir": str(source_dir)}
            connection.settimeout(timeout * max(1, len(modules)))
            connection.sendall(json.dumps(order).encode() + b"\n")
            connection.shutdown(socket.SHUT_WR)
        except OSError:
            connection.close()
            return None
        return connection
    except (OSError, ValueError):
        return None


def answer(
    connection: socket.socket | None, count: int, while_waiting: Callable[[], object] | None = None
) -> list[dict | None] | None:
    """The answer to a request ``send`` sent for ``count`` lessons (see ``request_many``); the
    connection is closed. ``while_waiting`` runs first."""
    if connection is None:
        return None
    try:
        with connection:
            if while_waiting is not None:
                try:
                    while_waiting()
                except Exception:  # noqa: BLE001 - the caller's preparation, not the request
                    pass
            chunks = []
            while chunk := connection.recv(1 << 16):
                chunks.append(chunk)
        answered = json.loads(b"".join(chunks))
        results = answered.get("results") if isinstance(answered, dict) else None
        if not isinstance(results, list) or len(results) != count:
            return None
        return [r if isinstance(r, dict) and "exercises" in r else None for r in results]
    except (OSError, ValueError):
        return None


def stop() -> bool:
    """Ask the server of this course build to exit; True if one answered."""
    try:
        opened = private_socket.connect(socket_path(), 5)
        if opened is None:
            return False
        with opened as connection:
            connection.sendall(b'{"op": "stop"}\n')
            return b"stopped" in connection.recv(100)
    except OSError:
        return False


def ready(timeout: float) -> bool:
    """Wait until a server for this build accepts connections (for benchmarks and tests)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        connection = private_socket.connect(socket_path(), 5)
        if connection is not None:
            connection.close()
            return True
        time.sleep(0.1)
    return False


def start_in_background() -> None:
    """Start a server for this course build unless one is running (or starting) already."""
    path = socket_path()
    if path is None:
        return
    try:
        with open(f"{path}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: nobody serves this build
    except OSError:
        return
    import subprocess

    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    subprocess.Popen(
        [sys.executable, "-I", "-c", _BOOT, str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
        close_fds=True,
        cwd=path.parent,  # private: nothing planted there is imported (and -I ignores it anyway)
    )


# -I ignores PYTHONPATH, the user's site-packages and the current folder, so the server is told
# where the course lives (as the worker is: see processes.py).
_BOOT = (
    f"import sys; sys.path.insert(0, {str(PACKAGE.parent)!r}); "
    "from pathlib import Path; from course.engine.server import serve; "
    "sys.exit(serve(Path(sys.argv[1])))"
)


# -- the serving side ----------------------------------------------------------------------------
def _warm_up() -> None:
    """Grade every lesson once (its solution, else its skeleton) so that every module and lazy
    code path the checks use is loaded before the server starts forking."""
    from course.catalog import load_catalog
    from course.engine.runner import grade

    for lesson in load_catalog().available():
        folder = lesson.reference.parent
        try:
            _COSTS[lesson.module] = grade(lesson, folder).duration
        except Exception:  # noqa: BLE001 - warming is an optimisation; serving must not depend on it
            pass


_COSTS: dict[str, float] = {}  # lesson module -> seconds its warm-up grade took (for scheduling)


def _ready_child(listener: socket.socket, notify: int) -> None:
    """Runs in a forked child: start a spare worker, wait for one request, grade it, exit.
    The spare and its scratch folder are gone when it exits, whatever happened."""
    import shutil

    from course.engine.processes import Worker

    spares: list[Worker] = []
    folders: list[Path] = []

    def retire(*_: object) -> None:
        for worker in spares:
            worker.kill()
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
        os._exit(0)

    # SIGTERM (the server stopping) is blocked from before the fork until the handler is in
    # place and the scratch folder is recorded, so a stop never leaves that folder behind. It is
    # unblocked before the spare worker starts: its keeper must not inherit the blocked signal.
    signal.signal(signal.SIGTERM, retire)
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix="course-"))
    folders.append(scratch)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    spare = Worker(scratch)
    spares.append(spare)
    try:
        connection, _ = listener.accept()
        os.write(notify, b"x")  # the server forks the next ready child now
        listener.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with connection:
            _answer(connection, notify, spare, scratch)
    finally:
        spare.kill()
        shutil.rmtree(scratch, ignore_errors=True)


def _answer(connection: socket.socket, notify: int, spare: Worker, scratch: Path) -> None:
    from course.catalog import load_catalog

    connection.settimeout(5)
    if not private_socket.peer_is_us(connection):
        return  # another user reached the socket: it grades nothing and stops nothing
    raw = b""
    while not raw.endswith(b"\n") and len(raw) < 65536:
        chunk = connection.recv(4096)
        if not chunk:
            break
        raw += chunk
    order = json.loads(raw)
    if order.get("op") == "stop":
        os.write(notify, b"s")
        connection.sendall(b'{"stopped": true}')
        return
    catalog = load_catalog()
    found = [catalog.by_module(str(module)) for module in order["modules"]]
    lessons = [lesson for lesson in found if lesson is not None]
    if not lessons or len(lessons) != len(found):
        raise LookupError(order["modules"])
    from course.engine.side_by_side import grade_side_by_side

    results = grade_side_by_side(lessons, Path(order["source_dir"]), (spare, scratch), _COSTS)
    connection.settimeout(None)
    connection.sendall(json.dumps({"results": results}).encode())


def serve(path: Path) -> int:
    if not private_socket.private_folder(path.parent):
        return 0  # not a folder of ours alone: no server here
    lock = open(f"{path}.lock", "a")  # held for the server's lifetime  # noqa: SIM115
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another server for this build won the race
    _forget_stale_servers(path)
    _warm_up()
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)
    notify_read, notify_write = os.pipe()
    # A grading child that ends is reaped at once (no zombie until the next request): SIGCHLD
    # wakes the wait for a request through this pipe.
    ended_read, ended_write = os.pipe()
    os.set_blocking(ended_read, False)
    os.set_blocking(ended_write, False)
    signal.set_wakeup_fd(ended_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    built = fingerprint()
    try:
        while True:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # see _ready_child
            child = os.fork()
            if child != 0:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            if child == 0:
                signal.set_wakeup_fd(-1)  # the server's, not the child's
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(ended_read)
                os.close(ended_write)
                os.close(notify_read)
                code = 0
                try:
                    _ready_child(listener, notify_write)
                except BaseException:  # noqa: BLE001 - the caller falls back on its own grade
                    code = 1
                os._exit(code)
            if not _wait_for_request(notify_read, ended_read, built, child):
                try:
                    os.kill(child, signal.SIGTERM)  # the ready child; one grading finishes its work
                    os.waitpid(child, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass
                return 0
    finally:
        path.unlink(missing_ok=True)
        listener.close()


def _forget_stale_servers(path: Path) -> None:
    """Remove the sockets of servers that are gone (their lock is free): killed, or of an old
    build, they would only refuse connections."""
    for lock_path in path.parent.glob("grader-*.sock.lock"):
        if lock_path.name == f"{path.name}.lock":
            continue
        try:
            with open(lock_path, "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                Path(str(lock_path).removesuffix(".lock")).unlink(missing_ok=True)
                lock_path.unlink(missing_ok=True)
        except OSError:
            continue


def _wait_for_request(notify: int, ended: int, built: str, ready_child: int) -> bool:
    """True once the ready child took a request. False after IDLE_SECONDS without one, when the
    request was to stop, as soon as the course's files change (this build is then stale), or
    when the ready child died before taking a request (checks then grade in their own process).
    Meanwhile every grading child is reaped as soon as it ends (``ended`` wakes us)."""
    import select

    deadline = time.monotonic() + IDLE_SECONDS
    while time.monotonic() < deadline:
        lost = ready_child in _reap()  # it may also have taken a request and finished already
        ready, _, _ = select.select([notify, ended], [], [], 0 if lost else 30)
        if notify in ready:
            return os.read(notify, 1) == b"x" and fingerprint() == built  # b"s": stop
        if lost:
            return False
        if ended in ready:
            _drain(ended)  # a grading child ended: reaped at the top of the loop
        elif fingerprint() != built:
            return False
    return False


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _reap() -> set[int]:
    """Reap the children that have ended, without waiting for the others; their pids."""
    reaped: set[int] = set()
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped.add(pid)


if __name__ == "__main__":
    sys.exit(serve(Path(sys.argv[1])))
