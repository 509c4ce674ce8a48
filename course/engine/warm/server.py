"""The warm grader itself: the background process that keeps pytest, hypothesis and numpy
imported and grades the requests a check sends it (the calling side, which starts it with
``python -I`` in a private folder, is ``client``; its docstring says why and how it is safe).

``serve`` imports everything, grades each lesson once to warm every code path, opens one pytest
session that collects every lesson's tests (``one_session.in_session``), then keeps one *ready
child* forked: a copy of itself, session included, that has already started a blank worker and
waits in accept(). A request is graded by that child in the inherited session, with the result
``runner.grade`` gives a cold check (several lessons side by side, each in a forked copy of the
session: ``side_by_side``). The child exits and the server forks the next ready child.

A server serves one course build, the one whose fingerprint (``client.fingerprint``) names its
socket: it exits as soon as the course's files change, on a stop request, and after
``IDLE_SECONDS`` without a request. A request from another user is graded nothing and stops
nothing (``private_socket.peer_is_us``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from course.engine.testing import secret
from course.engine.warm import private_socket
from course.engine.warm.client import fingerprint

if TYPE_CHECKING:
    from course.content.catalog import Lesson
    from course.engine.grading.one_session import Unit
    from course.engine.results import LessonResult
    from course.engine.sandbox.process import Worker
    from course.engine.warm.side_by_side import GradeOne

    Grade = Callable[[Unit], LessonResult]

IDLE_SECONDS = 600


def _warm_up() -> None:
    """Grade every lesson once (its solution, else its skeleton) so that every module and lazy
    code path the checks use is loaded, and every oracle they ask for (those that name a wrong
    answer's mistake too, see ``memo.warming_up``) remembered, before the server forks."""
    from course.content.catalog import load_catalog
    from course.engine.grading.runner import grade
    from course.engine.testing import memo

    for lesson in load_catalog().available():
        folder = lesson.reference.parent
        try:
            with memo.warming_up():
                _COSTS[lesson.module] = grade(lesson, folder).duration
        except Exception:  # noqa: BLE001 - warming is an optimisation; serving must not depend on it
            pass


_COSTS: dict[str, float] = {}  # lesson module -> seconds its warm-up grade took (for scheduling)


def _die_with(server: int) -> None:
    """In a ready child, just forked: when the server dies, by any signal, the kernel sends
    the child SIGTERM (``_ready_child`` retires its spare then; while it grades, SIGTERM ends
    it, and its workers' keepers end theirs when its pipes close). The server forks from its
    main thread, whose end is the process's. A server already gone is seen from the pid."""
    import ctypes

    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != server:
        os._exit(0)


def _ready_child(listener: socket.socket, notify: int, grade_one: GradeOne) -> None:
    """Runs in a forked child: start a spare worker, wait for one request, grade it, exit.
    The spare and its scratch folder are gone when it exits, whatever happened."""
    import shutil

    from course.engine.sandbox.process import Worker

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
            _answer(connection, notify, spare, scratch, grade_one)
    finally:
        spare.kill()
        shutil.rmtree(scratch, ignore_errors=True)


def _answer(
    connection: socket.socket, notify: int, spare: Worker, scratch: Path, grade_one: GradeOne
) -> None:
    from course.content.catalog import load_catalog

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
    from course.engine.warm.side_by_side import grade_side_by_side

    results = grade_side_by_side(lessons, Path(order["source_dir"]), (spare, scratch), _COSTS, grade_one)
    connection.settimeout(None)
    connection.sendall(json.dumps({"results": results}).encode())


def _in_session(grade: Grade) -> GradeOne:
    """One lesson of a folder graded in the session the server collected ahead: the result
    ``runner.grade`` gives (tests/test_server.py holds this)."""
    from course.engine.calls.learner_module import LearnerModule
    from course.engine.grading.one_session import Unit
    from course.engine.grading.runner import ungradable

    def grade_one(lesson: Lesson, folder: Path, spare: tuple[Worker, Path] | None) -> LessonResult:
        folder = folder.resolve()
        refused = ungradable(lesson, folder)
        if refused is not None:
            if spare:
                spare[0].kill()
            return refused
        return grade(Unit(lesson, folder, LearnerModule(folder, lesson.module, spare=spare)))

    return grade_one


def _by_runner(lesson: Lesson, folder: Path, spare: tuple[Worker, Path] | None) -> LessonResult:
    from course.engine.grading.runner import grade

    return grade(lesson, folder, spare=spare)


def serve(path: Path) -> int:
    """Serve the socket ``path`` until it is idle, stopped or stale; 0 then, and at once when the
    folder is not ours alone or another server for this build won the race to start."""
    if not private_socket.private_folder(path.parent):
        return 0  # not a folder of ours alone: no server here
    lock = open(f"{path}.lock", "a")  # held for the server's lifetime  # noqa: SIM115
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another server for this build won the race
    _forget_stale_servers(path)
    with contextlib.suppress(secret.SecretError):  # unusable: its checks failed before asking
        if secret.use_environment():  # the one this build's fingerprint, and so the socket, names
            secret.keep_from_other_processes()
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

    server = os.getpid()

    def serve_requests(grade_one: GradeOne) -> None:
        while True:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # see _ready_child
            child = os.fork()
            if child != 0:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            if child == 0:
                _die_with(server)
                signal.set_wakeup_fd(-1)  # the server's, not the child's
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(ended_read)
                os.close(ended_write)
                os.close(notify_read)
                code = 0
                try:
                    _ready_child(listener, notify_write, grade_one)
                except BaseException:  # noqa: BLE001 - the caller falls back on its own grade
                    code = 1
                os._exit(code)
            if not _wait_for_request(notify_read, ended_read, built, child):
                try:
                    os.kill(child, signal.SIGTERM)  # the ready child; one grading finishes its work
                    os.waitpid(child, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass
                return

    try:
        _in_a_collected_session(serve_requests)
    finally:
        path.unlink(missing_ok=True)
        listener.close()
    return 0


def _in_a_collected_session(serve_requests: Callable[[GradeOne], None]) -> None:
    """Serve inside one pytest session that has collected every lesson's tests, so a child
    grades a lesson without pytest's start-up and collection (``one_session``); without such
    a session (it could not start), each lesson is graded by ``runner.grade``."""
    from course.content.catalog import load_catalog
    from course.engine.grading.one_session import in_session

    served: list[bool] = []

    def body(grade: Grade) -> None:
        served.append(True)
        serve_requests(_in_session(grade))

    try:
        lessons = load_catalog().available()
        if lessons:
            in_session(lessons, body)
    except Exception:
        if served:
            raise  # the serving itself failed: as without a session, the server ends
    if not served:
        serve_requests(_by_runner)


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
