"""The worker boundary: learner code runs in another process and only data comes back."""

import ctypes
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from course.engine.calls import errors
from course.engine.calls import learner_module as client
from course.engine.sandbox.limits import Limits
from course.engine.wire.messages import Opaque

LEARNER = """
import os, sys, time
import numpy as np
print("imported")

def double(x, factor=2):
    return x * factor

def stub(x):
    raise NotImplementedError

def uses_earlier(x):
    from l00_earlier import helper
    return helper(x)

def shifts_input(x):
    x += 1
    return x

def shifts_a_param(x, params):
    params["w_k"] += 1
    return x

def pair(x):
    return x, {"n": 3, "half": x / 2}

def returns_object(x):
    return object()

def returns_none(x):
    pass

def echo(x, value):
    return value

def forever(x):
    while True:
        pass

def leaves_a_child(x):
    import subprocess
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    while True:
        time.sleep(1)

def exits(x):
    os._exit(0)

def raises(x):
    return np.zeros(3) @ np.zeros(4)

def says_no_input_changed(x):
    worker = sys.modules["course.engine.sandbox.worker.main"]
    worker._array_equal = lambda *args, **kwargs: True
    np.array_equal = lambda *args, **kwargs: True
    real = worker._call

    def forged(*args, **kwargs):
        reply, out = real(*args, **kwargs)
        reply["mutated"] = []
        return reply, out

    worker._call = forged
    x += 1
    return x

KEPT = []

def keeps_its_input(x):
    KEPT.append(x)
    return x * 1

def writes_to_what_it_kept(x):
    KEPT[0][...] = 7
    return x * 1

def negates_zeros(x):
    x *= -1
    return x

def truncates_its_inputs(x):
    out = x * 2
    os.ftruncate(sys.modules["course.engine.sandbox.worker.main"]._shared["fd"], 0)  # the file it was given
    return out
"""


@pytest.fixture
def learner(tmp_path):
    (tmp_path / "l00_demo.py").write_text(LEARNER)
    (tmp_path / "l00_earlier.py").write_text("def helper(x):\n    raise NotImplementedError\n")
    module = client.LearnerModule(tmp_path, "l00_demo", Limits(call_seconds=1.0))
    yield module
    module.close()


def test_a_call_returns_plain_arrays_with_their_dtype(learner):
    out = learner.double(np.arange(3, dtype=np.float32), factor=3)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    assert out.tolist() == [0.0, 3.0, 6.0]


def test_a_call_like_the_last_but_for_a_scalars_type_gets_that_type(learner):
    x = np.arange(3)
    assert learner.double(x, factor=2).dtype == np.int64
    assert learner.double(x, factor=2).dtype == np.int64  # the same request again
    assert learner.double(x, factor=2.0).dtype == np.float64  # equal to 2, but a float
    assert learner.double(x, factor=True).tolist() == [0, 1, 2]
    assert learner.double(np.arange(4), factor=2).tolist() == [0, 2, 4, 6]


def test_replies_alike_but_for_a_values_type_or_an_arrays_values_keep_theirs(learner):
    for value in [2, 2, 2.0, True, 2, "2", [2], (2,), None, np.float32(2), np.float64(2)]:
        back = learner.echo(np.ones(1), value)
        assert back == value and type(back) is type(value), (value, back)
    for n in [1, 2, 1, 3]:
        assert learner.double(np.full(2, n)).tolist() == [2 * n, 2 * n]


def test_tuples_dicts_and_scalars_come_back_as_data(learner):
    x, extra = learner.pair(np.ones(2))
    assert x.tolist() == [1.0, 1.0] and extra["n"] == 3 and extra["half"].tolist() == [0.5, 0.5]


def test_objects_that_are_not_data_come_back_described(learner):
    out = learner.returns_object(np.ones(1))
    assert isinstance(out, Opaque) and out.type_name == "object"
    assert learner.returns_none(np.ones(1)) is None


def test_a_stub_is_reported_as_not_started(learner):
    with pytest.raises(errors.NotStarted):
        learner.stub(np.ones(1))


def test_a_stub_in_an_earlier_lesson_is_named(learner):
    with pytest.raises(errors.DependencyNotReady, match="l00_earlier.py") as caught:
        learner.uses_earlier(np.ones(1))
    assert caught.value.module == "l00_earlier"


def test_modifying_an_input_in_place_is_detected(learner):
    x = np.zeros(3)
    learner.shifts_input(x)
    assert learner.mutated == ["argument 1"]
    assert x.tolist() == [0.0, 0.0, 0.0]  # the grader's own copy is never touched
    learner.double(x)
    assert learner.mutated == []
    learner.shifts_a_param(x, {"w_q": np.ones(2), "w_k": np.ones(2)})
    assert learner.mutated == ["argument 2['w_k']"]
    learner.shifts_a_param(x, params={"w_k": np.ones(2)})
    assert learner.mutated == ["params['w_k']"]


def test_the_grader_reads_the_inputs_back_itself_whatever_the_worker_says(learner):
    x = np.zeros(3)
    learner.says_no_input_changed(x)  # replaces the worker's comparisons and its replies
    assert learner.mutated == ["argument 1"]
    learner.shifts_input(x)
    assert learner.mutated == ["argument 1"]
    learner.double(x)
    assert learner.mutated == []
    learner.keeps_its_input(np.zeros(3))
    assert learner.mutated == []
    learner.writes_to_what_it_kept(np.zeros(3))  # an earlier call's array: memory read at reply
    assert learner.mutated == ["argument 1"]
    learner.negates_zeros(np.zeros(2))  # -0.0 == 0.0, as np.array_equal says
    assert learner.mutated == []
    learner.truncates_its_inputs(np.ones(4))  # the grader's descriptor reads a shorter file
    assert learner.mutated == ["argument 1"]
    assert learner.double(np.ones(2)).tolist() == [2.0, 2.0] and learner.mutated == []
    assert x.tolist() == [0.0, 0.0, 0.0]


def test_an_exception_shows_the_learners_line_and_message(learner):
    with pytest.raises(errors.LearnerError) as caught:
        learner.raises(np.ones(1))
    message = str(caught.value)
    assert "l00_demo.py, line" in message and "np.zeros(3) @ np.zeros(4)" in message
    assert "ValueError" in message and "client.py" not in message


def test_a_missing_function_is_named(learner):
    with pytest.raises(errors.LearnerError, match="no function named `renamed`"):
        learner.renamed(np.ones(1))


def test_an_endless_loop_times_out_and_the_next_call_gets_a_fresh_worker(learner):
    started = time.monotonic()
    with pytest.raises(errors.LearnerTimeout, match="did not return within 1 s"):
        learner.forever(np.ones(1))
    assert time.monotonic() - started < 3
    with pytest.raises(errors.LearnerTimeout, match="earlier call"):
        learner.forever(np.ones(1))  # not run again
    assert learner.double(np.ones(1)).tolist() == [2.0]


def living_members(group: int) -> list[int]:
    """Processes of a process group that are still running (zombies awaiting reaping excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == group and fields[0] != "Z":
                found.append(int(entry))
    return found


def test_a_timeout_kills_children_the_learner_started(learner):
    with pytest.raises(errors.LearnerTimeout):
        learner.leaves_a_child(np.ones(1))
    group = learner.workers[0].pid  # the worker leads its own process group
    assert group is not None and group != learner.workers[0].process.pid
    deadline = time.monotonic() + 2
    while living_members(group) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert living_members(group) == []


def test_a_process_exit_is_an_error_not_a_pass(learner):
    with pytest.raises(errors.LearnerError, match="exit code 0"):
        learner.exits(np.ones(1))
    assert learner.double(np.ones(1)).tolist() == [2.0]


def test_what_the_learner_printed_is_kept(learner):
    learner.double(np.ones(1))
    assert "imported" in learner.output()


def test_a_syntax_error_is_reported_with_line_and_caret(tmp_path):
    (tmp_path / "l00_broken.py").write_text(
        textwrap.dedent("""\
        import numpy as np

        def f(x:
            return x
        """)
    )
    module = client.LearnerModule(tmp_path, "l00_broken")
    try:
        report = module.import_report()
    finally:
        module.close()
    message = errors.format_learner_error(report["error"])
    assert not report["ok"] and "l00_broken.py, line 3" in message
    assert "def f(x:" in message and "^" in message


CONFINED = """
import os, signal, socket, subprocess, sys

def write_outside(path):
    with open(path, "w") as handle:
        handle.write("changed by learner code")

def write_inside():
    with open("notes.txt", "w") as handle:
        handle.write("not even in its working folder")
    return 1

def signal_the_grader():
    os.kill(os.getppid(), signal.SIGTERM)

def connect():
    socket.create_connection(("127.0.0.1", 9), timeout=1)

def escape_and_sleep(marker):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", marker],
                     start_new_session=True)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)", marker])
        os._exit(0)
    return 1
"""


@pytest.fixture
def confined(tmp_path):
    (tmp_path / "l00_confined.py").write_text(CONFINED)
    module = client.LearnerModule(tmp_path, "l00_confined", Limits(call_seconds=2.0))
    if not module.import_report().get("sandbox"):
        module.close()
        pytest.skip("this kernel has no Landlock")
    yield module
    module.close()


def test_learner_code_cannot_write_any_file_not_even_in_its_scratch_folder(confined, tmp_path):
    target = tmp_path / "l00_confined.py"
    before = target.read_text()
    with pytest.raises(errors.LearnerError, match="PermissionError"):
        confined.write_outside(str(target))
    assert target.read_text() == before
    with pytest.raises(errors.LearnerError, match="may write no file"):
        confined.write_inside()
    assert os.listdir(confined.scratch) == []


def test_learner_code_cannot_signal_the_grader_or_open_connections(confined):
    with pytest.raises(errors.LearnerError, match="PermissionError"):
        confined.signal_the_grader()
    with pytest.raises(errors.LearnerError, match="PermissionError"):
        confined.connect()


def test_processes_that_leave_the_process_group_are_killed_at_close(tmp_path):
    (tmp_path / "l00_confined.py").write_text(CONFINED)
    module = client.LearnerModule(tmp_path, "l00_confined")
    marker = f"ESCAPEE-{os.getpid()}-{time.monotonic_ns()}"
    assert module.escape_and_sleep(marker) == 1
    time.sleep(0.3)
    module.close()
    assert [pid for pid in os.listdir("/proc") if pid.isdigit() and marker in cmdline(pid)] == []


def cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def is_subreaper() -> bool:
    flag = ctypes.c_int(-1)
    assert ctypes.CDLL(None).prctl(37, ctypes.byref(flag), 0, 0, 0) == 0  # PR_GET_CHILD_SUBREAPER
    return flag.value != 0


def test_grading_leaves_the_callers_own_processes_alone(tmp_path):
    """Only the workers' subtrees are killed: the caller is not made a subreaper, and a process
    it started itself while grading (after the worker, so "born since" would catch it) lives on."""
    (tmp_path / "l00_confined.py").write_text(CONFINED)
    marker = f"ESCAPEE-{os.getpid()}-{time.monotonic_ns()}"
    module = client.LearnerModule(tmp_path, "l00_confined")
    own = None
    try:
        assert module.escape_and_sleep(marker) == 1
        own = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        time.sleep(0.3)
        module.close()
        assert not is_subreaper()
        assert own.poll() is None, "close() killed a process the caller started itself"
        assert [pid for pid in os.listdir("/proc") if pid.isdigit() and marker in cmdline(pid)] == []
    finally:
        module.close()
        if own is not None:
            own.kill()
            own.wait()


def test_a_grader_that_is_killed_leaves_no_learner_process_behind(tmp_path):
    """The keeper stops when the grader's end of its pipe closes, however the grader ended."""
    (tmp_path / "l00_confined.py").write_text(CONFINED)
    marker = f"ESCAPEE-{os.getpid()}-{time.monotonic_ns()}"
    script = (
        "import sys, time; from pathlib import Path; from course.engine.calls import learner_module; "
        f"module = learner_module.LearnerModule(Path({str(tmp_path)!r}), 'l00_confined'); "
        f"module.escape_and_sleep({marker!r}); print('ready', flush=True); time.sleep(300)"
    )
    grader = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert grader.stdout is not None and grader.stdout.readline() == b"ready\n"
        assert [pid for pid in os.listdir("/proc") if pid.isdigit() and marker in cmdline(pid)]
    finally:
        grader.kill()
        grader.wait()
    deadline, left = time.monotonic() + 10, ["?"]
    while time.monotonic() < deadline:
        left = [pid for pid in os.listdir("/proc") if pid.isdigit() and marker in cmdline(pid)]
        if not left:
            break
        time.sleep(0.05)
    assert left == []
