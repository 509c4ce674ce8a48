"""Issue 10, item 4: a call's peak memory is measured by the grader, from the kernel's count of
the worker's resident memory, never from a figure the worker reports; cheats that hide memory
from an in-process count (tracemalloc.stop, mmap, a child process, resetting the mark) are
measured anyway or refused."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from course.engine.calls import errors, learner_module
from course.engine.sandbox.limits import Limits
from course.engine.testing import compare

T, S = 64, 200_000  # a (T, S) float64 array: 97.7 MiB
FULL = T * S * 8
MIB = 1024**2

SOURCE = textwrap.dedent(
    """
    import mmap, os, subprocess, sys, tracemalloc
    import numpy as np

    def full(t, s):
        scores = np.ones((t, s))
        return scores.sum(axis=1)

    def streaming(t, s):
        total = np.zeros(t)
        for start in range(0, s, 64):
            total += np.ones((t, min(64, s - start))).sum(axis=1)
        return total

    def untraced(t, s):
        tracemalloc.stop()
        return full(t, s)

    def in_mmap(t, s):
        memory = mmap.mmap(-1, t * s * 8)
        scores = np.frombuffer(memory, dtype=np.float64).reshape(t, s)
        scores[:] = 1.0
        result = scores.sum(axis=1)
        del scores
        memory.close()
        return result

    def resets_the_mark(t, s):
        result = full(t, s)
        try:
            with open("/proc/self/clear_refs", "w") as handle:
                handle.write("5")
        except OSError:
            pass
        return result

    KEPT = []

    def keeps(t, s):
        KEPT.append(np.ones((t, s)))
        return np.zeros(t)

    def uses_kept(t, s):
        KEPT[0][:] = 2.0
        return KEPT[0].sum(axis=1)

    def drop(t, s):
        KEPT.clear()
        return np.zeros(t)

    def total(x):
        return x.sum()

    def full_with(x, t, s):
        return full(t, s) + x[0]

    def in_fork(t, s):
        if os.fork() == 0:
            np.ones((t, s))
            os._exit(0)
        return np.full(t, float(s))

    def in_multiprocessing(t, s):
        import multiprocessing
        child = multiprocessing.get_context("fork").Process(target=full, args=(t, s))
        child.start()
        return np.full(t, float(s))

    def in_a_pipe(t, s):
        read, write = os.pipe()  # a pipe's buffer is not resident memory of the worker's
        return np.zeros(t)

    def with_pages_dropped(t, s):
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        page = mmap.PAGESIZE
        ctypes.set_errno(0)
        buffer = mmap.mmap(-1, page)
        address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
        if libc.madvise(ctypes.c_void_p(address), page, 4) != 0:  # MADV_DONTNEED
            raise PermissionError(ctypes.get_errno(), "madvise not permitted")
        return np.zeros(t)

    def printed(t, s):
        sys.stdout.write("x" * (6 * 1024 * 1024))  # 6 MiB kept in the worker's output file
        sys.stdout.flush()
        return np.zeros(t)

    CALLS = {  # system call numbers of kernel objects that hold data outside a process
        "x86_64": {"shmget": 29, "mq_open": 240, "add_key": 248, "request_key": 249, "bpf": 321},
        "aarch64": {"shmget": 194, "mq_open": 180, "add_key": 217, "request_key": 218, "bpf": 280},
    }
    ARGUMENTS = {
        "shmget": (0, 1 << 20, 0o1600),  # IPC_PRIVATE, 1 MiB, IPC_CREAT | 0600
        "mq_open": (b"course-queue", 0o102, 0o600, 0),  # O_CREAT | O_RDWR
        "add_key": (b"user", b"course", b"data", 4, -2),  # into the thread keyring
        "request_key": (b"user", b"course", 0, -2),
        "bpf": (0, 0, 0),  # BPF_MAP_CREATE
    }

    def kernel_object(name):
        import ctypes, errno, platform
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        arguments = [
            ctypes.c_char_p(a) if isinstance(a, bytes) else ctypes.c_long(a) for a in ARGUMENTS[name]
        ]
        ctypes.set_errno(0)
        if libc.syscall(ctypes.c_long(CALLS[platform.machine()][name]), *arguments) < 0:
            if ctypes.get_errno() == errno.EPERM:
                raise PermissionError(errno.EPERM, f"{name}: operation not permitted")
            raise OSError(ctypes.get_errno(), f"{name} failed otherwise")
        return np.zeros(1)

    def into_its_inputs(x):
        for fd in range(3, 256):
            try:
                if os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:course-inputs"):
                    os.pwrite(fd, b"\1" * (6 * 1024 * 1024), 0)
            except OSError:
                pass
        return np.zeros(1)

    def over_what_it_printed(t, s):
        os.pwrite(1, b"y" * (6 * 1024 * 1024), 0)  # 6 MiB of data where its output was
        return np.zeros(t)

    def in_subprocess(t, s):
        subprocess.Popen([sys.executable, "-c", f"import numpy; numpy.ones(({t}, {s}))"])
        return np.full(t, float(s))
    """
)


@pytest.fixture(scope="module")
def lesson(tmp_path_factory: pytest.TempPathFactory) -> Iterator[learner_module.LearnerModule]:
    folder: Path = tmp_path_factory.mktemp("measured")
    (folder / "l00_memory.py").write_text(SOURCE, encoding="utf-8")
    module = learner_module.LearnerModule(folder, "l00_memory", Limits(call_seconds=20.0))
    yield module
    module.close()


@pytest.mark.parametrize("name", ["full", "untraced", "in_mmap", "resets_the_mark"])
def test_a_full_scores_array_is_measured_near_its_size_however_it_is_allocated(
    lesson: learner_module.LearnerModule, name: str
) -> None:
    measured = lesson.measure(name, T, S)
    assert measured.result.shape == (T,) and measured.result[0] == S
    assert 0.9 * FULL < measured.peak_bytes < FULL + 60 * MIB, measured.peak_bytes / MIB
    with pytest.raises(AssertionError, match=r"used \d+\.\d MiB of memory at its peak; it must stay under"):
        compare.check_peak_below(measured.peak_bytes, FULL / 2, what=f"{name}(q, k, v)")


def test_streaming_over_blocks_of_keys_is_measured_far_smaller(lesson: learner_module.LearnerModule) -> None:
    measured = lesson.measure("streaming", T, S)
    assert measured.result[0] == S
    assert measured.peak_bytes < 20 * MIB, measured.peak_bytes / MIB
    compare.check_peak_below(measured.peak_bytes, FULL / 2, what="streaming(q, k, v)")
    assert lesson.streaming(T, 128)[0] == 128  # the usual worker still answers ordinary calls


def test_memory_kept_from_an_earlier_call_counts(lesson: learner_module.LearnerModule) -> None:
    lesson.measure("keeps", T, S)  # allocated in one call, written in the next: still counted
    try:
        assert lesson.measure("uses_kept", T, S).peak_bytes > 0.9 * FULL
    finally:
        lesson.measure("drop", T, S)
    assert lesson.measure("streaming", T, S).peak_bytes < 20 * MIB  # given back: counted no more


def test_an_earlier_calls_inputs_do_not_count_in_a_later_calls_peak(
    lesson: learner_module.LearnerModule,
) -> None:
    big = np.ones(FULL * 8 // 10 // 8)  # mapped in the worker, in the file the inputs travel in
    assert lesson.measure("total", big).result == big.size
    measured = lesson.measure("full_with", np.ones(1), T, S)  # its own inputs are a few bytes
    assert measured.peak_bytes < FULL + 40 * MIB, measured.peak_bytes / MIB


@pytest.mark.parametrize("name", ["in_fork", "in_multiprocessing", "in_subprocess"])
def test_a_measured_call_may_not_start_another_process(
    lesson: learner_module.LearnerModule, name: str
) -> None:
    with pytest.raises(errors.LearnerError, match="may not start other processes"):
        lesson.measure(name, T, S)


@pytest.mark.parametrize("name", ["in_a_pipe", "with_pages_dropped"])
def test_a_measured_call_may_hold_nothing_where_its_resident_memory_would_not_show_it(
    lesson: learner_module.LearnerModule, name: str
) -> None:
    """A pipe of its own (its buffer) and dropping pages with madvise (room for as much data,
    unseen) are refused to the measured worker; madvise's other advice still works."""
    with pytest.raises(errors.LearnerError, match="not permitted"):
        lesson.measure(name, T, S)


def test_what_a_measured_call_prints_counts_as_its_memory(lesson: learner_module.LearnerModule) -> None:
    """What it printed is kept in the worker's output file (a memfd), outside its resident
    memory: the grader counts its growth."""
    assert lesson.measure("printed", T, S).peak_bytes >= 6 * MIB


@pytest.mark.parametrize("name", ["shmget", "mq_open", "add_key", "request_key", "bpf"])
def test_a_measured_call_may_keep_nothing_in_kernel_objects(
    lesson: learner_module.LearnerModule, name: str
) -> None:
    """System V shared memory, POSIX message queues, keys and BPF maps hold data outside any
    process's resident memory: every worker is refused them (EPERM, not another error)."""
    import platform

    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("system call numbers known for x86_64 and aarch64 only")
    with pytest.raises(errors.LearnerError, match="operation not permitted"):
        lesson.measure("kernel_object", name)


def test_data_written_into_its_inputs_file_counts_as_its_memory(lesson: learner_module.LearnerModule) -> None:
    """The inputs' memfd is the worker's to map: what learner code writes into it beyond the
    grader's own writes is counted."""
    x = np.zeros(1024 * 1024)  # 8 MiB of inputs: room for 6 MiB of data
    assert lesson.measure("into_its_inputs", x).peak_bytes >= 6 * MIB


def test_data_written_over_what_it_printed_counts_as_its_memory(lesson: learner_module.LearnerModule) -> None:
    lesson.measure("printed", T, S)
    assert lesson.measure("over_what_it_printed", T, S).peak_bytes >= 6 * MIB


def test_an_import_that_computes_the_answer_ahead_is_measured(tmp_path: Path) -> None:
    """The figure counts from before the module is loaded: full scores built at import and
    thrown away count in every measured call, however little the call itself holds."""
    source = (
        f"import numpy as np\n_ANSWER = np.ones(({T}, {S})).sum(axis=1)\n\n"
        "def answer(t, s):\n    return _ANSWER\n"
    )
    (tmp_path / "l00_ahead.py").write_text(source, encoding="utf-8")
    module = learner_module.LearnerModule(tmp_path, "l00_ahead", Limits(call_seconds=20.0))
    try:
        first, second = module.measure("answer", T, S), module.measure("answer", T, S)
    finally:
        module.close()
    assert first.import_bytes >= 0.9 * FULL
    assert first.peak_bytes >= 0.9 * FULL and second.peak_bytes >= 0.9 * FULL


def test_an_import_of_nothing_much_adds_almost_nothing(lesson: learner_module.LearnerModule) -> None:
    assert lesson.measure("total", np.ones(8)).import_bytes < 4 * MIB


def test_a_lesson_13_file_whose_import_builds_full_scores_fails_its_memory_check(tmp_path: Path) -> None:
    """The attack end to end: the lesson's own measured size of scores, built and thrown away
    at import, fails the memory check, which says the import did it and names no mistake."""
    from tests.helpers import SOLUTIONS, grade_folder, solutions_with

    module = "l13_online_softmax"
    ahead = "import numpy as _np\n_np.ones((512, 32768)).sum()\n"
    result = grade_folder(
        solutions_with(tmp_path, module, ahead + (SOLUTIONS / f"{module}.py").read_text()), module
    )
    checks = {c["name"]: c for e in result["exercises"] for c in e["checks"]}
    memory = checks["test_never_a_t_by_s_array_of_scores"]
    assert result["status"] == "failed" and memory["status"] == "failed"
    assert "import of the module alone peaked at" in memory["message"] and not memory["mistake_id"]
