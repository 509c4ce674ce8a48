"""The worker: the only process that imports and runs a learner's module.

Run by its keeper (``keeper.main``) in the child it forks, with the request and response pipes
and the inputs file's descriptor. Its first message names the folder and module to load and the
modules that are lessons (a spare worker waits for it with numpy already imported). It limits its
own memory before importing anything of the learner's, imports the module (lessons only from
their ``.py`` source, see ``lessons``), then answers calls with plain data (see ``messages``). It
decides nothing about grades: it reports what happened, including exceptions with the learner's
own frames. An experiment's worker also keeps freed memory for reuse (``allocator``), set after
the fork, before the import. A call's input arrays are views of a file the grader wrote them into
(``messages.shared_views``): whether the learner changed them is for the grader to read there
after the reply, never for the worker to say.
"""

from __future__ import annotations

import builtins
import errno
import faulthandler
import inspect
import mmap
import os
import resource
import signal
import sys
from pathlib import Path
from typing import Any

import numpy as np

from course.engine.sandbox import landlock, seccomp
from course.engine.sandbox.worker.allocator import keep_freed_memory
from course.engine.sandbox.worker.errors import OUTPUT_LIMIT, confined, describe_error
from course.engine.sandbox.worker.lessons import LessonFinder, lesson_modules
from course.engine.sandbox.worker.shape_trace import record_lesson_calls
from course.engine.sandbox.worker.signatures import binds, mismatch
from course.engine.wire import messages

# Learner code may replace builtins or numpy functions; the worker's own bookkeeping must not
# be fooled by that, so it keeps the originals and puts builtins back after the learner runs.
_BUILTINS = dict(builtins.__dict__)
_shared: dict[str, Any] = {"fd": -1, "map": bytearray(0)}  # the grader's inputs file, mapped


def _restore_builtins() -> None:
    current = builtins.__dict__
    if current != _BUILTINS:
        current.clear()
        current.update(_BUILTINS)


def _limit_resources(memory_bytes: int) -> None:
    if memory_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # Printing floods a file, not the grader: past this size a print fails instead of growing it.
    resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT, OUTPUT_LIMIT))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _refusal(kind: str, message: str) -> dict:
    """A reply for a call the worker did not make (no such function, a class, a generator)."""
    return {"ok": False, "error": {"type": kind, "message": message, "frames": [], "origin": None}}


def _shared_inputs(shared: Any) -> list[np.ndarray]:
    """A call's input arrays: writable views of the file the grader wrote them into (the
    descriptor this worker inherited, mapped once, and again when the grader grew it), so that
    what the learner's code does to them happens in the grader's file. ``release``: the grader
    measures this worker's memory, so earlier calls' pages must leave its resident memory."""
    if not isinstance(shared, dict) or type(shared.get("size")) is not int:
        raise messages.ProtocolError("bad shared inputs")
    size = shared["size"]
    if size and len(_shared["map"]) < size:
        _shared["map"] = mmap.mmap(_shared["fd"], max(size, os.fstat(_shared["fd"]).st_size))
    elif size and shared.get("release") is True:
        # Earlier calls' pages leave the resident memory with their mapping (madvise's
        # DONTNEED is refused to a measured worker: learner code could hide data with it).
        earlier = _shared["map"]
        _shared["map"] = mmap.mmap(_shared["fd"], max(size, os.fstat(_shared["fd"]).st_size))
        try:
            earlier.close()
        except BufferError:
            pass  # the learner's code kept a view of earlier inputs: they stay, and count
    return messages.shared_views(_shared["map"] if size else bytearray(0), shared.get("arrays"))


def _call(module: Any, header: dict, arrays: list[np.ndarray], source_dir: Path) -> tuple[dict, list]:
    name = header.get("function", "")
    function = getattr(module, name, None)
    if function is None or not callable(function):
        return _refusal("MissingFunction", name), []
    if "shared" in header:
        try:
            arrays = _shared_inputs(header["shared"])
        except (OSError, ValueError, messages.ProtocolError) as exc:
            if isinstance(exc, OSError) and exc.errno == errno.ENOMEM:
                return _refusal("MemoryError", "the call's inputs did not fit in the memory limit"), []
            return _refusal("SharedInputs", f"the grader's inputs could not be read here ({exc})"), []
    args = messages.decode(header["args"], arrays)
    kwargs = messages.decode(header["kwargs"], arrays)
    if inspect.isclass(function):
        return _refusal(
            "NotAFunction",
            f"{name} is a class, not a function: write `def {name}(...)` and return the array.",
        ), []
    trace: list[dict] = []
    unwrap = record_lesson_calls(module, source_dir, trace) if header.get("trace") else []
    try:
        # Reading a signature may run the learner's code too (a __signature__ property).
        mismatched = None if binds(function, args, kwargs) else mismatch(function, args, kwargs)
        result = None if mismatched else function(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - everything the learner raises is reported
        _restore_builtins()
        for undo in unwrap:
            undo()
        return {"ok": False, "error": describe_error(exc, source_dir), "trace": trace}, []
    _restore_builtins()
    for undo in unwrap:
        undo()
    if mismatched:
        return {"ok": False, "error": mismatched, "trace": trace}, []
    if inspect.isgenerator(result):
        return _refusal(
            "NotAFunction",
            f"{name} is a generator function (it contains `yield`): use `return`, not `yield`, "
            "to give back the array.",
        ), []
    out: list[np.ndarray] = []
    try:
        tagged = messages.encode(result, out)
    except BaseException as exc:  # noqa: BLE001
        return {"ok": False, "error": describe_error(exc, source_dir)}, []
    return {"ok": True, "result": tagged, "trace": trace}, out


def main(argv: list[str]) -> int:
    """``argv``: the request and response pipes, the inputs file's descriptor, and "filtered"
    when the keeper installed the seccomp filter (no sockets) on this process."""
    request_fd, response_fd, _shared["fd"] = int(argv[0]), int(argv[1]), int(argv[2])
    filtered = argv[3:4] == ["filtered"]
    # Before anything of the learner's: write no file anywhere (only the descriptors it holds).
    abi = confined["abi"] = landlock.confine()
    # On SIGUSR1 the grader learns where a call that overran its time is stuck.
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=False)
    faulthandler.enable(file=sys.stderr, all_threads=False)  # and where a crash happened
    read = lambda n: messages.read_exact(request_fd, n)  # noqa: E731
    loads = messages.LastParsed()  # _call and unpack only read what it returns
    try:  # the first message says what to load; a spare worker waits here, numpy imported
        order, _ = messages.unpack(read)
    except (EOFError, messages.ProtocolError):
        return 0
    source_dir = Path(str(order.get("source_dir", ""))).resolve()
    module_name = str(order.get("module", ""))
    lessons = [name for name in order.get("lessons", []) if isinstance(name, str) and name.isidentifier()]
    readable = order.get("readable")
    # A submission graded in a class reads only what it needs, and starts no process: its
    # memory is its workers' (``seccomp.forbid_processes``).
    if readable is not None and isinstance(readable, list):
        confined["readable"] = [str(path) for path in readable]
    if readable is not None and not (
        isinstance(readable, list)
        and landlock.restrict_reads([str(path) for path in readable])
        and seccomp.forbid_processes()
    ):
        refusal = _refusal(
            "Unconfined",
            "This machine cannot keep the code graded from reading the course's reference "
            "solutions and other submissions, or from starting processes (it has no Landlock or "
            "no seccomp), so it was not run.",
        )
        messages.write_all(response_fd, messages.pack({**refusal, "lesson_modules": []}, []))
        return 0
    _limit_resources(int(order.get("memory_bytes", 0)))
    if order.get("keep_freed_memory") is True:  # an experiment's worker (``allocator``)
        keep_freed_memory()
    sys.dont_write_bytecode = True  # never leave __pycache__ in the learner's folder
    # Lesson modules (this one and those it imports) come from their .py source only, found
    # before any other finder; the learner's own helpers (utils.py) import from the folder.
    sys.meta_path.insert(0, LessonFinder(source_dir, [*lessons, module_name]))
    sys.path.append(str(source_dir))  # last, so a learner's numpy.py cannot shadow numpy

    import importlib

    module = None
    try:
        module = importlib.import_module(module_name)
        _restore_builtins()
        header: dict = {
            "ok": True,
            "lesson_modules": lesson_modules(source_dir),
            "sandbox": abi,
            "filtered": filtered,
        }
    except BaseException as exc:  # noqa: BLE001
        _restore_builtins()
        header = {
            "ok": False,
            "error": describe_error(exc, source_dir),
            "lesson_modules": lesson_modules(source_dir),
        }
    messages.write_all(response_fd, messages.pack(header, []))

    while True:
        try:
            request, arrays = messages.unpack(read, loads=loads)
        except EOFError:
            return 0
        if request.get("op") != "call" or module is None:
            return 0
        response, out = _call(module, request, arrays, source_dir)
        try:
            message = messages.pack(response, out)
        except BaseException as exc:  # noqa: BLE001 - e.g. MemoryError on a huge result
            message = messages.pack({"ok": False, "error": describe_error(exc, source_dir)}, [])
        messages.write_all(response_fd, message)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
