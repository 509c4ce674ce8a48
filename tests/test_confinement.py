"""The fences around learner code (issue 13): the grader opens nothing by name where learner
code can write, the worker writes nothing but its own bounded output, creates no socket, leaves
no process behind however it forks, and, grading a class, reads no solution and no classmate.

Each defence that needs a kernel feature (Landlock, seccomp) fails here, not skips, on a machine
without it.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from course.content.catalog import load_catalog
from course.engine.calls import errors, learner_module
from course.engine.sandbox.limits import Limits
from course.engine.sandbox.process import Worker
from tests.helpers import SOLUTIONS

LEARNER = r'''
import os, socket, subprocess, sys, threading, time
import numpy as np

def double(x):
    return x * 2

def swap_new_names_for(canary, seconds):
    """A learner process that watches its working folder and, as soon as a new name appears
    there, renames a symlink to ``canary`` over it (what inotify won 1 time in 3)."""
    def watch():
        seen = set(os.listdir("."))
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for name in os.listdir("."):
                if name not in seen and not name.startswith("link-"):
                    seen.add(name)
                    try:
                        os.symlink(canary, "link-" + name)
                        os.rename("link-" + name, name)
                    except OSError:
                        pass
    threading.Thread(target=watch, daemon=True).start()
    return 1

def system_v_segment():
    import ctypes
    if ctypes.CDLL(None).shmget(0, 1 << 20, 0o1600) < 0:  # IPC_PRIVATE, IPC_CREAT | 0600
        raise PermissionError("shmget")

def write_everywhere():
    """Every way to store bytes outside the two descriptors the worker was given."""
    refused = []
    attempts = {
        "a file in the working folder": lambda: open("ballast.bin", "wb").write(b"x" * 4096),
        "an unnamed file in the working folder": lambda: os.open(".", os.O_TMPFILE | os.O_WRONLY),
        "a file in /dev/shm": lambda: open("/dev/shm/course-ballast", "wb").write(b"x"),
        "a memfd": lambda: os.write(os.memfd_create("ballast"), b"x" * 4096),
        "a fifo": lambda: os.mkfifo("ballast.fifo"),
        "its output grown past the limit": lambda: os.ftruncate(1, 1 << 30),
        "a System V shared memory segment": system_v_segment,
    }
    for what, attempt in attempts.items():
        try:
            attempt()
        except OSError:
            refused.append(what)
    return {"refused": refused, "tried": list(attempts)}

def sockets(unix_path, udp_port):
    """What the warm grader's socket and a UDP receiver would see from learner code."""
    outcomes = {}
    def attempt(name, action):
        try:
            action()
            outcomes[name] = "done"
        except Exception as error:
            outcomes[name] = type(error).__name__
    def unix():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(unix_path)
            connection.sendall(b'{"op": "stop"}\n')
    def udp():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
            out.sendto(b"passed", ("127.0.0.1", udp_port))
    attempt("unix", unix)
    attempt("udp", udp)
    attempt("socketpair", socket.socketpair)
    attempt("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
    attempt("child udp", lambda: subprocess.run(
        [sys.executable, "-c", "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"],
        check=True, stderr=subprocess.DEVNULL))
    return outcomes

def root_powers(terminal):
    """What a learner running as root would try against the machine: type into a terminal
    (TIOCSTI), load a bpf program, watch the kernel, fault pages in by hand, make a user
    namespace, clone3; and what it holds: capabilities, environment, threads."""
    import ctypes, fcntl, termios, threading
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    numbers = {"bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "clone3": 435}
    found = {}
    try:
        with open(terminal, "wb", buffering=0) as tty:
            fcntl.ioctl(tty, termios.TIOCSTI, b"x")
        found["TIOCSTI"] = "done"
    except OSError as error:
        found["TIOCSTI"] = error.errno
    for name, number in numbers.items():
        ctypes.set_errno(0)
        result = libc.syscall(number, 0, 0, 0, 0, 0)
        found[name] = ctypes.get_errno() if result < 0 else "done"
    ctypes.set_errno(0)
    found["unshare user"] = ctypes.get_errno() if libc.unshare(0x10000000) < 0 else "done"
    status = open("/proc/self/status").read().splitlines()
    caps = [line.split(":") for line in status if line.startswith("Cap")]
    found["caps"] = {name: value.strip() for name, value in caps}
    found["env"] = sorted(os.environ)
    ran = []
    thread = threading.Thread(target=lambda: ran.append(1))
    thread.start()
    thread.join()
    found["threads"] = ran
    return found

def start_processes():
    """Every way to start another process; a thread must still start."""
    outcomes = {}
    def attempt(name, action):
        try:
            action()
            outcomes[name] = "done"
        except OSError as error:
            outcomes[name] = error.errno
    def forked():
        if os.fork() == 0:
            os._exit(0)
    attempt("fork", forked)
    attempt("subprocess", lambda: subprocess.run([sys.executable, "-c", "pass"], check=True))
    spawn = lambda: os.posix_spawn(sys.executable, [sys.executable, "-c", "pass"], {})
    attempt("posix_spawn", lambda: os.waitpid(spawn(), 0))
    import fcntl
    shared = open(os.__file__, "rb")  # a file every submission may read
    attempt("flock", lambda: fcntl.flock(shared, fcntl.LOCK_SH))
    attempt("lockf", lambda: fcntl.lockf(shared, fcntl.LOCK_SH))
    outcomes["fcntl F_GETFL"] = fcntl.fcntl(shared, fcntl.F_GETFL) >= 0  # other commands still work
    ran = []
    thread = threading.Thread(target=lambda: ran.append(1))
    thread.start()
    thread.join()
    outcomes["thread"] = ran
    return outcomes

HOPPER = """
import os, sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    if os.fork() != 0:
        os._exit(0)
time.sleep(60)
"""

def hop(marker, chains, seconds):
    for _ in range(chains):
        subprocess.Popen([sys.executable, "-S", "-c", HOPPER, str(seconds), marker],
                         start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        pass
'''


@pytest.fixture
def learner(tmp_path):
    (tmp_path / "l00_fenced.py").write_text(LEARNER)
    module = learner_module.LearnerModule(tmp_path, "l00_fenced", Limits(call_seconds=2.0))
    yield module
    module.close()


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the probe calls x86_64's syscall numbers")
def test_learner_code_holds_no_root_power_no_secret_and_types_nothing_into_a_terminal(tmp_path, monkeypatch):
    """Learners run as root in VMs and some containers (and CI does): a worker gives up every
    capability, sees only the allowed environment, and the kernel refuses it the calls that
    reach past the worker: TIOCSTI into a terminal (whose shell would run the typed command
    after the check), bpf, perf_event_open, userfaultfd, a new user namespace; clone3 says
    ENOSYS so that threads still start, through clone."""
    import errno
    import pty
    import select

    monkeypatch.setenv("COURSE_TEST_CLOUD_KEY", "an instructor's secret")
    (tmp_path / "l00_fenced.py").write_text(LEARNER)
    master, slave = pty.openpty()
    try:
        module = learner_module.LearnerModule(tmp_path, "l00_fenced", Limits(call_seconds=5.0))
        try:
            found = module.root_powers(os.ttyname(slave))
        finally:
            module.close()
        typed = select.select([master], [], [], 0.3)[0]
    finally:
        os.close(master)
        os.close(slave)
    assert not typed, "the learner's code typed into the terminal"
    assert found["TIOCSTI"] in (errno.EPERM, errno.EACCES), found
    for name in ("bpf", "perf_event_open", "userfaultfd", "unshare user"):
        assert found[name] == errno.EPERM, (name, found[name])
    assert found["clone3"] == errno.ENOSYS and found["threads"] == [1]
    assert set(found["caps"].values()) == {"0000000000000000"}, found["caps"]
    assert "COURSE_TEST_CLOUD_KEY" not in found["env"]
    assert "PATH" in found["env"] and "HOME" in found["env"]


def test_a_class_submission_starts_no_process_and_its_workers_share_one_memory_budget(tmp_path):
    """A submission's processes are its workers alone (a sealed worker forbids itself fork,
    vfork, exec and clone without CLONE_THREAD, and the grader sees the filter in /proc), it
    takes no file lock another submission could see, and its workers' memory limits together
    stay within one submission's budget."""
    import errno

    from course.engine.sandbox import landlock
    from course.instructor.classroom.class_stream import SUBMISSION_MEMORY, submission_limits

    (tmp_path / "l00_fenced.py").write_text(LEARNER)
    module = learner_module.LearnerModule(
        tmp_path, "l00_fenced", Limits(call_seconds=5.0), readable=landlock.readable_paths(tmp_path)
    )
    try:
        found = module.start_processes()
    finally:
        module.close()
    refused = {name: errno.EPERM for name in ("fork", "subprocess", "posix_spawn", "flock", "lockf")}
    assert found == {**refused, "fcntl F_GETFL": True, "thread": [1]}
    for lessons in (1, 3, 13):
        assert submission_limits(lessons).memory_bytes * (lessons + 1) <= SUBMISSION_MEMORY


def test_the_grader_keeps_no_file_of_its_own_in_the_workers_working_folder(learner):
    """The worker's output and a call's inputs live in files with no name (memfds): nothing of
    the grader's is opened, created or removed by name where learner code could swap it."""
    assert learner.double(np.arange(3.0)).tolist() == [0.0, 2.0, 4.0]
    assert os.listdir(learner.scratch) == []


def test_a_learner_process_watching_the_working_folder_cannot_redirect_a_new_workers_output(
    learner, tmp_path
):
    """A new worker started beside running learner code (as a measured one is) writes its
    output where the grader meant, never through a symlink learner code put in its place."""
    canary = tmp_path / "canary.txt"
    canary.write_text("untouched")
    assert learner.swap_new_names_for(str(canary), 10) == 1
    for _ in range(20):
        worker = Worker(learner.scratch)
        worker.kill()
        if hasattr(worker, "close_files"):  # the test also runs on the old engine, to fail there
            worker.close_files()
    assert canary.read_text() == "untouched"


def test_learner_code_writes_no_byte_beyond_its_bounded_output(learner):
    """No file anywhere (not even in its working folder), no memfd, no fifo, and its output
    never past the print limit: what a worker can store is bounded, whatever it tries."""
    if not learner.import_report().get("sandbox"):
        pytest.fail("this kernel has no Landlock: learner code could write files")
    outcome = learner.write_everywhere()
    assert outcome["refused"] == outcome["tried"]
    assert os.listdir(learner.scratch) == []
    assert all(not name.startswith("course-ballast") for name in os.listdir("/dev/shm"))


def test_learner_code_can_open_no_socket_so_it_reaches_neither_the_warm_grader_nor_the_network(
    learner, tmp_path
):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "grader.sock"))
    listener.listen(1)
    listener.settimeout(0.5)
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.settimeout(0.5)
    try:
        outcomes = learner.sockets(str(tmp_path / "grader.sock"), receiver.getsockname()[1])
        assert {name: outcomes[name] for name in ("unix", "udp", "socketpair", "netlink")} == {
            "unix": "PermissionError",
            "udp": "PermissionError",
            "socketpair": "PermissionError",
            "netlink": "PermissionError",
        }
        assert outcomes["child udp"] != "done"  # what it starts inherits the filter
        assert learner.import_report().get("filtered"), "no seccomp filter on this machine"
        with pytest.raises(TimeoutError):
            listener.accept()
        with pytest.raises(TimeoutError):
            receiver.recvfrom(64)
    finally:
        listener.close()
        receiver.close()


def marked(marker: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    if marker.encode() in handle.read():
                        with open(f"/proc/{pid}/stat") as stat:
                            if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
                                found.append(pid)
            except OSError:
                continue
    return found


def test_processes_that_keep_changing_their_pid_are_all_killed_when_the_check_ends(tmp_path):
    """Chains of fork-and-exit for 2.5 s, then a sleeper each: none may be left. A hopping
    process is seen only now and then by a scan of /proc, so the scans go on until the
    chains would have stopped hopping, and the sleepers are looked for after that."""
    (tmp_path / "l00_fenced.py").write_text(LEARNER)
    module = learner_module.LearnerModule(tmp_path, "l00_fenced", Limits(call_seconds=1.0))
    marker = f"HOPPER-{os.getpid()}-{time.monotonic_ns()}"
    started = time.monotonic()
    try:
        with pytest.raises(errors.LearnerTimeout):
            module.hop(marker, 4, 2.5)
    finally:
        module.close()
    seen: set[str] = set()
    while time.monotonic() < started + 3.5:
        seen.update(marked(marker))
        time.sleep(0.05)
    seen.update(marked(marker))
    for pid in seen:
        try:
            os.kill(int(pid), 9)
        except OSError:
            pass
    assert seen == set()


# -- a class's submissions ---------------------------------------------------------------------
L01 = load_catalog().resolve("1")
STUBS = """

def linear(x, w, b=None):
    raise NotImplementedError


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
"""
READS_THE_SOLUTION = (
    STUBS
    + """
try:
    from course.content.catalog import load_catalog

    exec(load_catalog().by_module(__name__).solution.read_text())
except Exception:
    pass
try:
    import course

    for root in (os.path.dirname(os.path.dirname(course.__file__)),
                 os.path.dirname(course.__file__)):
        for where in ("solutions", "_data/solutions"):
            path = os.path.join(root, where, "l01_projections.py")
            if os.path.exists(path):
                exec(open(path).read())
except Exception:
    pass
"""
)
COPIES_A_CLASSMATE = (
    STUBS
    + """
import glob

import numpy as np

TEMP = os.environ.get("TMPDIR") or "/tmp"  # not tempfile.gettempdir(): it wants a writable one
for path in glob.glob(os.path.join(TEMP, "course-submission-*", "l01_projections.py")):
    if os.path.abspath(path) != os.path.abspath(__file__):
        try:
            found = {}
            exec(open(path).read(), found)
            found["linear"](np.ones((1, 2)), np.ones((2, 2)))  # a finished one
            globals().update(found)
            break
        except Exception:
            pass
"""
)


def test_a_class_submission_reads_neither_the_reference_solutions_nor_a_classmates_files(tmp_path):
    """Graded as `course grade` grades a bundle, the honest solution passes, while code that
    loads the reference solution, or a classmate's extracted file found under the temp folder
    (one is planted there, as a parallel grading leaves it), gets none of it."""
    import zipfile

    try:
        from course.instructor.classroom import gradebook
    except ImportError:  # the layout of the old engine, so that this test can fail there
        from course import gradebook  # type: ignore[no-redef]

    classmate = Path(tempfile.mkdtemp(prefix="course-submission-"))
    try:
        (classmate / "l01_projections.py").write_bytes((SOLUTIONS / "l01_projections.py").read_bytes())
        points = {}
        for name, source in (
            ("honest", (SOLUTIONS / "l01_projections.py").read_text()),
            ("solution", "import os\n" + READS_THE_SOLUTION),
            ("classmate", "import os\n" + COPIES_A_CLASSMATE),
        ):
            bundle = tmp_path / f"{name}.zip"
            with zipfile.ZipFile(bundle, "w") as archive:
                archive.writestr("l01_projections.py", source)
            row = gradebook.grade_bundle(str(bundle), ["l01_projections"])
            lesson = row["lessons"]["l01_projections"]
            points[name] = (lesson["status"], lesson["points"])
        assert points["honest"][0] == "passed", points
        assert points["solution"][1] == points["classmate"][1] == 0, points
    finally:
        import shutil

        shutil.rmtree(classmate, ignore_errors=True)


def test_what_a_submission_may_read_never_holds_the_course_beyond_its_engine(tmp_path):
    """Wherever the course is installed (a clone, or a wheel inside site-packages, which every
    submission must read for numpy), the paths opened to a submission's worker hold neither
    the reference solutions, the grading tests, the tiny model nor the packaged data; a root
    that holds them is opened entry by entry around them."""
    from course.content import resources
    from course.engine.sandbox import landlock as sandbox

    site = tmp_path / "site-packages"
    for folder in ("numpy", "course/engine", "course/_data/solutions", "course/tiny_model"):
        (site / folder).mkdir(parents=True)
    (site / "six.py").write_text("")
    assert sorted(sandbox._around(str(site), {str(site / "course")})) == [
        str(site / "numpy"),
        str(site / "six.py"),
    ]
    package = resources.PACKAGE_DIR
    secret = [
        resources.data_dir("solutions"),
        resources.data_dir("grading"),
        package / "tiny_model",
        resources.CONTENT_DIR / "grading_pristine.zip",
    ]
    for path in sandbox.readable_paths(tmp_path):
        for hidden in secret:
            assert not (Path(path) == hidden or Path(path) in hidden.parents), (path, hidden)
            assert not hidden.resolve().is_relative_to(path), (path, hidden)


def test_a_paused_worker_takes_no_cpu_and_its_import_clock_stops_meanwhile(tmp_path):
    """A class's submission loaded ahead that loops at import is paused while another is
    graded (class_stream.Ahead): it takes no CPU then, and its import's time limit does not
    run while it waits."""
    (tmp_path / "l00_spinner.py").write_text("while True:\n    pass\n")
    module = learner_module.LearnerModule(tmp_path, "l00_spinner", Limits(import_seconds=30.0))
    worker = module.workers[-1]
    try:
        deadline = time.monotonic() + 10
        while worker.cpu_seconds() < 0.2 and time.monotonic() < deadline:
            time.sleep(0.05)
        loaded = worker.loaded_at
        worker.pause()
        time.sleep(0.1)  # the signal is sent by its keeper
        before = worker.cpu_seconds()
        time.sleep(0.5)
        assert worker.cpu_seconds() - before < 0.05 and worker.paused
        worker.resume()
        assert not worker.paused and worker.loaded_at >= loaded + 0.5
        resumed, deadline = worker.cpu_seconds(), time.monotonic() + 10
        while worker.cpu_seconds() <= resumed and time.monotonic() < deadline:
            time.sleep(0.05)
        assert worker.cpu_seconds() > resumed  # it spins again
    finally:
        module.close()


def test_a_submissions_workers_share_one_memory_cgroup_where_one_can_be_made(tmp_path):
    """Where a memory cgroup can be made below the grader's own (cgroup v1's memory hierarchy
    here, v2 with the controller delegated elsewhere), a submission's workers go in one before
    they load anything, and its limit bounds them together: here one worker that holds more
    than the group's 160 MiB is killed, though its own limit would let it."""
    from course.engine.sandbox import cgroups

    group = cgroups.SubmissionGroup.make(160 * 2**20)
    if group is None:
        pytest.skip("no memory cgroup can be made below this process's own on this machine")
    hungry = "import numpy as np\n\ndef hold(mib):\n    return float(np.ones(mib * 2**17).sum())\n"
    (tmp_path / "l00_hungry.py").write_text(hungry)
    module = learner_module.LearnerModule(tmp_path, "l00_hungry", Limits(call_seconds=10.0), group=group)
    try:
        assert module.hold(16) == 16 * 2**17  # small enough: the group holds it
        assert group.holds(module.workers[-1].pid)
        with pytest.raises(errors.LearnerError, match="SIGKILL"):
            module.hold(400)
    finally:
        module.close()
        group.close()
    assert not group.folder.exists()


def test_where_no_cgroup_can_be_made_a_class_falls_back_on_shares_of_the_budget(monkeypatch):
    from course.engine.sandbox import cgroups
    from course.instructor.classroom import class_stream

    monkeypatch.setattr(cgroups.SubmissionGroup, "make", classmethod(lambda cls, limit: None))
    modules = ["l01_projections", "l02_softmax", "l03_attention"]
    ahead = class_stream.Ahead([], modules, lambda: None, lambda index, row: None)
    assert not ahead.grouped and ahead.limits == class_stream.submission_limits(3)
    monkeypatch.undo()
    grouped = class_stream.Ahead([], modules, lambda: None, lambda index, row: None)
    if grouped.grouped:  # the cgroup branch: each worker keeps its own limit, the group bounds all
        assert grouped.limits == Limits.from_env()


def test_the_groups_of_a_grading_process_that_was_killed_are_swept_and_no_other(tmp_path):
    from course.engine.sandbox import cgroups

    own = cgroups.SubmissionGroup.make(64 * 2**20)
    if own is None:
        pytest.skip("no memory cgroup can be made below this process's own on this machine")
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)  # a grading process that has ended: its pid is free
    orphan = own.folder.parent / f"course-{dead}-0"
    orphan.mkdir()
    try:
        cgroups.sweep()
        assert not orphan.exists() and own.folder.exists()  # ours: this process is alive
    finally:
        own.close()
        cgroups.SubmissionGroup(orphan).close(seconds=0)
