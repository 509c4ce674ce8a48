"""The warm grader answers exactly as a cold check does, and a broken one is never trusted."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from tests.helpers import SOLUTIONS


@pytest.fixture
def runtime(monkeypatch):
    """An isolated (short: socket paths are limited) socket folder, the server switched on."""
    folder = tempfile.mkdtemp(prefix="srv", dir="/tmp")
    monkeypatch.setenv("XDG_RUNTIME_DIR", folder)
    monkeypatch.setenv("COURSE_SERVER", "on")
    from course.engine.warm import client

    yield client
    client.stop()
    shutil.rmtree(folder, ignore_errors=True)


def course(*args, cwd, env=None):
    return subprocess.run(
        [sys.executable, "-m", "course", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, NO_COLOR="1", **(env or {})),
    )


def checks(payload):
    return [
        (e["name"], c["name"], c["status"], c["mistake"]) for e in payload["exercises"] for c in e["checks"]
    ]


def test_a_warm_check_equals_the_cold_one_and_the_server_stops_on_request(runtime, tmp_path):
    assert course("init", "ws", cwd=tmp_path).returncode == 0
    workspace = tmp_path / "ws"
    for module in ("l01_projections", "l02_softmax"):
        (workspace / f"{module}.py").write_text((SOLUTIONS / f"{module}.py").read_text())
    source = (SOLUTIONS / "l01_projections.py").read_text()
    (workspace / "l01_projections.py").write_text(source.replace("out = out + b", "pass"))
    cold = course("check", "1", "--json", cwd=workspace)  # graded here; starts the server
    assert runtime.ready(timeout=90), "the warm grader did not come up"
    answer = runtime.request("l01_projections", workspace, timeout=60)
    assert answer is not None, "the warm grader did not answer"
    warm = course("check", "1", "--json", cwd=workspace)
    assert cold.returncode == warm.returncode == 1
    assert checks(json.loads(warm.stdout)) == checks(json.loads(cold.stdout)) == checks(answer)
    assert json.loads(course("check", "2", "--json", cwd=workspace).stdout)["status"] == "passed"
    # A skeleton, and a file that is missing, answered by the warm grader as graded here.
    (workspace / "l04_masks.py").unlink()
    for module, number in (("l03_attention", "3"), ("l04_masks", "4")):
        here = json.loads(
            course("check", number, "--json", cwd=workspace, env={"COURSE_SERVER": "off"}).stdout
        )
        served = runtime.request(module, workspace, timeout=60)
        assert served is not None and served["status"] == here["status"] != "passed"
        assert (checks(served), served["message"]) == (checks(here), here["message"])
    # Several lessons in one request, graded side by side: the same as one by one.
    many = runtime.request_many(["l01_projections", "l02_softmax", "l03_attention"], workspace, timeout=60)
    assert many is not None and checks(many[0]) == checks(answer)
    assert [each["status"] for each in many] == ["failed", "passed", "not-started"]
    assert runtime.stop()
    deadline = time.monotonic() + 10
    while runtime.ready(timeout=0.2) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not runtime.ready(timeout=0.2), "the server is still accepting after stop"


def server_pid(path) -> int | None:
    """The server serving the socket ``path`` (its command line names the socket)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    words = handle.read().split(b"\0")
            except OSError:
                continue
            if any(b"course.engine.warm.server" in word for word in words) and str(path).encode() in words:
                return int(entry)
    return None


def children_states(parent: int) -> list[str]:
    """The states (R, S, Z ...) of ``parent``'s children, from /proc/<pid>/stat, but for its
    worker zygote (course/engine/sandbox/zygote.py: one for the server's lifetime, by design)."""
    states = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    zygote = b"course.engine.sandbox.zygote" in handle.read()
            except OSError:
                continue
            if int(fields[1]) == parent and not zygote:
                states.append(fields[0])
    return states


def test_a_finished_grading_child_is_reaped_at_once_and_stopping_the_server_leaves_no_scratch_folder(
    runtime, tmp_path, monkeypatch
):
    """A grading child of the server is reaped as it exits, without waiting for the next request.

    The ready child makes its scratch folder with the server's SIGTERM blocked until its
    handler is in place, so a stop at any moment removes that folder (it stayed in about one
    stop in five when the signal could arrive first). (One server for both: each start costs
    seconds.)"""
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(private_tmp))
    runtime.start_in_background()
    assert runtime.ready(timeout=90), "the warm grader did not come up"
    pid = server_pid(runtime.socket_path())
    assert pid is not None, "no process serves the socket"
    deadline = time.monotonic() + 30
    while not list(private_tmp.glob("course-*")) and time.monotonic() < deadline:
        time.sleep(0.05)  # the ready child's folder is where the test looks
    assert list(private_tmp.glob("course-*")), "the ready child made no scratch folder here"
    assert runtime.request("l01_projections", SOLUTIONS, timeout=60) is not None
    # The grading child exits right after answering; then only the next ready child is left.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = children_states(pid)
        if len(states) == 1 and states != ["Z"]:
            break
        time.sleep(0.1)
    assert "Z" not in states, f"a zombie child of the server: {states}"
    assert len(states) == 1, f"the server's children: {states} (expected one ready child)"
    # one stop is enough: with the signal blocked the outcome is the same at every moment
    deadline = time.monotonic() + 30
    while not list(private_tmp.glob("course-*")) and time.monotonic() < deadline:
        time.sleep(0.05)  # the next ready child's folder
    assert list(private_tmp.glob("course-*")), "the next ready child made no scratch folder here"
    assert runtime.stop()
    deadline = time.monotonic() + 30
    while list(private_tmp.glob("course-*")) and time.monotonic() < deadline:
        time.sleep(0.1)  # the stopped server removes its child's folder as it exits
    assert list(private_tmp.glob("course-*")) == [], "a scratch folder outlived the server"


def test_a_socket_that_answers_nonsense_is_ignored_and_the_check_grades_here(runtime, tmp_path):
    path = runtime.socket_path()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    try:
        import threading

        def answer_nonsense():
            connection, _ = listener.accept()
            connection.recv(65536)
            connection.sendall(b'{"status": "passed"}')  # a fake "pass" without checks
            connection.close()

        thread = threading.Thread(target=answer_nonsense, daemon=True)
        thread.start()
        assert runtime.request("l01_projections", SOLUTIONS, timeout=5) is None
    finally:
        listener.close()
        path.unlink()


def test_no_server_is_used_or_started_when_switched_off(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("COURSE_SERVER", "off")
    from course.engine.warm import client

    assert not client.enabled()


@pytest.mark.parametrize("raises", [False, True])
def test_the_callers_preparation_runs_after_the_request_is_sent_and_before_the_answer_is_read(
    runtime, raises
):
    import threading

    path = runtime.socket_path()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    request_seen, prepared = threading.Event(), threading.Event()

    def serve_one():
        connection, _ = listener.accept()
        while not connection.recv(65536).endswith(b"\n"):
            pass
        request_seen.set()
        prepared.wait(10)  # the answer comes only once the caller has prepared
        connection.sendall(json.dumps({"results": [{"exercises": [], "status": "passed"}]}).encode())
        connection.close()

    calls = []

    def prepare():
        calls.append(request_seen.wait(10))  # the server can see the request: it was sent
        prepared.set()
        if raises:
            raise RuntimeError("a preparation that fails changes nothing")

    thread = threading.Thread(target=serve_one, daemon=True)
    thread.start()
    try:
        sent = runtime.send(["l01_projections"], SOLUTIONS, 10)
        answers = runtime.answer(sent, 1, while_waiting=prepare)
    finally:
        listener.close()
        path.unlink()
    assert calls == [True]
    assert answers == [{"exercises": [], "status": "passed"}]


def test_lessons_are_queued_longest_first():
    from course.engine.warm.side_by_side import longest_first

    assert longest_first([0.1, 4.0, 0.2, 1.0, 1.5, 0.3]) == [1, 4, 3, 5, 2, 0]
    assert longest_first([0.5, 0.5, 0.0]) == [0, 1, 2]  # ties keep their order


def test_a_process_done_with_its_lesson_takes_the_next_one_from_the_queue(tmp_path, monkeypatch):
    """Lesson 0 takes far longer than the warm-up measured: here it ends only once every other
    lesson is graded. Dealt fixed shares (lesson 1 alone, the rest to the other process), its
    process would also hold lessons 2-4 and wait for itself until it gave up; from a queue,
    the other process takes them."""
    from course.content.catalog import load_catalog
    from course.engine.results import LessonResult
    from course.engine.warm import side_by_side

    lessons = load_catalog().lessons[:5]
    done = tmp_path / "done"
    done.mkdir()

    def fake_grade(lesson, folder, spare):
        waited = "others done"
        if lesson is lessons[0]:
            deadline = time.monotonic() + 30
            while len(list(done.iterdir())) < len(lessons) - 1:
                if time.monotonic() > deadline:
                    waited = "gave up"
                    break
                time.sleep(0.01)
        (done / lesson.module).write_text(waited)
        return LessonResult(lesson=lesson.module, status="passed", exercises=[])

    class Spare:
        def kill(self):
            pass

    monkeypatch.setattr(side_by_side.os, "cpu_count", lambda: 2)
    costs = {lesson.module: 1.0 for lesson in lessons} | {lessons[1].module: 5.0}
    results = side_by_side.grade_side_by_side(lessons, tmp_path, (Spare(), tmp_path), costs, fake_grade)
    assert [result["lesson"] for result in results] == [lesson.module for lesson in lessons]
    assert (done / lessons[0].module).read_text() == "others done"


def test_the_server_grades_in_a_collected_session_and_without_one_when_it_cannot_start(monkeypatch, tmp_path):
    from course.content.catalog import load_catalog
    from course.engine.grading import one_session, runner
    from course.engine.warm import server

    lesson = load_catalog().resolve("1")
    alone = runner.grade(lesson, SOLUTIONS).to_dict()
    graded: list[dict] = []

    def serve(grade_one):  # a lesson of a folder, as the server's children grade it
        graded.append(grade_one(lesson, SOLUTIONS, None).to_dict())
        graded.append(grade_one(lesson, tmp_path, None).to_dict())  # no lesson file there

    server._in_a_collected_session(serve)
    assert graded[0]["status"] == "passed" and checks(graded[0]) == checks(alone)
    assert graded[1] == runner.grade(lesson, tmp_path).to_dict()

    def no_session(lessons, body):
        raise RuntimeError("pytest could not start")

    monkeypatch.setattr(one_session, "in_session", no_session)
    graded.clear()
    server._in_a_collected_session(serve)  # each lesson then graded by runner.grade
    assert graded[0]["status"] == "passed" and checks(graded[0]) == checks(alone)


def descendants(root: int) -> dict[int, tuple[int, str]]:
    """Every process below ``root``: pid -> (its parent, its command line), from /proc."""
    parents, commands = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parents[int(entry)] = int(handle.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    commands[int(entry)] = handle.read().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, ValueError, IndexError):
                continue
    found: dict[int, tuple[int, str]] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, its_parent in parents.items():
            if its_parent == parent and pid not in found:
                found[pid] = (parent, commands.get(pid, ""))
                frontier.append(pid)
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_nothing_outlives_a_killed_server_and_the_next_check_starts_afresh(runtime, tmp_path):
    """SIGKILL the warm grader after a check, with its ready child, its zygote and a spare
    worker's keeper alive: none of them is alive 2 s later, and the next check removes the
    socket nobody serves and starts a new server."""
    runtime.start_in_background()
    assert runtime.ready(timeout=90), "the warm grader did not come up"
    path = runtime.socket_path()
    pid = server_pid(path)
    assert pid is not None
    assert runtime.request("l01_projections", SOLUTIONS, timeout=60) is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        below = descendants(pid)
        zygotes = [p for p, (_, command) in below.items() if "sandbox.zygote" in command]
        ready = [p for p, (parent, command) in below.items() if parent == pid and "warm.server" in command]
        keepers = [p for p, (parent, _) in below.items() if parent in zygotes]  # forked by the zygote
        if zygotes and ready and keepers:
            break
        time.sleep(0.1)
    assert zygotes and ready and keepers, below
    os.kill(pid, 9)
    deadline = time.monotonic() + 2
    while [p for p in below if alive(p)] and time.monotonic() < deadline:
        time.sleep(0.05)
    left = {p: below[p][1][:200] for p in below if alive(p)}
    assert not left, f"alive 2 s after the server was killed: {left}"
    assert path.exists()  # the killed server could not remove it
    assert runtime.request("l01_projections", SOLUTIONS, timeout=10) is None
    assert not path.exists(), "the socket nobody serves was left for the next check"
    runtime.start_in_background()
    assert runtime.ready(timeout=90) and server_pid(path) not in (None, pid)
