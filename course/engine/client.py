"""The grader's side of the worker: start it, call learner functions, enforce time limits.

Grading tests never touch learner code directly. They call ``lesson.linear(x, w, b)`` on a
``LearnerModule``; the call travels to a worker process as plain arrays and the answer comes back
as plain arrays, or as one of the exceptions below, which the reporting plugin turns into a status.
A worker that hangs is killed with everything it started (by its keeper, see ``keeper``); the
next call starts a fresh one. Nothing else of the caller's is touched: the caller is never made
a subreaper, and only the workers' own subtrees are killed.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from course.engine import protocol, upstream
from course.engine.limits import Limits
from course.engine.processes import Worker


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
        self.frames: list[dict] = list((info or {}).get("frames", []))
        self.upstream: upstream.Upstream | None = None  # raised in an earlier lesson's file
        self.call: tuple[str, dict[str, tuple[int, ...]]] | None = None  # function, argument shapes


class SignatureMismatch(LearnerError):
    """The learner's ``function`` does not accept the arguments of the call (kind
    "SignatureMismatch"); ``signature`` is the learner's own, as the worker read it."""

    def __init__(self, message: str, info: dict, function: str) -> None:
        super().__init__(message, info)
        self.function = function
        self.signature = str(info.get("signature", ""))


class LearnerTimeout(LearnerProblem):
    """A call or the import took longer than its limit."""


class ImportFailed(LearnerProblem):
    """The learner's module could not be imported; ``info`` is the worker's description."""

    def __init__(self, message: str, info: dict) -> None:
        super().__init__(message)
        self.info = info


def lesson_modules(module: str) -> list[str]:
    """The catalog's lesson modules in load order (a lesson imports only earlier ones), and
    ``module`` last if it is not one of them."""
    from course.catalog import load_catalog

    names = [lesson.module for lesson in load_catalog().lessons]
    return names if module in names else [*names, module]


def format_learner_error(info: dict) -> str:
    """The learner's exception in their own terms: their frames, then the exception line."""
    if info.get("type") == "MissingFunction":
        return f"There is no function named `{info.get('message')}` in your file (was it renamed?)."
    if info.get("type") in ("NotAFunction", "OutputLimit", "Unconfined"):
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
        lines.append(
            f"{kind}: the file is not valid UTF-8 ({message}). Save it as UTF-8 "
            "(your editor's encoding setting)."
        )
    elif syntax:
        lines.append(f"{kind}: {message}")
    else:  # preceded by the learner's own frames, so it reads as their exception
        lines.append(f"{kind}: {message}" if message else kind)
    return "\n".join(lines)


class SharedInputs:
    """A call's input arrays in a file the worker maps (``protocol.shared_views``), so that the
    grader itself sees what the learner's code did to them.

    The file is the worker's ``inputs``: a memfd the grader made before starting the worker
    (it has no name anywhere, so learner code cannot put anything in its place), inherited by
    the worker. The grader writes each call's arrays there, and after the reply reads them
    back through its own descriptor and compares them with its own copy. What the worker says
    about its inputs is never asked: learner code can forge it.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._sent: list[tuple[bytes, int, np.dtype]] = []

    def write(self, arrays: list[np.ndarray]) -> dict:
        """Put ``arrays`` in the file; returns their layout for the call's header."""
        specs, size = protocol.shared_layout(arrays)
        current = os.fstat(self.fd).st_size
        if current < size:  # grown ahead, so that the worker seldom maps the file anew
            os.ftruncate(self.fd, max(size, 2 * current, 1 << 16))
        self._sent = []
        for array, (_, _, offset) in zip(arrays, specs, strict=True):
            raw = array.tobytes()  # C order, as the worker's view reads it
            if os.pwrite(self.fd, raw, offset) != len(raw):
                raise OSError("short write to the inputs file")
            self._sent.append((raw, offset, array.dtype))
        return {"size": size, "arrays": specs}

    def changed(self) -> list[int]:
        """Which arrays of the last ``write`` are not what the grader wrote (read now)."""
        changed = []
        for index, (raw, offset, dtype) in enumerate(self._sent):
            now = os.pread(self.fd, len(raw), offset)  # shorter if the file was truncated
            if now == raw:
                continue
            if len(now) == len(raw) and dtype.kind in "fc":  # -0.0 for 0.0, another NaN: equal
                if np.array_equal(np.frombuffer(now, dtype), np.frombuffer(raw, dtype), equal_nan=True):
                    continue
            changed.append(index)
        return changed


class _LastReply:
    """``json.loads`` for call replies that remembers the last successful one of at most 64 KiB:
    a check's calls to one function with arrays of the same shapes often get the same reply
    header, byte for byte, and parsing it again was a tenth of the grader's time a call. Only
    ``LearnerModule.call`` reads what it returns, and changes none of it (the result and the
    trace become new objects); a reply that is not ok is parsed afresh every time, since its
    error description lives on in the exception raised. Shared by threads: ``last`` is one
    (bytes, value) pair, replaced whole."""

    def __init__(self) -> None:
        self.last: tuple[bytes, Any] | None = None

    def __call__(self, raw: bytes) -> Any:
        last = self.last
        if last is not None and last[0] == raw:
            return last[1]
        value = json.loads(raw)
        if len(raw) <= 1 << 16 and isinstance(value, dict) and value.get("ok") is True:
            self.last = (raw, value)
        return value


_LAST_REPLY = _LastReply()

TRACE_CALLS, TRACE_SHAPES, SHAPE_DIMS, NAME_LENGTH = 1000, 64, 32, 200


def _checked_shapes(value: Any) -> list | None:
    """A list of shapes (each None or a list of non-negative ints), or None if it is not one."""
    if not isinstance(value, list) or len(value) > TRACE_SHAPES:
        return None
    for shape in value:
        if shape is not None and not (
            isinstance(shape, list)
            and len(shape) <= SHAPE_DIMS
            and all(type(n) is int and 0 <= n < 2**31 for n in shape)
        ):
            return None
    return [None if shape is None else list(shape) for shape in value]


def checked_trace(recorded: Any) -> list[dict]:
    """A shape trace from the worker as data the pictures can use: at most ``TRACE_CALLS``
    calls ``{"function": name, "args": shapes, "result": shapes}`` ("args" and "result" may be
    missing: no result means the call raised). Learner code can write anything there, so
    anything else makes the whole trace empty (no picture), never an error of ours."""
    if not isinstance(recorded, list) or len(recorded) > TRACE_CALLS:
        return []
    calls = []
    for entry in recorded:
        if not isinstance(entry, dict):
            return []
        name = entry.get("function")
        if not isinstance(name, str) or not 0 < len(name) <= NAME_LENGTH:
            return []
        call: dict[str, Any] = {"function": name}
        for key in ("args", "result"):
            if key in entry:
                shapes = _checked_shapes(entry[key])
                if shapes is None:
                    return []
                call[key] = shapes
        calls.append(call)
    return calls


def malformed_reply(problem: protocol.ProtocolError) -> str:
    """What a learner can do about a reply the grader refused (the worker's side, where their
    code runs, wrote it): the grader reads and holds only bounded, well-formed replies."""
    if isinstance(problem, protocol.TooLarge):
        return (
            f"The reply from your code to the grader was too large ({problem}). Return an array "
            "of the shape the exercise asks for, and remove anything in your files that changes "
            "the course's own modules (course.engine) or writes to the grader's pipes."
        )
    return (
        f"The reply from your code to the grader was malformed ({problem}). Replies are written "
        "by the course's worker, not by your code: remove anything in your files that changes "
        "the course's own modules (course.engine) or writes to the grader's pipes."
    )


def _check_error(info: Any) -> dict:
    """``info`` if it is an error description as the worker writes it, else ProtocolError."""

    def text(value: Any, limit: int, optional: bool = False) -> bool:
        return (optional and value is None) or (isinstance(value, str) and len(value) <= limit)

    def number(value: Any) -> bool:
        return value is None or isinstance(value, int)

    if not isinstance(info, dict):
        raise protocol.ProtocolError("an error that is not an object")
    frames, syntax = info.get("frames", []), info.get("syntax")
    if not (
        text(info.get("type", ""), 200)
        and text(info.get("message", ""), 20_000, optional=True)
        and text(info.get("signature", ""), 2000)
        and text(info.get("origin"), 200, optional=True)
        and isinstance(frames, list)
        and len(frames) <= 10_000
        and (info.get("origin") is None or frames)
    ):
        raise protocol.ProtocolError("an error of the wrong shape")
    for frame in frames:
        if not (
            isinstance(frame, dict)
            and text(frame.get("file"), 1000)
            and number(frame.get("line"))
            and text(frame.get("function"), 1000)
            and text(frame.get("code"), 1000, optional=True)
        ):
            raise protocol.ProtocolError("an error frame of the wrong shape")
    if syntax is not None and not (
        isinstance(syntax, dict)
        and text(syntax.get("file"), 1000)
        and number(syntax.get("line"))
        and number(syntax.get("offset"))
        and text(syntax.get("text"), 1000, optional=True)
    ):
        raise protocol.ProtocolError("a syntax error of the wrong shape")
    return info


def _check_reply(reply: dict, report: bool = False) -> dict:
    """``reply`` (a call's, or the import ``report``) if its fields have the types the grader
    reads, else ProtocolError. The result, the trace and ``mutated`` are checked where used."""
    ok = reply.get("ok")
    if not isinstance(ok, bool):
        raise protocol.ProtocolError("no ok field")
    if not ok:
        _check_error(reply.get("error"))
    modules = reply.get("lesson_modules", [])
    if report and not (
        isinstance(modules, list)
        and len(modules) <= 1000
        and all(isinstance(name, str) and len(name) <= 200 for name in modules)
    ):
        raise protocol.ProtocolError("a list of lesson modules of the wrong shape")
    return reply


@dataclass(frozen=True)
class Measurement:
    """One call measured by the grader (``LearnerModule.measure``): what it returned, the peak
    of the worker's resident memory during the call above a blank worker's (numpy loaded,
    nothing of the learner's), and the wall time from sending the call to reading its reply."""

    result: Any
    peak_bytes: int
    seconds: float


_BLANK_RESIDENT: dict[tuple[int, bool], int] = {}  # (memory limit, forked) -> resident size


def _blank_resident(limits: Limits, forked: bool) -> int | None:
    """The resident memory of a measured worker that imported an empty module, started as
    ``forked`` says (by the zygote, else exec'd): what a measurement in a worker started that
    way is counted from. Measured once per grading process and kind, in a worker of its own;
    None when a worker of that kind cannot be had now (no zygote)."""
    key = (limits.memory_bytes, forked)
    if key not in _BLANK_RESIDENT:
        folder = Path(tempfile.mkdtemp(prefix="course-blank-"))
        (folder / "course_blank.py").write_text("", encoding="utf-8")
        worker = Worker(folder, measured=True, may_fork=forked)
        try:
            if worker.forked != forked:
                return None
            worker.load(folder, "course_blank", limits)
            if not worker.wait_imported(time.monotonic() + 30).get("ok"):
                raise RuntimeError("the grader could not start a worker to measure memory")
            _BLANK_RESIDENT[key] = worker.memory()[0]
        except (EOFError, TimeoutError, OSError, protocol.ProtocolError) as problem:
            raise RuntimeError(
                f"the grader could not start a worker to measure memory: {problem!r}"
            ) from None
        finally:
            worker.kill()
            worker.close_files()
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
    return _BLANK_RESIDENT[key]


class LearnerFunction:
    """A callable stand-in for one of the learner's functions."""

    def __init__(self, owner: LearnerModule, name: str) -> None:
        self._owner = owner
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._owner.call(self.__name__, args, kwargs)

    def traced(self, *args: Any, **kwargs: Any) -> tuple[Any, list[dict]]:
        """Call and also return the calls it made to the learner's other lessons, with their
        argument and result shapes (a LearnerProblem still raises; its trace is on ``.trace``)."""
        result = self._owner.call(self.__name__, args, kwargs, trace=True)
        return result, self._owner.trace

    def __repr__(self) -> str:
        return f"<learner function {self._owner.module}.{self.__name__}>"


class LearnerModule:
    """The learner's module as the grading tests see it: ``lesson.softmax(x)``.

    After each call, ``mutated`` names the positional or keyword arguments whose arrays the
    learner's code changed in place, as the grader read them back (see ``SharedInputs``).
    """

    def __init__(
        self,
        source_dir: Path,
        module: str,
        limits: Limits | None = None,
        spare: tuple[Worker, Path] | None = None,
        lessons: Sequence[str] | None = None,
        readable: Sequence[str] | None = None,
    ) -> None:
        """``spare``: a blank worker started ahead of time and its scratch folder, adopted
        (and removed at close) by this module. ``lessons``: the module names that are lessons
        (default: the catalog's), each loaded only from ``source_dir/<name>.py``.
        ``readable``: the only paths its workers may read (a submission's, see
        ``sandbox.readable_paths``); None: no such limit."""
        self.readable = list(readable) if readable is not None else None
        self.source_dir = Path(source_dir).resolve()
        self.module = module
        self.lessons = list(lessons) if lessons is not None else lesson_modules(module)
        self.limits = limits or Limits.from_env()
        self.scratch = spare[1] if spare else Path(tempfile.mkdtemp(prefix="course-"))
        self.deadline = time.monotonic() + self.limits.run_seconds
        self.mutated: list[str] = []
        self._meter: Worker | None = None  # the worker of measured calls (see ``measure``)
        self.trace: list[dict] = []  # the last traced call's calls to other lessons
        self.timed_out: set[str] = set()
        self.workers: list[Worker] = []
        self._worker: Worker | None = None
        self.start(spare[0] if spare else None)

    def start(self, spare: Worker | None = None) -> Worker:
        """Load the module in ``spare`` (a blank worker started earlier) or in a new worker."""
        worker = spare if spare is not None and spare.running() else None
        if spare is not None and worker is None:
            spare.kill()
        worker = worker or Worker(self.scratch)
        worker.load(self.source_dir, self.module, self.limits, self.lessons, self.readable)
        self._worker = worker
        self.workers.append(worker)
        return worker

    def __getattr__(self, name: str) -> LearnerFunction:
        if name.startswith("_"):
            raise AttributeError(name)
        return LearnerFunction(self, name)

    def _deadline(self, seconds: float) -> float:
        if time.monotonic() >= self.deadline:
            raise LearnerTimeout(
                f"Not run: the whole check went over its {self.limits.run_seconds:g} s"
                " limit before it got here."
            )
        return min(time.monotonic() + seconds, self.deadline)

    def import_report(self) -> dict:
        """Import the module (once per worker) and return the worker's report, or raise."""
        worker = self._worker if self._worker and self._worker.running() else None
        if worker is None:
            worker = self.start()
        deadline = self._deadline(self.limits.import_seconds)
        try:
            return _check_reply(worker.wait_imported(deadline), report=True)
        except TimeoutError:
            where = worker.where_busy(self.source_dir)
            self._retire(worker)
            raise LearnerTimeout(
                f"Importing {self.module}.py took longer than "
                f"{self.limits.import_seconds:g} s: is there a loop or a long "
                f"computation at the top level of a file?{where}"
            ) from None
        except protocol.ProtocolError as problem:
            self._retire(worker)
            raise LearnerError(malformed_reply(problem) + " (while the file was being imported)") from None
        except EOFError:
            message = worker.death_message(self.source_dir)
            self._retire(worker)
            raise LearnerError(message + " (while the file was being imported)") from None

    def _retire(self, worker: Worker) -> None:
        worker.kill()
        if self._worker is worker:
            self._worker = None

    def call(self, name: str, args: tuple, kwargs: dict, trace: bool = False) -> Any:
        if name in self.timed_out:
            raise LearnerTimeout(
                f"Not run: an earlier call to {name} went over the {self.limits.call_seconds:g} s limit."
            )
        report = self.import_report()
        if not report.get("ok"):
            raise ImportFailed(format_learner_error(report["error"]), report["error"])
        worker = self._worker
        assert worker is not None
        arrays: list[np.ndarray] = []
        labels: list[str] = []
        header = {
            "op": "call",
            "function": name,
            "trace": trace,
            "args": {
                "t": [
                    protocol.encode(arg, arrays, 1, labels, f"argument {i + 1}") for i, arg in enumerate(args)
                ]
            },
            "kwargs": {
                "d": {key: protocol.encode(arg, arrays, 1, labels, key) for key, arg in kwargs.items()}
            },
        }
        self.mutated, self.trace = [], []
        inputs = SharedInputs(worker.inputs)
        shared = inputs.write(arrays)  # the arrays travel in the shared file
        if worker.measured:  # earlier calls' inputs must not count in its resident memory
            shared["release"] = True
        header["shared"] = shared
        deadline = self._deadline(self.limits.call_seconds)
        try:
            worker.send(header, [])
            response, out = worker.receive(deadline, loads=_LAST_REPLY)
            _check_reply(response)
        except TimeoutError:
            where = worker.where_busy(self.source_dir)
            self._retire(worker)
            self.timed_out.add(name)
            raise LearnerTimeout(
                f"{name}(...) did not return within {self.limits.call_seconds:g} s:"
                f" look for a loop that never ends.{where}"
            ) from None
        except protocol.ProtocolError as problem:
            self._retire(worker)
            raise LearnerError(malformed_reply(problem)) from None
        except (EOFError, BrokenPipeError):
            message = worker.death_message(self.source_dir)
            self._retire(worker)
            raise LearnerError(message) from None
        # Verdicts are the grader's: the inputs as it reads them back now, whatever the reply
        # says; the shape trace is only data for a picture, checked before anything uses it.
        self.mutated = [labels[i] for i in inputs.changed()]
        self.trace = checked_trace(response.get("trace"))
        if not response.get("ok"):
            failed = self._problem(response.get("error") or {}, name)
            if isinstance(failed, LearnerError):  # the shapes it was called with, for feedback
                failed.call = (
                    name,
                    {label: array.shape for label, array in zip(labels, arrays, strict=True)},
                )
            raise failed
        try:
            return protocol.decode(response.get("result"), out)
        except protocol.ProtocolError as problem:
            self._retire(worker)
            raise LearnerError(malformed_reply(problem)) from None

    def _problem(self, info: dict, name: str) -> LearnerProblem:
        if info.get("type") == "NotImplementedError":
            origin = info.get("origin")
            if origin and origin != self.module:
                return DependencyNotReady(
                    f"{name} calls {info['frames'][-1]['function']} from your {origin}.py, which "
                    f"still raises NotImplementedError: finish that lesson first.",
                    origin,
                )
            return NotStarted(f"{name} still raises NotImplementedError.")
        if info.get("type") == "SignatureMismatch":  # worded as the TypeError Python raises
            return SignatureMismatch(f"TypeError: {info.get('message', '')}", info, name)
        if info.get("type") == "MemoryError":
            limit = self.limits.memory_bytes / 1024**3
            return LearnerError(
                f"{name} ran out of memory (the limit is {limit:g} GiB).\n" + format_learner_error(info)
            )
        found = upstream.find(info.get("frames", []), self.module, self.lessons)
        message = format_learner_error(info) + (f"\n{found.sentence(self.module)}" if found else "")
        error = LearnerError(message, info)
        error.upstream = found
        return error

    def output(self, limit: int = 2000) -> str:
        """The last ``limit`` characters the learner's code printed, across all its workers
        (without the stack dumps asked for by ``where_busy``)."""
        text = "".join(worker.printed(-limit, limit).decode("utf-8", "replace") for worker in self.workers)
        text = re.sub(
            r"(?:Fatal Python error: .*\n\n)?(?:(?:Current thread|Thread) 0x[0-9a-f]+|Stack) "
            r"\(most recent call first\):\n(?:  File .*\n)*(?:\n?Extension modules: .*\n)?",
            "",
            text,
        )
        return text[-limit:]

    def close(self) -> None:
        import shutil

        for worker in self.workers:
            worker.kill()  # its keeper kills whatever the learner's code started, and only that
            worker.close_files()
        shutil.rmtree(self.scratch, ignore_errors=True)

    # -- measured calls ------------------------------------------------------------------------
    def measure(self, name: str, *args: Any, **kwargs: Any) -> Measurement:
        """Call ``name(*args, **kwargs)`` in a worker of its own whose memory the grader reads
        from the kernel, never from the worker: the high-water mark of its resident memory is
        reset (``/proc/<pid>/clear_refs``) just before the call and read (``VmHWM``) just after
        the reply. That worker may not start other processes (its keeper forbids fork and
        exec), so everything the learner's code holds is in that one figure. ``peak_bytes``
        counts from a blank worker's resident size, so it includes what the learner's module
        keeps between calls and the call's inputs; see ``testing.check_peak_below``.

        Raises like an ordinary call; a RuntimeError if this machine cannot measure soundly
        (no Landlock, so learner code could reset the mark itself)."""
        usual = self._worker
        meter = self._meter if self._meter is not None and self._meter.running() else None
        if meter is None:
            meter = self.start(Worker(self.scratch, measured=True))  # loaded as any worker is
        blank = _blank_resident(self.limits, meter.forked)
        if blank is None:  # forked, and no blank forked worker can be had now: exec both
            self._retire(meter)
            meter = self.start(Worker(self.scratch, measured=True, may_fork=False))
            blank = _blank_resident(self.limits, False)
        assert blank is not None  # an exec'd worker is always exec'd
        self._worker = meter
        try:
            report = self.import_report()
            if report.get("ok") and not report.get("sandbox"):
                raise RuntimeError(
                    "Memory cannot be measured on this machine: it has no Landlock, so the code "
                    "measured could reset its own high-water mark."
                )
            if self._worker is meter:  # else the import failed and call() raises for it
                try:
                    meter.reset_peak()
                except OSError:
                    self._retire(meter)
                    raise LearnerError(
                        f"The grader could not measure the memory of {name}: the process running "
                        "your code no longer lets it (did your code change its own process "
                        "settings, e.g. with prctl?)."
                    ) from None
            start = time.monotonic()
            try:
                result = self.call(name, args, kwargs)
            except LearnerError as problem:
                if problem.kind in ("PermissionError", "BlockingIOError") and "not permitted" in problem.text:
                    raise LearnerError(
                        f"{problem}\n(While its memory is measured, {name} may not start other "
                        "processes: compute the result in the function itself.)",
                        {"type": problem.kind, "message": problem.text},
                    ) from None
                raise
            seconds = time.monotonic() - start
            if self._worker is not meter:
                raise LearnerError(f"The process running {name} ended before its memory could be read.")
            try:
                _, peak = meter.memory()
            except OSError:
                self._retire(meter)
                raise LearnerError(
                    f"The process running {name} ended before its memory could be read."
                ) from None
            return Measurement(result, max(0, peak - blank), seconds)
        finally:
            self._meter = self._worker if self._worker is meter else None
            self._worker = usual if usual is not None and usual is not meter else None
