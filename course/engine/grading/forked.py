"""Work split over processes forked from this (warm) one, each sending its results back as
lines of JSON on a pipe of its own.

Both ``course check --all`` (``side_by_side``) and a class's grading
(``course.instructor.classroom.gradebook``) fork copies of a process that has loaded pytest,
hypothesis, numpy and the grading tests, let each take work from a shared queue, and read only
those pipes: learner code runs in the workers the forked processes start, never here.
"""

from __future__ import annotations

import json
import os
import select
from collections.abc import Callable
from typing import Any

Send = Callable[[Any], None]


def fork_each(count: int, body: Callable[[Send], None], received: Callable[[Any], None]) -> None:
    """Run ``body(send)`` in ``count`` processes forked from this one, side by side; ``send``
    writes a value as a line of JSON to that process's pipe. Each complete line is decoded and
    handed to ``received`` here as soon as it arrives (a line that is not JSON is dropped);
    returns once every process has ended. A process whose ``body`` raises ends with code 1:
    what it sent before stands, the rest never arrives."""
    running: dict[int, tuple[int, bytearray]] = {}  # read end -> (pid, what is not a line yet)
    for _ in range(count):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the forked process
            os.close(read)
            for other in running:
                os.close(other)
            code = 0
            try:
                with os.fdopen(write, "wb") as out:

                    def send(value: Any) -> None:
                        out.write(json.dumps(value).encode() + b"\n")
                        out.flush()

                    body(send)
            except BaseException:  # noqa: BLE001 - the caller notices what did not arrive
                code = 1
            os._exit(code)
        os.close(write)
        running[read] = (pid, bytearray())
    while running:
        ready, _, _ = select.select(list(running), [], [])
        for read in ready:
            chunk = os.read(read, 1 << 16)
            pending = running[read][1]
            pending += chunk
            *lines, rest = pending.split(b"\n")
            pending[:] = rest
            for line in lines:
                try:
                    value = json.loads(line)
                except ValueError:
                    continue
                received(value)
            if not chunk:
                pid, _ = running.pop(read)
                os.close(read)
                os.waitpid(pid, 0)
