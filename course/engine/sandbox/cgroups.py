"""A submission's memory bounded as a whole: a memory cgroup of its own, below the grader's.

Memory limits per process (RLIMIT_AS) bound one worker; a submission graded in a class has a
worker per lesson, loading together. Where the kernel lets this process make a cgroup below
its own (cgroup v2 with the memory controller delegated to it, or v1's memory hierarchy), a
submission's workers are put in one, whose limit bounds them together. No process is ever
moved out of its own cgroup: only the grader's fresh workers go down into the child. Where no
cgroup can be made, ``make`` returns None and the grader falls back on workers that start no
process, each limited to its share of the budget (see ``class_stream``).
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

_COUNTER = itertools.count()


def _own_memory_cgroup() -> Path | None:
    """The folder of this process's memory cgroup (v1's memory hierarchy, or v2's unified
    one when its memory controller can be used below it), or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    places: dict[str, tuple[str, str]] = {}  # hierarchy -> (its root seen here, mount point)
    for line in mounts:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        kind, _, options = (line.split(" - ", 1)[1].split() + ["", "", ""])[:3]
        if kind == "cgroup" and "memory" in options.split(","):
            places["v1"] = (fields[3], fields[4])
        elif kind == "cgroup2":
            places.setdefault("v2", (fields[3], fields[4]))

    def below_mount(hierarchy: str, path: str) -> Path | None:
        root, mount = places[hierarchy]
        if not (path == root or path.startswith(root.rstrip("/") + "/")):
            return None  # our cgroup is not in what this namespace sees
        return Path(mount + "/" + path[len(root) :].lstrip("/"))

    for line in lines:
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if "memory" in controllers.split(",") and "v1" in places:
            return below_mount("v1", path)
        if number == "0" and controllers == "" and "v2" in places:
            folder = below_mount("v2", path)
            if folder is None:
                return None
            try:
                if "memory" in (folder / "cgroup.subtree_control").read_text().split():
                    return folder
            except OSError:
                return None
    return None


class SubmissionGroup:
    """One submission's memory cgroup: ``add`` a worker before it loads anything, ``close``
    when the submission is graded (its folder goes once its processes have ended)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @classmethod
    def make(cls, limit_bytes: int) -> SubmissionGroup | None:
        """A new cgroup of ``limit_bytes`` below this process's own, or None where none can be
        made (no memory cgroup, or none this process may write)."""
        own = _own_memory_cgroup()
        if own is None:
            return None
        folder = own / f"course-{os.getpid()}-{next(_COUNTER)}"
        try:
            folder.mkdir()
        except OSError:
            return None
        group = cls(folder)
        limits = ("memory.max",) if (folder / "memory.max").exists() else ("memory.limit_in_bytes",)
        try:
            for name in limits:
                (folder / name).write_text(str(limit_bytes))
            if (folder / "memory.memsw.limit_in_bytes").exists():  # swap counted too, where it is
                (folder / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
        except OSError:
            group.close()
            return None
        return group

    def add(self, pid: int) -> bool:
        """Put process ``pid`` (a worker not yet loading anything) in the group."""
        try:
            (self.folder / "cgroup.procs").write_text(str(pid))
            return True
        except OSError:
            return False

    def holds(self, pid: int) -> bool:
        """Whether process ``pid`` is in the group, as the kernel lists it."""
        try:
            return str(pid) in (self.folder / "cgroup.procs").read_text().split()
        except OSError:
            return False

    def close(self, seconds: float = 2.0) -> None:
        """Remove the group's folder once its processes have ended (their keepers kill them
        as their modules close), waiting up to ``seconds``; a group still busy then is left to
        the next ``close``."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                self.folder.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() >= deadline:
                    return
                time.sleep(0.01)


def sweep() -> None:
    """Remove the groups (``course-<pid>-<n>``) of grading processes that have ended without
    removing theirs, killed by a submission or by the instructor: their folders would build up
    under this process's cgroup otherwise. A group that still holds a process is left."""
    own = _own_memory_cgroup()
    if own is None:
        return
    try:
        names = [path.name for path in own.iterdir() if path.name.startswith("course-")]
    except OSError:
        return
    for name in names:
        maker = name.split("-")[1]
        if not maker.isdigit():
            continue
        try:
            os.kill(int(maker), 0)
            continue  # its maker is alive: its own to remove
        except ProcessLookupError:
            pass
        except OSError:
            continue
        SubmissionGroup(own / name).close(seconds=0)
