"""The warm grader belongs to the learner alone: another local user can neither run code in it
(a numpy.py planted in the temporary folder) nor answer in its place (a squatted socket folder,
a server of theirs behind our socket); on any doubt the check is graded in the calling process.

"Another user" is real when the tests run as root (a forger started as nobody, uid 65534).
Without root no second user can be had (a user namespace maps only our own uid), so those cases
are simulated: the grader is told it runs as another uid than the one owning the folder and
socket it finds. Nothing here is skipped."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from course.engine.warm import client, private_socket
from tests.helpers import SOLUTIONS

ROOT = os.getuid() == 0
NOBODY = 65534
FORGED = {
    "lesson": "l01_projections",
    "status": "passed",
    "exercises": [{"name": "linear", "status": "passed", "checks": [{"name": "forged", "status": "passed"}]}],
}
# Serves forged "passed" answers at ``path``; ``mode``: the mode of the folder to make first ("-":
# none). Writes "ready", then "request" for every request it reads, to descriptor 1.
FORGER = r"""
import os, socket
if mode != "-":
    os.mkdir(os.path.dirname(path))
    os.chmod(os.path.dirname(path), int(mode, 8))
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(path)
listener.listen(8)
os.write(1, b"ready\n")
while True:
    connection, _ = listener.accept()
    connection.settimeout(5)
    try:
        if connection.recv(65536):
            os.write(1, b"request\n")
            connection.sendall(answer)
    except OSError:
        pass
    connection.close()
"""


@pytest.fixture
def base(monkeypatch):
    """A short socket base folder, shared like /tmp (sticky, open to all), the server on."""
    folder = Path(tempfile.mkdtemp(prefix="sq", dir="/tmp"))
    folder.chmod(0o1777)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    monkeypatch.setenv("COURSE_SERVER", "on")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


class Forger:
    """A forked process answering "passed" to everything at ``path`` (as ``uid`` when given:
    forked, not executed, since another user may not be allowed to run our interpreter)."""

    def __init__(self, path: Path, folder_mode: str = "-", uid: int | None = None) -> None:
        read, write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                os.dup2(write, 1)
                if uid is not None:
                    os.setgroups([])
                    os.setgid(uid)
                    os.setuid(uid)
                answer = json.dumps(FORGED).encode()
                exec(FORGER, {"path": str(path), "mode": folder_mode, "answer": answer})
            finally:
                os._exit(1)
        os.close(write)
        self.output = os.fdopen(read)
        assert self.output.readline().strip() == "ready", "the forger did not start"

    def requests(self) -> int:
        """Stop the forger; how many requests it read."""
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        with self.output:
            return self.output.read().split().count("request")


def our_name(base: Path, uid: int) -> Path:
    return base / f"attention-course-{uid}" / f"grader-{client.fingerprint()}.sock"


def test_the_warm_grader_never_imports_a_module_planted_in_the_temporary_folder(base, monkeypatch):
    planted = Path(tempfile.mkdtemp(prefix="tmp", dir="/tmp"))
    canary = planted / "canary"
    (planted / "numpy.py").write_text(f"open({str(canary)!r}, 'w').close()\nraise ImportError('planted')\n")
    monkeypatch.setenv("TMPDIR", str(planted))
    monkeypatch.setattr(tempfile, "tempdir", None)
    try:
        client.start_in_background()
        deadline = time.monotonic() + 90
        while not canary.exists() and not client.ready(timeout=0.5) and time.monotonic() < deadline:
            pass
        assert not canary.exists(), "the warm grader imported numpy.py from the temporary folder"
        assert client.request("l01_projections", SOLUTIONS, timeout=60) is not None
        assert not canary.exists(), "a grade of the warm grader imported the planted numpy.py"
    finally:
        client.stop()
        shutil.rmtree(planted, ignore_errors=True)


def test_without_a_runtime_folder_the_socket_lives_in_the_temporary_folder_TMPDIR(monkeypatch):
    short = Path(tempfile.mkdtemp(prefix="t", dir="/tmp"))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(short))
    monkeypatch.setattr(tempfile, "tempdir", None)
    try:
        path = client.socket_path()
        assert path is not None and path.parent == short / f"attention-course-{os.getuid()}"
        assert (path.parent.stat().st_mode & 0o777) == 0o700
    finally:
        shutil.rmtree(short, ignore_errors=True)


def test_a_socket_folder_another_user_made_first_is_never_used_and_hears_nothing(base, monkeypatch):
    if ROOT:  # a real second user makes our folder first and serves in it
        forger = Forger(our_name(base, 0), folder_mode="755", uid=NOBODY)
    else:  # the folder and socket are ours, but the grader runs as "another" uid
        real = os.getuid()
        forger = Forger(our_name(base, real + 1000), folder_mode="700")
        monkeypatch.setattr(os, "getuid", lambda: real + 1000)
    try:
        assert client.socket_path() is None
        assert client.request("l01_projections", SOLUTIONS, timeout=5) is None
        assert not client.stop() and not client.ready(timeout=0.5)
        client.start_in_background()  # does nothing: no folder of ours to serve in
    finally:
        heard = forger.requests()
    assert heard == 0, "the grader sent a request to a socket in someone else's folder"


def test_a_check_with_a_socket_folder_open_to_others_is_graded_here_not_by_the_forger(base, tmp_path):
    # The folder has our name and owner but anyone can enter it and plant a server there.
    forger = Forger(our_name(base, os.getuid()), folder_mode="777")
    environment = dict(os.environ, NO_COLOR="1")
    environment.pop("COURSE_WORKSPACE", None)
    try:
        made = subprocess.run([sys.executable, "-m", "course", "init", "ws"], cwd=tmp_path, env=environment)
        assert made.returncode == 0
        check = subprocess.run(
            [sys.executable, "-m", "course", "check", "1", "--json"],
            cwd=tmp_path / "ws",
            capture_output=True,
            text=True,
            env=environment,
            timeout=120,
        )
    finally:
        heard = forger.requests()
    assert json.loads(check.stdout)["status"] == "not-started" and check.returncode == 1
    assert heard == 0, "the check asked a server in a folder open to others"
    assert not list(our_name(base, os.getuid()).parent.glob("*.lock")), "a server was started there"


def test_a_server_of_another_user_behind_our_socket_is_not_believed(base, monkeypatch):
    path = client.socket_path()
    assert path is not None  # our private folder
    if ROOT:  # nobody's server, moved into our folder under our name and owner
        elsewhere = base / "theirs" / "grader.sock"
        forger = Forger(elsewhere, folder_mode="755", uid=NOBODY)
        os.rename(elsewhere, path)
        os.chown(path, 0, 0)
        try:
            assert client.request("l01_projections", SOLUTIONS, timeout=5) is None
            assert not client.ready(timeout=0.5)
        finally:
            heard = forger.requests()
        assert heard == 0, "the grader sent a request before checking who answers"
    else:  # a peer running as us, while the grader is told it runs as another uid
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with mine, theirs:
            assert private_socket.peer_is_us(mine)
            real = os.getuid()
            monkeypatch.setattr(os, "getuid", lambda: real + 1000)
            assert not private_socket.peer_is_us(mine)
