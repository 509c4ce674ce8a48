"""What a worker's keeper says on its status pipe, read on the grader's side.

The keeper (``keeper``) writes a line for each fact: the worker's pid (``P``), how the worker
ended (``X``), its own exit code (``E``); a keeper the zygote forked first writes its own pid
(``K``, see ``zygote``). ``KeeperStatus``, a base of ``processes.Worker``, reads them with a
timeout and answers from them: the worker's pid, whether it runs, how it ended.
``_ForkedKeeper`` stands in for a ``Popen`` when the zygote forked the keeper, which is then not
the grader's child: its end is read there too. Apart from ``processes`` so that starting and
talking to a worker read on their own; ``processes.Worker`` opens the pipe and sets these fields
(``Worker._open``).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
import weakref

# The keeper's status lines (see ``keeper``; K comes from the zygote's child): letter -> field.
_STATUS_FIELDS = {b"P": "_pid", b"X": "_exit_status", b"K": "_keeper_pid", b"E": "_keeper_code"}
_STATUS_NAMES = {"keeper": "_keeper_pid", "pid": "_pid", "exit": "_exit_status"}  # see _read_status


class KeeperStatus:
    """The keeper's status lines of one worker and what they tell (a base of ``processes.Worker``)."""

    process: subprocess.Popen | _ForkedKeeper
    _status: int  # the status pipe's end (-1 once closed)
    _status_buffer: bytes
    _status_ended: bool
    _pid: int | None
    _exit_status: int | None
    _keeper_pid: int | None
    _keeper_code: int | None

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


class _ForkedKeeper:
    """What ``Worker`` uses of a ``Popen`` (pid, poll, wait), for a keeper the zygote forked.
    It is not our child: it has ended when its status pipe's end is closed (the keeper alone
    holds it), with the code it reported (``E``), 0 after a worker it reported ended (the
    keeper exits 0 after its sweep), else -SIGKILL (nothing else stops it unannounced)."""

    def __init__(self, worker: KeeperStatus, pid: int) -> None:
        self.pid = pid
        self._worker = weakref.ref(worker)

    def _code(self, timeout: float) -> int | None:
        worker = self._worker()
        if worker is None:
            return None
        worker._read_status("end", timeout)
        if not worker._status_ended and worker._status >= 0:
            return None
        if worker._keeper_code is not None:
            return worker._keeper_code
        return 0 if worker._exit_status is not None else -signal.SIGKILL

    def poll(self) -> int | None:
        return self._code(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._code(1e9 if timeout is None else timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"keeper {self.pid}", timeout or 0.0)
        return code
