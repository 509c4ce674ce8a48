"""The grader's side of the worker: start it, call learner functions, enforce time limits.

Grading tests never touch learner code directly. They call ``lesson.linear(x, w, b)`` on a
``LearnerModule``; the call travels to a worker process as plain arrays and the answer comes back
as plain arrays, or as one of the exceptions below, which the reporting plugin turns into a status.
A worker that hangs is killed with its whole process group; the next call starts a fresh one.
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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from course.engine import protocol


@dataclass(frozen=True)
class Limits:
    """Resource limits for learner code, enforced from outside the worker (documented in README)."""

    import_seconds: float = 10.0
    call_seconds: float = 5.0
    run_seconds: float = 60.0
    memory_bytes: int = 2 * 1024**3

    @classmethod
    def from_env(cls) -> Limits:
        """The defaults, shortened by ``COURSE_LIMITS`` (``call=1,import=2,run=20,memory=512M``).

        For the project's own tests of hostile code, which would otherwise wait out the full
        limits. A value can only tighten a limit, never loosen it; malformed entries are ignored.
        """
        limits = cls()
        text = os.environ.get("COURSE_LIMITS", "")
        names = {"call": "call_seconds", "import": "import_seconds", "run": "run_seconds",
                 "memory": "memory_bytes"}
        changes: dict[str, float | int] = {}
        for entry in filter(None, (part.strip() for part in text.split(","))):
            key, _, raw = entry.partition("=")
            field = names.get(key.strip())
            if field is None:
                continue
            try:
                if field == "memory_bytes":
                    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
                    raw = raw.strip().upper()
                    value: float | int = int(float(raw[:-1]) * units[raw[-1]]) if raw[-1:] in units \
                        else int(raw)
                else:
                    value = float(raw)
            except (ValueError, KeyError):
                continue
            if 0 < value < getattr(limits, field):
                changes[field] = value
        return replace(limits, **changes)  # type: ignore[arg-type]


class LearnerProblem(Exception):
    """Base of everything that went wrong on the learner's side of a call."""


class NotStarted(LearnerProblem):
    """The learner's function still raises NotImplementedError."""


class DependencyNotReady(LearnerProblem):
    """The function called an earlier lesson's function that is not implemented yet."""

    def __init__(self, message: str, module: str) -> None:
        super().__init__(message)
        self.module = module


class LearnerError(LearnerProblem):
    """The learner's code raised, returned something unusable, or broke the worker.

    ``kind`` and ``text`` are the learner's exception type and message when there was one.
    """

    def __init__(self, message: str, info: dict | None = None) -> None:
        super().__init__(message)
        self.kind = str((info or {}).get("type", ""))
        self.text = str((info or {}).get("message", ""))


class LearnerTimeout(LearnerProblem):
    """A call or the import took longer than its limit."""


class ImportFailed(LearnerProblem):
    """The learner's module could not be imported; ``info`` is the worker's description."""

    def __init__(self, message: str, info: dict) -> None:
        super().__init__(message)
        self.info = info


def format_learner_error(info: dict) -> str:
    """The learner's exception in their own terms: their frames, then the exception line."""
    if info.get("type") == "MissingFunction":
        return f"There is no function named `{info.get('message')}` in your file (was it renamed?)."
    if info.get("type") in ("NotAFunction", "OutputLimit"):
        return str(info.get("message"))
    lines = []
    syntax = info.get("syntax")
    if syntax:
        lines.append(f"{syntax['file']}, line {syntax['line']}:")
        text = syntax.get("text") or ""
        lines.append(f"    {text.strip()}")
        offset = syntax.get("offset")
        if isinstance(offset, int) and offset > 0:
            indent = len(text) - len(text.lstrip())
            lines.append("    " + " " * max(offset - 1 - indent, 0) + "^")
    for frame in info.get("frames", [])[-3:]:
        lines.append(f"{frame['file']}, line {frame['line']}, in {frame['function']}:")
        if frame.get("code"):
            lines.append(f"    {frame['code']}")
    message = info.get("message") or ""
    kind = str(info.get("type", "Error"))
    if syntax and ("codec can't decode" in message or "Non-UTF-8" in message):
        lines.append(f"{kind}: the file is not valid UTF-8 ({message}). Save it as UTF-8 "
                     "(your editor's encoding setting).")
    elif syntax:
        lines.append(f"{kind}: {message}")
    else:  # preceded by the learner's own frames, so it reads as their exception
        lines.append(f"{kind}: {message}" if message else kind)
    return "\n".join(lines)


# -I ignores PYTHONPATH and the current folder, so the worker is told where the course lives.
_BOOT = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r}); "
         "from course.engine.worker import main; sys.exit(main(sys.argv[1:]))")


class Worker:
    """One worker process. Started blank (numpy imported, nothing of the learner's), then
    ``load`` tells it which module to import, so a spare can be started ahead of time."""

    def __init__(self, scratch: Path) -> None:
        self.module = ""
        self._buffer = b""
        request_read, self._request = os.pipe()
        self._response, response_write = os.pipe()
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
                   MKL_NUM_THREADS="1", PYTHONHASHSEED="0")
        self.output_path = Path(tempfile.mkstemp(prefix="output-", dir=scratch)[1])
        with open(self.output_path, "wb") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-u", "-c", _BOOT, str(request_read), str(response_write)],
                pass_fds=(request_read, response_write), stdin=subprocess.DEVNULL,
                stdout=output, stderr=subprocess.STDOUT, cwd=scratch, env=env,
                start_new_session=True,
            )
        os.close(request_read)
        os.close(response_write)
        self.import_info: dict | None = None

    def load(self, source_dir: Path, module: str, limits: Limits) -> None:
        """Ask the worker to limit its memory and import ``module`` from ``source_dir``."""
        self.module = module
        self.send({"op": "load", "source_dir": str(source_dir), "module": module,
                   "memory_bytes": limits.memory_bytes}, [])

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
                where = _learner_line(self._output_since(0)[-20_000:], source_dir) \
                    if source_dir else ""
                return ("Your code crashed the Python process (segmentation fault)."
                        + where.replace(" It was busy in", " It crashed in"))
            return f"The Python process running your code was killed by {name}."
        return (f"Your code ended the Python process (exit code {code}) instead of returning "
                "a value. Remove sys.exit / os._exit / quit calls from your lesson files.")

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
        """Kill the worker and everything it started (its own process group), then reap it."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        for fd in (self._request, self._response):
            try:
                os.close(fd)
            except OSError:
                pass


class LearnerFunction:
    """A callable stand-in for one of the learner's functions."""

    def __init__(self, owner: LearnerModule, name: str) -> None:
        self._owner = owner
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._owner.call(self.__name__, args, kwargs)

    def __repr__(self) -> str:
        return f"<learner function {self._owner.module}.{self.__name__}>"


class LearnerModule:
    """The learner's module as the grading tests see it: ``lesson.softmax(x)``.

    After each call, ``mutated`` names the positional or keyword arguments whose arrays the
    learner's code changed in place.
    """

    def __init__(self, source_dir: Path, module: str, limits: Limits | None = None,
                 spare: tuple[Worker, Path] | None = None) -> None:
        """``spare``: a blank worker started ahead of time and its scratch folder, adopted
        (and removed at close) by this module."""
        self.source_dir = Path(source_dir).resolve()
        self.module = module
        self.limits = limits or Limits.from_env()
        self.scratch = spare[1] if spare else Path(tempfile.mkdtemp(prefix="course-"))
        self.deadline = time.monotonic() + self.limits.run_seconds
        self.born = _become_subreaper()
        self.mutated: list[str] = []
        self.timed_out: set[str] = set()
        self.workers: list[Worker] = []
        self._worker: Worker | None = None
        self.start(spare[0] if spare else None)

    def start(self, spare: Worker | None = None) -> Worker:
        """Load the module in ``spare`` (a blank worker started earlier) or in a new worker."""
        worker = spare if spare is not None and spare.process.poll() is None else None
        if spare is not None and worker is None:
            spare.kill()
        worker = worker or Worker(self.scratch)
        worker.load(self.source_dir, self.module, self.limits)
        self._worker = worker
        self.workers.append(worker)
        return worker

    def __getattr__(self, name: str) -> LearnerFunction:
        if name.startswith("_"):
            raise AttributeError(name)
        return LearnerFunction(self, name)

    def _deadline(self, seconds: float, what: str) -> float:
        if time.monotonic() >= self.deadline:
            raise LearnerTimeout(f"Not run: the whole check went over its {self.limits.run_seconds:g} s"
                                 " limit before it got here.")
        return min(time.monotonic() + seconds, self.deadline)

    def import_report(self) -> dict:
        """Import the module (once per worker) and return the worker's report, or raise."""
        worker = self._worker if self._worker and self._worker.process.poll() is None else None
        if worker is None:
            worker = self.start()
        deadline = self._deadline(self.limits.import_seconds, "import")
        try:
            return worker.wait_imported(deadline)
        except TimeoutError:
            where = worker.where_busy(self.source_dir)
            self._retire(worker)
            raise LearnerTimeout(f"Importing {self.module}.py took longer than "
                                 f"{self.limits.import_seconds:g} s: is there a loop or a long "
                                 f"computation at the top level of a file?{where}") from None
        except (EOFError, protocol.ProtocolError):
            message = worker.death_message(self.source_dir)
            self._retire(worker)
            raise LearnerError(message + " (while the file was being imported)") from None

    def _retire(self, worker: Worker) -> None:
        worker.kill()
        if self._worker is worker:
            self._worker = None

    def call(self, name: str, args: tuple, kwargs: dict) -> Any:
        if name in self.timed_out:
            raise LearnerTimeout(f"Not run: an earlier call to {name} went over the "
                                 f"{self.limits.call_seconds:g} s limit.")
        report = self.import_report()
        if not report.get("ok"):
            raise ImportFailed(format_learner_error(report["error"]), report["error"])
        worker = self._worker
        assert worker is not None
        arrays: list[np.ndarray] = []
        labels: list[str] = []
        header = {"op": "call", "function": name,
                  "args": {"t": [protocol.encode(arg, arrays, 1, labels, f"argument {i + 1}")
                                 for i, arg in enumerate(args)]},
                  "kwargs": {"d": {key: protocol.encode(arg, arrays, 1, labels, key)
                                   for key, arg in kwargs.items()}}}
        deadline = self._deadline(self.limits.call_seconds, name)
        try:
            worker.send(header, arrays)
            response, out = worker.receive(deadline)
        except TimeoutError:
            where = worker.where_busy(self.source_dir)
            self._retire(worker)
            self.timed_out.add(name)
            raise LearnerTimeout(f"{name}(...) did not return within {self.limits.call_seconds:g} s:"
                                 f" look for a loop that never ends.{where}") from None
        except (EOFError, BrokenPipeError, protocol.ProtocolError):
            message = worker.death_message(self.source_dir)
            self._retire(worker)
            raise LearnerError(message) from None
        if not response.get("ok"):
            raise self._problem(response.get("error") or {}, name)
        mutated = response.get("mutated", [])
        self.mutated = [labels[i] if isinstance(i, int) and 0 <= i < len(labels) else "an input"
                        for i in (mutated if isinstance(mutated, list) else [])]
        return protocol.decode(response["result"], out)

    def _problem(self, info: dict, name: str) -> LearnerProblem:
        if info.get("type") == "NotImplementedError":
            origin = info.get("origin")
            if origin and origin != self.module:
                return DependencyNotReady(
                    f"{name} calls {info['frames'][-1]['function']} from your {origin}.py, which "
                    f"still raises NotImplementedError: finish that lesson first.", origin)
            return NotStarted(f"{name} still raises NotImplementedError.")
        if info.get("type") == "MemoryError":
            limit = self.limits.memory_bytes / 1024**3
            return LearnerError(f"{name} ran out of memory (the limit is {limit:g} GiB).\n"
                                + format_learner_error(info))
        return LearnerError(format_learner_error(info), info)

    def output(self, limit: int = 2000) -> str:
        """The last ``limit`` characters the learner's code printed, across all its workers
        (without the stack dumps asked for by ``where_busy``)."""
        text = ""
        for worker in self.workers:
            try:
                with open(worker.output_path, "rb") as handle:
                    handle.seek(max(0, worker.output_path.stat().st_size - limit))
                    text += handle.read().decode("utf-8", "replace")
            except OSError:
                pass
        text = re.sub(r"(?:Fatal Python error: .*\n\n)?(?:(?:Current thread|Thread) 0x[0-9a-f]+|Stack) "
                      r"\(most recent call first\):\n(?:  File .*\n)*(?:\n?Extension modules: .*\n)?",
                      "", text)
        return text[-limit:]

    def close(self) -> None:
        import shutil

        for worker in self.workers:
            worker.kill()
            worker.output_path.unlink(missing_ok=True)
        kill_descendants_born_after(self.born)
        shutil.rmtree(self.scratch, ignore_errors=True)


def _learner_line(dump: str, source_dir: Path) -> str:
    """" It was busy in FILE, line N: CODE" for the innermost learner frame of a faulthandler
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
def _become_subreaper() -> int:
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
