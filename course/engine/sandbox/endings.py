"""The sentences about a worker that died or overran its time, for the learner.

``death_message`` says how the worker ended (a crash, with the learner's line where it crashed;
a signal; an exit instead of a return); ``where_busy`` asks a worker that overran its time for a
stack dump and names the learner's innermost line. Both read what the worker printed
(faulthandler writes there). ``process.Worker.death_message`` and ``process.Worker.where_busy``
hand over to these.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Protocol


class _Stopped(Protocol):
    """What these use of a ``process.Worker`` (not imported here: it imports this module)."""

    output: int  # what the worker printed: a file the grader keeps

    @property
    def pid(self) -> int | None: ...

    def exit_code(self, timeout: float = 5.0) -> int | None: ...

    def printed(self, offset: int, limit: int) -> bytes: ...

    def ask_for_stack_dump(self) -> None: ...


def death_message(worker: _Stopped, source_dir: Path | None = None, importing: bool = False) -> str:
    """How ``worker`` ended, for the learner; with ``source_dir``, a crash names the learner's
    line where it happened. ``importing``: it ended while the learner's file was imported."""
    code = worker.exit_code()
    during = " (This happened while the file was being imported.)" if importing else ""
    if code is None:
        return "The Python process running your code stopped answering the grader." + during
    if worker.pid is None:
        return (
            f"The grader could not start a Python process for your code (exit code {code}): "
            "a problem of this machine or of the course's installation, not of your code."
        )
    if code < 0:
        name = signal.Signals(-code).name
        if name == "SIGSEGV":
            where = _learner_line(_output_since(worker, 0)[-20_000:], source_dir) if source_dir else ""
            return (
                "Your code crashed the Python process (segmentation fault)."
                + where.replace(" It was busy in", " It crashed in")
                + during
            )
        if name == "SIGKILL":
            return (
                "The Python process running your code was killed (SIGKILL), most often by the "
                "operating system because it used too much memory." + during
            )
        return f"The Python process running your code was stopped by the signal {name}." + during
    if code == 72 and importing:  # the keeper's child could not give up root's powers
        return (
            "The grader could not make the Python process that runs your code give up root's "
            "powers (its capabilities), so it ran none of your code: a problem of this machine "
            "or of its container, not of your code."
        )
    instead = "while the file was being imported" if importing else "instead of returning a value"
    return (
        f"Your code ended the Python process (exit code {code}) {instead}. Remove sys.exit / "
        "os._exit / quit calls from your lesson files."
    )


def where_busy(worker: _Stopped, source_dir: Path) -> str:
    """Where a worker that overran its time is: ask it for a stack dump (faulthandler,
    on SIGUSR1) and name the learner's innermost line, or '' if it cannot tell."""
    try:
        size = os.fstat(worker.output).st_size
        worker.ask_for_stack_dump()
    except OSError:
        return ""
    deadline = time.monotonic() + 3.0  # generous: a loaded machine dumps slowly
    text = ""
    while time.monotonic() < deadline:
        time.sleep(0.02)
        text = _output_since(worker, size)
        if "most recent call first" in text and text.rstrip().endswith(">"):
            break
    return _learner_line(text, source_dir)


def _output_since(worker: _Stopped, offset: int) -> str:
    return worker.printed(offset, 200_000).decode("utf-8", "replace")


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
        with open(path, "rb") as handle:  # its start only: a learner's file may be huge
            lines = handle.read(2 << 20).split(b"\n")
        if 0 < number <= len(lines):
            return lines[number - 1].decode("utf-8", "replace").strip()[:120]
    except OSError:
        pass
    return ""
