"""What the worker zygote (course/engine/sandbox/zygote.py) adds, seen by learner code that goes looking:
it holds no socket and no other worker's descriptors, cannot reach into or stop the zygote, and
whatever happens to the zygote (killed, stopped), the next worker still starts and grades."""

import os
import signal
import stat
import time

import numpy as np
import pytest

from course.engine.calls import learner_module, measured
from course.engine.sandbox import process as processes
from course.engine.sandbox import zygote
from course.engine.sandbox.limits import Limits

LEARNER = """
import os, signal, stat

def double(x):
    return x * 2

def descriptors():
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            info = os.stat(f"/proc/self/fd/{name}")
        except OSError:
            continue
        kind = "socket" if stat.S_ISSOCK(info.st_mode) else "pipe" if stat.S_ISFIFO(info.st_mode) else "file"
        found.append([int(name), kind, info.st_ino])
    return found

def parent_chain():
    def parent(pid):
        with open(f"/proc/{pid}/status") as handle:
            return int(next(line for line in handle if line.startswith("PPid:")).split()[1])
    keeper = os.getppid()
    return [keeper, parent(keeper)]

def look_into(pid):
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError as error:
        return type(error).__name__
    opened = []
    for name in names:
        try:
            fd = os.open(f"/proc/{pid}/fd/{name}", os.O_RDWR)
        except OSError:
            continue
        opened.append(stat.S_ISSOCK(os.fstat(fd).st_mode))
    return opened

def signal_each(pids, number):
    said = []
    for pid in pids:
        try:
            os.kill(pid, number)
            said.append("sent")
        except OSError as error:
            said.append(type(error).__name__)
    return said
"""


@pytest.fixture
def learner_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(zygote, "_failures", 0)  # earlier tests here broke zygotes on purpose
    (tmp_path / "l00_nosy.py").write_text(LEARNER)
    return tmp_path


def warm_zygote() -> zygote._Zygote:
    """This process's zygote, started if need be and waited for until it has imported (until
    then workers are exec'd)."""
    deadline = time.monotonic() + 30
    while (found := zygote.zygote(processes.worker_environment())) is None:
        assert time.monotonic() < deadline, "no zygote came up"
        time.sleep(0.02)
    return found


def module(folder, seconds=2.0):
    return learner_module.LearnerModule(folder, "l00_nosy", Limits(call_seconds=seconds))


def forked(learner: learner_module.LearnerModule) -> bool:
    return isinstance(learner.workers[0].process, processes._ForkedKeeper)


def test_learner_code_started_by_the_zygote_holds_no_socket_and_only_its_own_descriptors(learner_folder):
    warm_zygote()
    learner = module(learner_folder)
    try:
        assert forked(learner), "this process's workers should come from its zygote"
        found = learner.descriptors()
        assert [entry for entry in found if entry[1] == "socket"] == []
        # stdin, the output twice, its two pipes, the inputs file (and its own mapping of it)
        assert len([entry for entry in found if entry[1] == "pipe"]) == 2, found
        assert len(found) <= 8, found
    finally:
        learner.close()


def test_two_workers_from_one_zygote_do_not_see_each_others_descriptors(learner_folder):
    warm_zygote()
    first, second = module(learner_folder), module(learner_folder)
    try:
        worker = first.workers[0]
        theirs = {
            os.fstat(fd).st_ino
            for fd in (
                worker._request,
                worker._response,
                worker._control,
                worker._status,
                worker.output,
                worker.inputs,
            )
        }
        seen = {entry[2] for entry in second.descriptors()}
        assert seen.isdisjoint(theirs)
        assert first.double(np.arange(3)).tolist() == [0, 2, 4]
    finally:
        first.close()
        second.close()


def test_learner_code_cannot_look_into_or_signal_the_keeper_or_the_zygote(learner_folder):
    warm_zygote()
    learner = module(learner_folder)
    try:
        keeper, forker = learner.parent_chain()
        zygote_now = zygote._current
        assert zygote_now is not None and forker == zygote_now.process.pid
        seen = learner.look_into(forker)
        if os.geteuid() != 0:  # root may look anyway
            assert seen == "PermissionError"  # not dumpable: no /proc/<pid>/fd
        assert True not in seen  # and no one opens its socket through /proc
        if learner.import_report().get("sandbox", 0) >= 6:  # Landlock signal scoping
            assert learner.signal_each([keeper, forker], signal.SIGSTOP) == ["PermissionError"] * 2
    finally:
        learner.close()
    again = module(learner_folder)
    try:
        assert again.double(np.arange(2)).tolist() == [0, 2]
    finally:
        again.close()


def test_a_killed_zygote_costs_one_exec_started_keeper_and_grading_goes_on(learner_folder):
    first = warm_zygote()
    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait()
    learner = module(learner_folder)
    try:
        assert learner.double(np.arange(3)).tolist() == [0, 2, 4]  # exec'd: the zygote is gone
        assert not forked(learner)
    finally:
        learner.close()
    assert warm_zygote() is not first
    learner = module(learner_folder)
    try:
        assert forked(learner)
        assert learner.double(np.arange(3)).tolist() == [0, 2, 4]
    finally:
        learner.close()


def test_a_stopped_zygote_is_given_up_in_time_and_its_late_keeper_runs_nothing(learner_folder, monkeypatch):
    monkeypatch.setattr(processes, "_FORK_SECONDS", 0.5)
    stopped = warm_zygote()
    os.kill(stopped.process.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        learner = module(learner_folder)
        try:
            assert learner.double(np.arange(3)).tolist() == [0, 2, 4]
            assert not forked(learner) and time.monotonic() - started < 5
        finally:
            learner.close()
    finally:
        os.kill(stopped.process.pid, signal.SIGCONT)
    # Resumed, it forks the order it was given: that keeper finds the grader's ends closed and
    # stops; the zygote itself was forgotten and ends once its socket is closed.
    assert stopped.process.wait(timeout=10) is not None
    assert warm_zygote() is not stopped
    learner = module(learner_folder)
    try:
        assert forked(learner) and learner.double(np.arange(1)).tolist() == [0]
    finally:
        learner.close()


def test_graders_forked_from_one_process_share_its_zygote_at_the_same_time(learner_folder):
    shared = warm_zygote()  # before the forks
    children = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                for _ in range(4):
                    learner = module(learner_folder)
                    ok = forked(learner) and zygote._current is shared
                    ok = ok and learner.double(np.arange(3)).tolist() == [0, 2, 4]
                    learner.close()
                    if not ok:
                        break
                else:
                    code = 0
            finally:
                os._exit(code)
        children.append(pid)
    for pid in children:
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert shared.process.poll() is None


def test_an_order_from_anyone_but_the_grader_is_impossible_and_a_malformed_one_is_ignored(learner_folder):
    """The socket is a socketpair (no name to connect to) held by the grader and its forks only;
    a malformed order (wrong descriptor count, not JSON) forks nothing and the zygote lives on."""
    current = warm_zygote()
    assert stat.S_ISSOCK(os.fstat(current.socket.fileno()).st_mode)
    read, write = os.pipe()
    try:
        assert current.order([read, write], learner_folder, False, dict(os.environ))
        current.socket.sendmsg([b"not json"])
    finally:
        os.close(read)
        os.close(write)
    learner = module(learner_folder)
    try:
        assert forked(learner) and zygote._current is current
        assert learner.double(np.arange(2)).tolist() == [0, 2]
    finally:
        learner.close()


def test_a_process_starts_its_zygote_with_its_second_worker_and_never_waits_for_it(tmp_path):
    """A cold check (one worker) pays for no zygote; no worker waits for the zygote's imports:
    until it is ready, workers are exec'd as before."""
    import subprocess
    import sys

    script = (
        "from pathlib import Path; from course.engine.sandbox import process as processes, zygote\n"
        "for _ in range(2):\n"
        f"    w = processes.Worker(Path({str(tmp_path)!r}))\n"
        "    print(type(w.process).__name__, zygote._current is not None); w.kill(); w.close_files()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["Popen", "False", "Popen", "True"], done.stderr


@pytest.mark.parametrize("forked", [True, False])
def test_a_measured_worker_counts_its_memory_from_a_blank_worker_started_the_same_way(tmp_path, forked):
    """A forked worker's resident size is megabytes below an exec'd one's: measuring one against
    the other would let a learner's peak look smaller than it is (or an honest one larger). So
    the blank a measurement counts from is a worker started the same way."""
    warm_zygote()
    limits = Limits()
    (tmp_path / "course_empty.py").write_text("", encoding="utf-8")
    worker = processes.Worker(tmp_path, measured=True, may_fork=forked)
    try:
        assert worker.forked is forked
        worker.load(tmp_path, "course_empty", limits)
        assert worker.wait_imported(time.monotonic() + 30)["ok"]
        resident = worker.memory()[0]
    finally:
        worker.kill()
        worker.close_files()
    blank = measured.blank_resident(limits, forked)
    assert blank is not None
    assert abs(resident - blank[0]) < 2 * 1024**2


MEASURED = """
import numpy as np

def hold(n):
    return float(np.ones(n).sum())  # n float64 numbers at once

def many_routines(x):
    # library code numpy's import never ran: its pages are faulted in during the call
    u, s, vt = np.linalg.svd(x)
    spectrum = np.fft.rfft(x, axis=0)
    return float(s.sum() + np.abs(spectrum).sum() + np.linalg.det(x) + np.sort(x, axis=None)[0])
"""


@pytest.mark.parametrize("forked", [True, False])
def test_a_measured_call_counts_what_it_allocates_not_library_pages_it_runs(tmp_path, forked, monkeypatch):
    """Both kinds of measured worker count a call's own allocations (8 MiB held: 8 MiB more),
    and neither counts the pages of numpy's libraries a call runs for the first time (they
    are made resident before any measurement, see ``keeper._fault_in_mapped_files``)."""
    warm_zygote()
    (tmp_path / "l00_measured.py").write_text(MEASURED, encoding="utf-8")
    original = processes.Worker.__init__

    def started_so(self, scratch, measured=False, may_fork=True):
        original(self, scratch, measured, may_fork=forked if measured else may_fork)

    monkeypatch.setattr(processes.Worker, "__init__", started_so)
    learner = learner_module.LearnerModule(tmp_path, "l00_measured")
    try:
        x = np.random.default_rng(0).standard_normal((64, 64))
        routines = learner.measure("many_routines", x)
        held = learner.measure("hold", 2**20)
        assert isinstance(learner.meter.process, processes._ForkedKeeper) is forked
    finally:
        learner.close()
    mib = 2**20
    assert routines.peak_bytes < 1.5 * mib, routines.peak_bytes / mib
    assert 8 * mib <= held.peak_bytes < 10 * mib, held.peak_bytes / mib
