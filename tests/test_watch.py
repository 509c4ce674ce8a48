"""`course watch` in a real pseudo-terminal: it grades, redraws after a save, and advances."""

import fcntl
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import termios
import time

import pytest

from course.content.catalog import load_catalog
from tests.helpers import SOLUTIONS


def controlling_terminal():
    """In the child: a new session whose controlling terminal is the pty (so ^C is SIGINT), with
    SIGINT delivered and handled by default, as a shell in a real terminal starts a program (the
    test process may run with signals blocked or ignored: the pytest-xdist worker, a library)."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Terminal:
    """`course watch` running in a pseudo-terminal; ``expect`` reads its screen output."""

    def __init__(self, cwd, *args):
        self.master, slave = pty.openpty()
        env = dict(os.environ, NO_COLOR="1", COLUMNS="100", LINES="40", TERM="xterm", COURSE_SERVER="off")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "course", "watch", *args],
            cwd=cwd,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            preexec_fn=controlling_terminal,
        )
        os.close(slave)
        self.screen = ""

    def expect(self, text, seconds=20.0):
        deadline = time.monotonic() + seconds
        while text not in self.screen:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"{text!r} never appeared; the screen ends with:\n{self.screen[-1500:]}"
            ready, _, _ = select.select([self.master], [], [], remaining)
            if ready:
                try:
                    self.screen += os.read(self.master, 65536).decode("utf-8", "replace")
                except OSError:  # the program ended
                    break
        assert text in self.screen

    def send(self, keys):
        self.screen = ""
        os.write(self.master, keys.encode())

    def close(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        os.close(self.master)


@pytest.fixture
def workspace(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "course", "init", "ws"], cwd=tmp_path, check=True, capture_output=True
    )
    return tmp_path / "ws"


@pytest.mark.parametrize("mode", [(), ("--poll",)], ids=["change events", "polling"])
def test_watch_redraws_after_a_save_and_moves_on_with_n_when_green(workspace, mode):
    terminal = Terminal(workspace, *mode)
    try:
        terminal.expect("0 of 18 checks passed")
        terminal.expect("every save is checked again. Stuck? Press h for a hint.")
        terminal.send("n")  # not green yet: it says so and stays
        terminal.expect("not green yet: n moves on")
        terminal.screen = ""
        shutil.copy(SOLUTIONS / "l01_projections.py", workspace)
        # The save alone redraws the screen (no key is pressed); 60 s only guards against a hang.
        terminal.expect("18 of 18 checks passed", seconds=60)
        terminal.expect("Lesson 1 passed. Press n for the next lesson.")
        terminal.expect(f"1 of {len(load_catalog().available())} lessons passed")
        terminal.send("h")
        terminal.expect("Hints for")
        terminal.expect("press h again")
        terminal.send("n")
        terminal.expect("Lesson 02")
        terminal.send("q")
        terminal.expect("Stopped watching")
        assert terminal.process.wait(timeout=10) == 0
    finally:
        terminal.close()


def test_n_shows_the_next_lessons_goals_as_course_next_does(workspace):
    shutil.copy(SOLUTIONS / "l01_projections.py", workspace)
    upcoming = load_catalog().resolve("2")
    terminal = Terminal(workspace)
    try:
        terminal.expect("Lesson 1 passed. Press n for the next lesson.", seconds=60)
        terminal.send("n")
        terminal.expect("You will learn to")
        terminal.expect(upcoming.goals[0][:40])
        terminal.expect("and write, in order:")
        terminal.send("q")
        terminal.expect("Stopped watching")
    finally:
        terminal.close()


def test_watch_without_a_terminal_refuses_instead_of_hanging(workspace):
    done = subprocess.run(
        [sys.executable, "-m", "course", "watch"],
        cwd=workspace,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "needs a terminal" in done.stdout


def test_ctrl_c_stops_watching_and_leaves_the_progress_readable(workspace):
    terminal = Terminal(workspace)
    try:
        terminal.expect("0 of 18 checks passed")
        terminal.send("\x03")
        terminal.expect("Stopped watching")
        assert terminal.process.wait(timeout=10) == 0
    finally:
        terminal.close()
    import json

    state = json.loads((workspace / ".course" / "state.json").read_text())
    assert state["lessons"]["l01_projections"]["status"] == "not-started"


def test_ctrl_c_during_a_grading_in_this_process_stops_it_instead_of_being_swallowed():
    """pytest turns a ^C into an exit code: the runner raises it again, so `course watch` (or
    a check) stops at the first ^C. The ^C is sent once pytest has collected lesson 11's grading
    tests, so it lands inside pytest's run."""
    script = (
        "import os, signal, sys, threading, time\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from course.content.catalog import load_catalog\n"
        "from course.engine.grading.runner import grade\n"
        "lesson = load_catalog().resolve('11')\n"
        "def interrupt_once_pytest_collected():\n"
        "    while 'test_l11_head_pruning' not in sys.modules:\n"
        "        time.sleep(0.001)\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "threading.Thread(target=interrupt_once_pytest_collected, daemon=True).start()\n"
        "try:\n"
        "    grade(lesson, sys.argv[1])\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n"
        "else:\n"
        "    print('graded to the end')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(SOLUTIONS)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, COURSE_SERVER="off"),
    )
    assert done.stdout.strip().splitlines()[-1:] == ["interrupted"], done.stdout + done.stderr[-2000:]
