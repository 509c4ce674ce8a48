"""The grader's side of the worker: start it, call learner functions, enforce time limits.

Grading tests never touch learner code directly. They call ``lesson.linear(x, w, b)`` on a
``LearnerModule``; the call travels to a worker process as plain arrays and the answer comes back
as plain arrays, or as one of the exceptions of ``errors``, which the reporting plugin turns
into a status. Every reply is checked before it is used (``replies``); a measured call
(``LearnerModule.measure``) runs in a worker of its own (``measured``). A worker that hangs is
killed with everything it started (by its keeper, see ``keeper``); the next call starts a fresh
one. Nothing else of the caller's is touched: the caller is never made a subreaper, and only the
workers' own subtrees are killed.
"""

from __future__ import annotations

import functools
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from course.engine.calls.errors import (
    ImportFailed,
    LearnerError,
    LearnerProblem,
    LearnerTimeout,
    format_learner_error,
    problem_for,
)
from course.engine.calls.measured import Measurement, measure_call
from course.engine.calls.replies import LAST_REPLY, SharedInputs, check_reply, checked_trace, malformed_reply
from course.engine.sandbox import cgroups, powers, seccomp
from course.engine.sandbox.limits import Limits
from course.engine.sandbox.process import Worker
from course.engine.wire import messages

# Who hears every call the grader makes to learner code, with its outcome: the tools that show
# which inputs an instructor's secret changes (tools/secret_inputs.py) and the project's tests.
LISTENERS: list[Callable[[str, tuple, dict, Any], None]] = []


def lesson_modules(module: str) -> list[str]:
    """The catalog's lesson modules in load order (a lesson imports only earlier ones), and
    ``module`` last if it is not one of them."""
    from course.content.catalog import load_catalog

    names = [lesson.module for lesson in load_catalog().lessons]
    return names if module in names else [*names, module]


@functools.cache
def _privileged() -> bool:
    """Whether the grader holds capabilities, so its workers start with some to give up."""
    return powers.privileged()


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
    learner's code changed in place, as the grader read them back (see ``replies.SharedInputs``).
    """

    def __init__(
        self,
        source_dir: Path,
        module: str,
        limits: Limits | None = None,
        spare: tuple[Worker, Path] | None = None,
        lessons: Sequence[str] | None = None,
        readable: Sequence[str] | None = None,
        group: cgroups.SubmissionGroup | None = None,
    ) -> None:
        """``spare``: a blank worker started ahead of time and its scratch folder, adopted
        (and removed at close) by this module. ``lessons``: the module names that are lessons
        (default: the catalog's), each loaded only from ``source_dir/<name>.py``.
        ``readable``: the only paths its workers may read (a submission's, see
        ``landlock.readable_paths``); None: no such limit."""
        self.readable = list(readable) if readable is not None else None
        self.group = group  # the memory cgroup every worker of it goes in before it loads
        self.source_dir = Path(source_dir).resolve()
        self.module = module
        self.lessons = list(lessons) if lessons is not None else lesson_modules(module)
        self.limits = limits or Limits.from_env()
        self.scratch = spare[1] if spare else Path(tempfile.mkdtemp(prefix="course-"))
        self.deadline = time.monotonic() + self.limits.run_seconds
        self.mutated: list[str] = []
        self.meter: Worker | None = None  # the worker of measured calls (see ``measure``)
        self.meter_import = 0  # the figure of its import (``measured.measure_call``)
        self.inputs: SharedInputs | None = None  # the last call's inputs, as the grader wrote them
        # Seconds spent waiting for the learner's calls, from request to reply: measured here,
        # never taken from a reply, so the grader's own time (the rest) can be told apart.
        self.call_seconds = 0.0
        self.trace: list[dict] = []  # the last traced call's calls to other lessons
        # Functions not called again in this grade, and what their calls raise instead: one
        # went over its time limit, or ended the worker's process (it would most likely again).
        self.not_again: dict[str, tuple[type[LearnerProblem], str]] = {}
        self.workers: list[Worker] = []
        self.worker: Worker | None = None  # the worker calls go to (None: the next call starts one)
        self._expired: Worker | None = None  # see ``expire_import``
        self.start(spare[0] if spare else None)

    def start(self, spare: Worker | None = None) -> Worker:
        """Load the module in ``spare`` (a blank worker started earlier) or in a new worker."""
        worker = spare if spare is not None and spare.running() else None
        if spare is not None and worker is None:
            spare.kill()
        worker = worker or Worker(self.scratch)
        if self.group is not None:
            self.group.add(worker.pid or 0)  # before anything of the learner's is loaded
        worker.load(self.source_dir, self.module, self.limits, self.lessons, self.readable)
        self.worker = worker
        self.workers.append(worker)
        return worker

    def expire_import(self) -> None:
        """Its worker's import was seen unfinished after its time limit (by whoever loaded it
        ahead, see ``restart_clock``): ``import_report`` reports the time limit, even if the
        report arrives before it is asked for."""
        self._expired = self.worker

    def restart_clock(self) -> None:
        """Start the whole check's time limit now: for a module loaded ahead of its grade (a
        class's submissions), whose import was meanwhile under its own limit already."""
        self.deadline = time.monotonic() + self.limits.run_seconds

    def __getattr__(self, name: str) -> LearnerFunction:
        if name.startswith("_"):
            raise AttributeError(name)
        return LearnerFunction(self, name)

    def _deadline(self, seconds: float) -> float:
        if time.monotonic() >= self.deadline:
            raise LearnerTimeout(
                f"Not run: this lesson's checks had already used up their {self.limits.run_seconds:g} s"
                " time limit."
            )
        return min(time.monotonic() + seconds, self.deadline)

    def import_report(self) -> dict:
        """Import the module (once per worker) and return the worker's report, or raise."""
        worker = self.worker if self.worker and self.worker.running() else None
        if worker is None:
            worker = self.start()
        # The import's time counts from when the worker was told to load (perhaps ahead of
        # this grade, see ``restart_clock``), not from when the grader first waits for it.
        deadline = self._deadline(self.limits.import_seconds)
        if worker.loaded_at is not None:
            deadline = min(deadline, worker.loaded_at + self.limits.import_seconds)
        try:
            if worker is self._expired:
                raise TimeoutError  # seen unfinished past its limit: whatever arrives now is late
            report = check_reply(worker.wait_imported(deadline), report=True)
        except TimeoutError:
            where = worker.where_busy(self.source_dir)
            self.retire(worker)
            raise LearnerTimeout(
                f"Importing {self.module}.py took longer than "
                f"{self.limits.import_seconds:g} s: is there a loop or a long "
                f"computation at the top level of a file?{where}"
            ) from None
        except messages.ProtocolError as problem:
            self.retire(worker)
            raise LearnerError(
                malformed_reply(problem) + " (This happened while the file was being imported.)"
            ) from None
        except EOFError:
            message = worker.death_message(self.source_dir, importing=True)
            self.retire(worker)
            raise LearnerError(message) from None
        sealed_without_filter = self.readable is not None and seccomp.filters_of(worker.pid or 0) < 2
        if report.get("ok") and self.group is not None and not self.group.holds(worker.pid or 0):
            self.retire(worker)
            raise LearnerError(
                "The grader could not put the process running this code in its submission's "
                "memory cgroup, so it stopped it: a problem of this machine, not of the code."
            )
        if report.get("ok") and sealed_without_filter:  # the worker's own, forbidding processes
            self.retire(worker)
            raise LearnerError(
                "The grader could not confirm that the submission's code may start no process, "
                "so it stopped it: a problem of this machine, not of the code."
            )
        if not powers.powerless(powers.held(worker.pid or 0), _privileged()):
            self.retire(worker)  # read from /proc here, never taken from the worker's word
            raise LearnerError(
                "The grader could not confirm that the Python process running your code holds no "
                "capability (root's powers), so it stopped it: a problem of this machine, not of "
                "your code."
            )
        return report

    def retire(self, worker: Worker) -> None:
        """Kill ``worker``; if calls went to it, the next call starts another."""
        worker.kill()
        if self.worker is worker:
            self.worker = None

    def call(self, name: str, args: tuple, kwargs: dict, trace: bool = False) -> Any:
        """``name(*args, **kwargs)`` run by the worker: its result, decoded and checked, or one of
        the exceptions of ``errors``. ``trace``: also record the calls it makes to earlier
        lessons (``self.trace``, for the shape trace). Each of ``LISTENERS`` hears the call
        and its outcome (a result or the exception raised)."""
        if not LISTENERS:
            return self._call(name, args, kwargs, trace)
        try:
            result = self._call(name, args, kwargs, trace)
        except Exception as problem:
            for listener in LISTENERS:
                listener(name, args, kwargs, problem)
            raise
        for listener in LISTENERS:
            listener(name, args, kwargs, result)
        return result

    def _call(self, name: str, args: tuple, kwargs: dict, trace: bool) -> Any:
        if name in self.not_again:
            kind, message = self.not_again[name]
            raise kind(message)
        report = self.import_report()
        if not report.get("ok"):
            raise ImportFailed(format_learner_error(report["error"]), report["error"])
        worker = self.worker
        assert worker is not None
        arrays: list[np.ndarray] = []
        labels: list[str] = []
        header = {
            "op": "call",
            "function": name,
            "trace": trace,
            "args": {
                "t": [
                    messages.encode(arg, arrays, 1, labels, f"argument {i + 1}") for i, arg in enumerate(args)
                ]
            },
            "kwargs": {
                "d": {key: messages.encode(arg, arrays, 1, labels, key) for key, arg in kwargs.items()}
            },
        }
        self.mutated, self.trace = [], []
        inputs = self.inputs = SharedInputs(worker.inputs)
        shared = inputs.write(arrays)  # the arrays travel in the shared file
        if worker.measured:  # earlier calls' inputs must not count in its resident memory
            shared["release"] = True
        header["shared"] = shared
        deadline = self._deadline(self.limits.call_seconds)
        sent = time.monotonic()
        try:
            worker.send(header, [])
            response, out = worker.receive(deadline, loads=LAST_REPLY)
            check_reply(response)
        except TimeoutError:
            where = worker.where_busy(self.source_dir)
            self.retire(worker)
            self.not_again[name] = (
                LearnerTimeout,
                f"Not run: an earlier call to {name} went over the {self.limits.call_seconds:g} s limit.",
            )
            raise LearnerTimeout(
                f"{name}(...) did not return within {self.limits.call_seconds:g} s:"
                f" look for a loop that never ends.{where}"
            ) from None
        except messages.ProtocolError as problem:
            self.retire(worker)
            raise LearnerError(malformed_reply(problem)) from None
        except (EOFError, BrokenPipeError):
            message = worker.death_message(self.source_dir)
            self.retire(worker)
            self.not_again[name] = (
                LearnerError,
                f"Not run: an earlier call to {name} ended the Python process running your code"
                " (the first check that called it says how).",
            )
            raise LearnerError(message) from None
        finally:
            self.call_seconds += time.monotonic() - sent
        # Verdicts are the grader's: the inputs as it reads them back now, whatever the reply
        # says; the shape trace is only data for a picture, checked before anything uses it.
        self.mutated = [labels[i] for i in inputs.changed()]
        self.trace = checked_trace(response.get("trace"))
        if not response.get("ok"):
            failed = problem_for(
                response.get("error") or {}, name, self.module, self.lessons, self.limits.memory_bytes
            )
            if isinstance(failed, LearnerError):  # the shapes it was called with, for feedback
                failed.call = (
                    name,
                    {label: array.shape for label, array in zip(labels, arrays, strict=True)},
                )
            raise failed
        try:
            return messages.decode(response.get("result"), out)
        except messages.ProtocolError as problem:
            self.retire(worker)
            raise LearnerError(malformed_reply(problem)) from None

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
        from the kernel, never from the worker (see ``measured.measure_call``). ``peak_bytes``
        counts from a blank worker's resident size, so it includes what the learner's module
        keeps between calls, the call's inputs and the peak of the module's own import (an
        import that computes answers ahead is counted); see ``testing.check_peak_below``.

        Raises like an ordinary call; a RuntimeError if this machine cannot measure soundly
        (no Landlock, so learner code could reset the mark itself)."""
        return measure_call(self, name, args, kwargs)
