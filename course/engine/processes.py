"""Worker processes: start one blank, load a module into it, read its answers with a deadline,
find out where it is stuck or why it died, and kill it with everything it started.

``client.LearnerModule`` drives these; nothing here knows about grading.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from course.engine import protocol
from course.engine.limits import Limits

# -I ignores PYTHONPATH and the current folder, so the worker is told where the course lives.
_BOOT = (
    f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r}); "
    "from course.engine.worker import main; sys.exit(main(sys.argv[1:]))"
)


class Worker:
    """One worker process. Started blank (numpy imported, nothing of the learner's), then
    ``load`` tells it which module to import, so a spare can be started ahead of time."""

    def __init__(self, scratch: Path) -> None:
        self.module = ""
        self._buffer = b""
        request_read, self._request = os.pipe()
        self._response, response_write = os.pipe()
        env = dict(
            os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0"
        )
        handle, name = tempfile.mkstemp(prefix="output-", dir=scratch)
        os.close(handle)  # reopened below as the worker's stdout; never leak the descriptor
        self.output_path = Path(name)
        with open(self.output_path, "wb") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-u", "-c", _BOOT, str(request_read), str(response_write)],
                pass_fds=(request_read, response_write),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                cwd=scratch,
                env=env,
                start_new_session=True,
            )
        os.close(request_read)
        os.close(response_write)
        self.import_info: dict | None = None

    def load(self, source_dir: Path, module: str, limits: Limits) -> None:
        """Ask the worker to limit its memory and import ``module`` from ``source_dir``."""
        self.module = module
        self.send(
            {
                "op": "load",
                "source_dir": str(source_dir),
                "module": module,
                "memory_bytes": limits.memory_bytes,
            },
            [],
        )

    # -- reading with a deadline -------------------------------------------------------------
    def _read(self, size: int, deadline: float) -> bytes:
        while len(self._buffer) < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self._response], [], [], remaining)
            if not ready:
                raise TimeoutError
            chunk = os.read(self._response, 1 << 20)
            if not chunk:
                raise EOFError
            self._buffer += chunk
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def receive(self, deadline: float) -> tuple[dict, list[np.ndarray]]:
        return protocol.unpack(lambda n: self._read(n, deadline))

    def send(self, header: dict, arrays: list[np.ndarray]) -> None:
        protocol.write_all(self._request, protocol.pack(header, arrays))

    def wait_imported(self, deadline: float) -> dict:
        """The worker's import report (cached): ok, error, lesson_modules."""
        if self.import_info is None:
            self.import_info, _ = self.receive(deadline)
        return self.import_info

    def death_message(self, source_dir: Path | None = None) -> str:
        code = self.process.wait(timeout=5)
        if code < 0:
            name = signal.Signals(-code).name
            if name == "SIGSEGV":
                where = _learner_line(self._output_since(0)[-20_000:], source_dir) if source_dir else ""
                return "Your code crashed the Python process (segmentation fault)." + where.replace(
                    " It was busy in", " It crashed in"
                )
            return f"The Python process running your code was killed by {name}."
        return (
            f"Your code ended the Python process (exit code {code}) instead of returning "
            "a value. Remove sys.exit / os._exit / quit calls from your lesson files."
        )

    def where_busy(self, source_dir: Path) -> str:
        """Where a worker that overran its time is: ask it for a stack dump (faulthandler,
        on SIGUSR1) and name the learner's innermost line, or '' if it cannot tell."""
        try:
            size = self.output_path.stat().st_size
            os.kill(self.process.pid, signal.SIGUSR1)
        except OSError:
            return ""
        deadline = time.monotonic() + 1.0  # a dump takes milliseconds; a loaded machine longer
        text = ""
        while time.monotonic() < deadline:
            time.sleep(0.02)
            text = self._output_since(size)
            if "most recent call first" in text and text.rstrip().endswith(">"):
                break
        return _learner_line(text, source_dir)

    def _output_since(self, offset: int) -> str:
        try:
            with open(self.output_path, "rb") as handle:
                handle.seek(offset)
                return handle.read(200_000).decode("utf-8", "replace")
        except OSError:
            return ""

    def kill(self) -> None:
        """Kill the worker and everything it started (its own process group), then reap it.
        Safe to call twice: the pipes are closed once (a second close could hit a descriptor
        number the process has handed to something else since)."""
        if self._request >= 0:  # not killed yet (its group may outlive it, so always signal it)
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.process.wait()
        for fd in (self._request, self._response):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._request = self._response = -1


def _learner_line(dump: str, source_dir: Path) -> str:
    """ " It was busy in FILE, line N: CODE" for the innermost learner frame of a faulthandler
    dump (most recent call first), or ''."""
    for path, line in re.findall(r'File "([^"]+)", line (\d+)', dump):
        if Path(path).parent == source_dir:
            code = _source_line(Path(path), int(line))
            return f" It was busy in {Path(path).name}, line {line}" + (f": {code}" if code else ".")
    return ""


def _source_line(path: Path, number: int) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for index, line in enumerate(handle, 1):
                if index == number:
                    return line.strip()[:120]
    except OSError:
        pass
    return ""


# -- processes that escape their process group ---------------------------------------------------
def become_subreaper() -> int:
    """Make orphans of our descendants (a learner's double fork, a setsid child) our children
    instead of init's, so that ``kill_descendants_born_after`` finds them. Returns "now" in the
    kernel's clock ticks since boot, the unit of /proc start times."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
        with open("/proc/self/stat") as handle:
            ticks_of_self = int(handle.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
        return max(ticks_of_self, int(uptime * os.sysconf("SC_CLK_TCK")) - 1)
    except (OSError, ValueError, AttributeError):
        return 0


def _process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start time in ticks) for every process we can see."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                table[int(entry)] = (int(fields[1]), int(fields[19]))
            except (OSError, ValueError, IndexError):
                continue
    return table


def kill_descendants_born_after(born: int) -> None:
    """Kill every descendant of this process started since ``born`` (what learner code left
    running, even outside the worker's process group), and reap the ones that are our children."""
    if born <= 0 or not os.path.isdir("/proc"):
        return
    for _ in range(5):  # killed processes' children are re-parented to us: look again
        table = _process_table()
        children: dict[int, list[int]] = {}
        for pid, (parent, _) in table.items():
            children.setdefault(parent, []).append(pid)
        found, stack = [], list(children.get(os.getpid(), []))
        while stack:
            pid = stack.pop()
            found.append(pid)
            stack.extend(children.get(pid, []))
        targets = [pid for pid in found if table[pid][1] >= born]
        if not targets:
            return
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in targets:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
