"""Worker processes: start one blank, load a module into it, read its replies with a deadline,
find out where it is stuck or why it died, and kill it with everything it started (its keeper
does that, see ``keeper``: only the worker's own subtree, never anything else of the caller's).

``learner_module.LearnerModule`` drives these; nothing here knows about grading. The sentences
about a worker that died or overran are written in ``endings``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from course.engine.sandbox import endings, zygote
from course.engine.sandbox.limits import ONE_THREAD, Limits
from course.engine.wire import messages

# -I ignores PYTHONPATH and the current folder, so the keeper is told where the course lives.
_BOOT = (
    f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[3])!r}); "
    "from course.engine.sandbox.keeper import main; sys.exit(main(sys.argv[1:]))"
)


_PASSED = ("PATH", "LANG", "LANGUAGE", "TZ")  # from the grader's environment, as they are
_PASSED_PREFIXES = ("LC_", "OPENBLAS_", "MKL_")  # locale; the BLAS settings numpy may need


def worker_environment(scratch: Path | None = None) -> dict[str, str]:
    """The environment a worker (and the zygote) starts with: an allow-list, never the grader's
    whole environment, which may hold an instructor's tokens and keys. PATH, the locale and the
    BLAS settings pass; one thread for the linear algebra libraries, a fixed hash seed; HOME
    and TMPDIR are the worker's scratch folder."""
    env = {
        key: value for key, value in os.environ.items() if key in _PASSED or key.startswith(_PASSED_PREFIXES)
    }
    env.update(ONE_THREAD, PYTHONHASHSEED="0")
    if scratch is not None:
        env["HOME"] = env["TMPDIR"] = str(scratch)
    return env


# The keeper's status lines (see ``keeper``; K comes from the zygote's child): letter -> field.
_STATUS_FIELDS = {b"P": "_pid", b"X": "_exit_status", b"K": "_keeper_pid", b"E": "_keeper_code"}
_STATUS_NAMES = {"keeper": "_keeper_pid", "pid": "_pid", "exit": "_exit_status"}  # see _read_status
_READ_BYTES = 1 << 16  # a reply's read: a pipe's capacity, under malloc's mmap threshold
_FORK_SECONDS = 5.0  # no keeper forked within this: the zygote is stopped or stuck


class Worker:
    """One worker process. Started blank (numpy imported, nothing of the learner's), then
    ``load`` tells it which module to import, so a spare can be started ahead of time.

    The process started here is the worker's keeper (``keeper``), which forks the worker and,
    as a subreaper, kills everything the worker started when it is stopped. ``pid`` is the
    worker's, as the keeper reports it on its status pipe. The keeper is forked by this
    process's zygote (``zygote``: numpy already imported) or, when there is none or it fails,
    exec'd (``python -I``); ``process`` is then a ``_ForkedKeeper`` or a ``Popen``."""

    def __init__(self, scratch: Path, measured: bool = False, may_fork: bool = True) -> None:
        """``scratch``: the worker's working folder (it may write nothing there: see
        ``landlock``). ``measured``: a worker whose memory the grader measures (``reset_peak``,
        ``memory``): its keeper forbids it to start any other process (see ``keeper``).
        ``may_fork`` False: exec'd, never forked by the zygote (``forked`` says which it was).

        What the worker prints goes to a file with no name (a memfd), and so does a call's
        inputs (``inputs``): the grader keeps their descriptors and never opens, creates or
        removes anything by name in a folder learner code could write."""
        self.measured = measured
        self._buffer = bytearray()
        env = worker_environment(scratch)
        self.process: subprocess.Popen | _ForkedKeeper
        # A measured worker makes every page of its mapped files resident before anything is
        # measured (see ``keeper``), and its memory is counted from a blank measured worker
        # started the same way (``measured.blank_resident``).
        if not (may_fork and self._start_forked(scratch, env)):
            ends = self._open()
            mode = ["measured"] if measured else []
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-u", "-c", _BOOT, *map(str, ends), *mode],
                pass_fds=ends,
                stdin=subprocess.DEVNULL,
                stdout=self.output,
                stderr=subprocess.STDOUT,
                cwd=scratch,
                env=env,
                start_new_session=True,
            )
            for fd in ends[:4]:
                os.close(fd)
        self.import_info: dict | None = None
        self.loaded_at: float | None = None  # when ``load`` was sent: the import's clock starts
        self._paused_at: float | None = None  # see ``pause``

    def _open(self) -> tuple[int, int, int, int, int]:
        """New pipes and files; returns the keeper's ends (request, response, control, status,
        inputs), which the caller closes once handed over (the inputs file stays ours too)."""
        request_read, self._request = os.pipe()
        self._response, response_write = os.pipe()
        control_read, self._control = os.pipe()
        self._status, status_write = os.pipe()
        self._status_buffer = b""
        self._status_ended = False
        self._pid: int | None = None
        self._exit_status: int | None = None
        self._keeper_pid: int | None = None
        self._keeper_code: int | None = None
        self.output = os.memfd_create("course-output", os.MFD_CLOEXEC)
        self.inputs = os.memfd_create("course-inputs", os.MFD_CLOEXEC)  # no sealing: never frozen
        self._files = weakref.finalize(self, zygote.close_all, [self.output, self.inputs])
        return request_read, response_write, control_read, status_write, self.inputs

    def _start_forked(self, scratch: Path, env: dict[str, str]) -> bool:
        """Have this process's zygote fork the keeper (see ``zygote``). False, with nothing
        left open, if there is no zygote or it did not fork one in time (killed, stopped): the
        caller execs the keeper then."""
        forker = zygote.zygote(env)
        if forker is None:
            return False
        ends = self._open()
        sent = forker.order([*ends, self.output], scratch, self.measured, env)
        for fd in ends[:4]:
            os.close(fd)
        if sent:
            self._read_status("keeper", _FORK_SECONDS)
        if self._keeper_pid is not None:
            self.process = _ForkedKeeper(self, self._keeper_pid)
            return True
        # Whatever the zygote does with this order later, its keeper finds our ends closed
        # (end of file on control and request: it stops at once), and we start afresh.
        for fd in (self._request, self._response, self._control, self._status):
            os.close(fd)
        self._files()
        zygote.failed(forker)
        return False

    # -- the keeper's status lines and what they tell -------------------------------------------
    @property
    def forked(self) -> bool:
        """Whether the zygote forked this worker's keeper (else it was exec'd)."""
        return isinstance(self.process, _ForkedKeeper)

    def _read_status(self, until: str, timeout: float) -> None:
        """Read the keeper's status lines until ``until`` is known ("keeper": its pid, "pid":
        the worker's, "exit": how the worker ended; "end": never), the keeper closed the pipe,
        or ``timeout`` passed."""
        deadline = time.monotonic() + timeout
        while self._status >= 0 and not self._status_ended and self._status_field(until) is None:
            remaining = max(0.0, deadline - time.monotonic())
            if not select.select([self._status], [], [], remaining)[0]:
                return
            chunk = os.read(self._status, 4096)
            if not chunk:
                self._status_ended = True  # only the keeper holds its end: it has ended
                return
            self._status_buffer += chunk
            *lines, self._status_buffer = self._status_buffer.split(b"\n")
            for line in lines:
                field, number = _STATUS_FIELDS.get(line[:1]), line[1:]
                if field is not None and number.isdigit() and getattr(self, field) is None:
                    setattr(self, field, int(number))

    def _status_field(self, name: str) -> int | None:
        field = _STATUS_NAMES.get(name)
        return None if field is None else getattr(self, field)

    @property
    def pid(self) -> int | None:
        """The worker's process id (also its process group's), None if it never started."""
        self._read_status("pid", 5.0)
        return self._pid

    def running(self) -> bool:
        """False once the worker has ended (or its keeper has)."""
        if self.forked:  # its keeper's poll has just read the status pipe
            return self.process.poll() is None and self._exit_status is None
        if self.process.poll() is not None:
            return False
        self._read_status("exit", 0.0)
        return self._exit_status is None

    def exit_code(self, timeout: float = 5.0) -> int | None:
        """How the worker ended, as ``Popen.returncode`` says it (-N for signal N); None if it
        has not ended within ``timeout``."""
        self._read_status("exit", timeout)
        if self._exit_status is not None:
            return os.waitstatus_to_exitcode(self._exit_status)
        return self.process.poll()  # no report: the keeper's own ending, if it has ended

    def forked_keeper_code(self, timeout: float) -> int | None:
        """How a keeper the zygote forked ended (it is not our child, so its status pipe
        tells): None while the pipe is still open after ``timeout`` (the keeper alone holds its
        end); else the code it reported (``E``), 0 after a worker it reported ended (the keeper
        exits 0 after its sweep), else -SIGKILL (nothing else stops it unannounced)."""
        self._read_status("end", timeout)
        if not self._status_ended and self._status >= 0:
            return None
        if self._keeper_code is not None:
            return self._keeper_code
        return 0 if self._exit_status is not None else -signal.SIGKILL

    def load(
        self,
        source_dir: Path,
        module: str,
        limits: Limits,
        lessons: Sequence[str] = (),
        readable: Sequence[str] | None = None,
    ) -> None:
        """Ask the worker to limit its memory (and keep freed memory for reuse when ``limits``
        say so) and import ``module`` from ``source_dir``;
        ``module`` and ``lessons`` (the modules it may import as lessons, in load order) are
        loaded only from ``source_dir/<name>.py``, compiled from source. ``readable``: the
        only paths it may read from then on (``landlock.restrict_reads``), for a submission."""
        order = {
            "op": "load",
            "source_dir": str(source_dir),
            "module": module,
            "lessons": list(lessons),
            "memory_bytes": limits.memory_bytes,
            "keep_freed_memory": limits.keep_freed_memory,
        }
        if readable is not None:
            order["readable"] = list(readable)
        self.loaded_at = time.monotonic()
        self.send(order, [])

    # -- reading with a deadline -------------------------------------------------------------
    def _read(self, size: int, deadline: float) -> bytes:
        """``size`` bytes of the reply (asked for only within the reply's bounds, and at most
        one read of 64 KiB beyond them is held): 64 KiB is what a pipe holds, and a larger
        read would cost an mmap and munmap of its buffer on every call."""
        while len(self._buffer) < size:
            # Past the deadline, only what has arrived already is read: an import that settled
            # in time is read when its grade comes, however much later (see ``import_settled``).
            remaining = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._response], [], [], remaining)
            if not ready:
                raise TimeoutError
            chunk = os.read(self._response, _READ_BYTES)
            if not chunk:
                raise EOFError
            self._buffer += chunk
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def receive(
        self,
        deadline: float,
        max_arrays: int = messages.REPLY_ARRAYS,
        loads: Callable[[bytes], Any] = json.loads,
    ) -> tuple[dict, list[np.ndarray]]:
        """One reply, within the bounds of a reply (``messages.REPLY_*``): a reply that announces
        more raises ``messages.TooLarge`` before more of it is read. ``loads`` parses its header
        (see ``messages.unpack``)."""
        return messages.unpack(
            lambda n: self._read(n, deadline),
            max_header=messages.REPLY_HEADER,
            max_bytes=messages.REPLY_BYTES,
            max_arrays=max_arrays,
            loads=loads,
        )

    def send(self, header: dict, arrays: list[np.ndarray]) -> None:
        messages.write_all(self._request, messages.pack(header, arrays))

    def import_settled(self) -> bool:
        """Whether waiting for the import report would not block now: the report (or anything
        else: an end of file, a malformed reply) has arrived, or the worker has ended."""
        if self.import_info is not None or self._buffer:
            return True
        return bool(select.select([self._response], [], [], 0)[0]) or not self.running()

    def fileno(self) -> int:
        """The descriptor replies arrive on: a worker can be waited for with ``select``."""
        return self._response

    def wait_imported(self, deadline: float) -> dict:
        """The worker's import report (cached): ok, error, lesson_modules."""
        if self.import_info is None:
            self.import_info, _ = self.receive(deadline, max_arrays=0)  # a report has no arrays
        return self.import_info

    # -- what it printed, and what it tells of a worker that died or overran -----------------
    def death_message(self, source_dir: Path | None = None, importing: bool = False) -> str:
        """Why the worker ended, in a sentence for the learner (see ``endings``)."""
        return endings.death_message(self, source_dir, importing)

    def where_busy(self, source_dir: Path) -> str:
        """Where a worker that overran its time is stuck, or '' (see ``endings``)."""
        return endings.where_busy(self, source_dir)

    def pause(self) -> None:
        """Stop the worker where it is (its keeper sends SIGSTOP to its group); its import's
        time limit does not run meanwhile (``resume`` moves ``loaded_at`` on)."""
        if self._paused_at is None:
            with contextlib.suppress(OSError):
                os.write(self._control, b"s")
                self._paused_at = time.monotonic()

    def resume(self) -> None:
        """Let a paused worker go on; its import's clock moves on by the time it was paused."""
        if self._paused_at is not None:
            with contextlib.suppress(OSError):
                os.write(self._control, b"c")
            if self.loaded_at is not None:
                self.loaded_at += time.monotonic() - self._paused_at
            self._paused_at = None

    @property
    def paused(self) -> bool:
        return self._paused_at is not None

    def cpu_seconds(self) -> float:
        """The CPU time the worker has used so far, as the kernel counts it (0 if unknown)."""
        try:
            with open(self._proc("stat"), encoding="ascii") as stat:
                fields = stat.read().rpartition(")")[2].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return 0.0

    def ask_for_stack_dump(self) -> None:
        """Have the keeper signal the worker to dump its stack into what it prints
        (faulthandler, on SIGUSR1): the keeper reaps the worker, so never a recycled pid.
        OSError once the worker was killed."""
        os.write(self._control, b"u")

    def printed(self, offset: int, limit: int) -> bytes:
        """At most ``limit`` bytes of what the worker printed, from ``offset`` (negative: from
        that far before the end); b"" once ``close_files`` was called."""
        try:
            if offset < 0:
                offset = max(0, os.fstat(self.output).st_size + offset)
            return os.pread(self.output, limit, offset)
        except OSError:
            return b""

    def close_files(self) -> None:
        """Close the output and inputs files (also done when the Worker is collected)."""
        self._files()

    # -- its memory, as the kernel counts it (never as the worker reports it) ------------------
    def _proc(self, name: str) -> str:
        """``/proc/<worker pid>/<name>`` for a worker still alive and still the keeper's child
        (so never a recycled pid)."""
        pid = self.pid
        if pid is None or not self.running():
            raise ProcessLookupError("the worker is not running")
        return f"/proc/{pid}/{name}"

    def reset_peak(self) -> None:
        """Make the kernel's high-water mark of the worker's resident memory (VmHWM) its current
        resident size. Written from here: learner code may not write files in /proc (Landlock)."""
        with open(self._proc("clear_refs"), "w") as handle:
            handle.write("5")

    def memory(self) -> tuple[int, int]:
        """(resident, peak resident since the last ``reset_peak``) of the worker, in bytes, as
        ``/proc/<pid>/status`` says; raises ProcessLookupError if the worker is gone."""
        with open(self._proc("status"), encoding="ascii", errors="replace") as handle:
            fields = dict(line.split(":", 1) for line in handle if ":" in line)
        if fields.get("PPid", "").strip() != str(self.process.pid) or "VmHWM" not in fields:
            raise ProcessLookupError("the worker is not running")
        return (int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024)

    def kill(self) -> None:
        """Stop the worker: its keeper kills it and everything it started (whatever session or
        process group they moved to) and exits. Safe to call twice: the pipes are closed once
        (a second close could hit a descriptor number the process has handed to something else
        since)."""
        if self._control >= 0:
            try:
                os.write(self._control, b"k")  # even if a fork of the caller holds the pipe open
            except OSError:
                pass
            os.close(self._control)
            self._control = -1
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:  # a keeper that does not stop: kill what we know
                for group in (self.process.pid, self._pid):
                    try:
                        if group:
                            os.killpg(group, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                self.process.wait()
            self._read_status("exit", 0.0)  # what the keeper wrote before it exited (the pid)
        for name in ("_request", "_response", "_status"):
            fd = getattr(self, name)
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
                setattr(self, name, -1)


class _ForkedKeeper:
    """What ``Worker`` uses of a ``Popen`` (pid, poll, wait), for a keeper the zygote forked:
    its ending is read from its status pipe (``Worker.forked_keeper_code``)."""

    def __init__(self, worker: Worker, pid: int) -> None:
        self.pid = pid
        self._worker = weakref.ref(worker)

    def _code(self, timeout: float) -> int | None:
        worker = self._worker()
        return None if worker is None else worker.forked_keeper_code(timeout)

    def poll(self) -> int | None:
        return self._code(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._code(1e9 if timeout is None else timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"keeper {self.pid}", timeout or 0.0)
        return code
