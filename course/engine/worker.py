"""The worker: the only process that imports and runs a learner's module.

Started by ``processes.Worker`` with ``python -I`` and two pipe descriptors. Its first message names
the folder and module to load and the modules that are lessons (a spare worker can wait for it
with numpy already imported). It limits its own memory before importing anything of the
learner's, imports the module (lessons only from their ``.py`` source, see ``_LessonFinder``), then
answers calls with plain data (see ``protocol``). It decides nothing about grades: it reports what
happened, including exceptions with the learner's own frames. A call's input arrays are views of
a file the grader wrote them into (``protocol.shared_views``): whether the learner changed them is
for the grader to read there after the reply, never for the worker to say.
"""

from __future__ import annotations

import builtins
import errno
import faulthandler
import importlib.machinery
import inspect
import mmap
import os
import resource
import signal
import sys
import traceback
from pathlib import Path
from types import FunctionType
from typing import Any

import numpy as np

from course.engine import protocol, sandbox

OUTPUT_LIMIT = 8 * 1024 * 1024

# Learner code may replace builtins or numpy functions; the worker's own bookkeeping must not
# be fooled by that, so it keeps the originals and puts builtins back after the learner runs.
_BUILTINS = dict(builtins.__dict__)
_confined = {"abi": 0}  # the Landlock ABI this worker confined itself with (0: none)
_shared: dict[str, Any] = {"fd": -1, "map": bytearray(0)}  # the grader's inputs file, mapped
_VARARGS, _VARKEYWORDS = inspect.CO_VARARGS, inspect.CO_VARKEYWORDS


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


# The finder and loader below need no base class (the import system asks only for their
# methods), and importlib.abc would load tempfile and random into every worker, the latter with
# a fork handler that reseeds in every keeper and worker the zygote forks.
class _LessonLoader:
    """Executes a lesson module from its ``.py`` source, compiled here: never from bytecode."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module object

    def exec_module(self, module: Any) -> None:
        source = self.path.read_bytes()
        code = compile(source, str(self.path), "exec", dont_inherit=True)  # not our __future__s
        exec(code, module.__dict__)  # noqa: S102 - the learner's lesson file, in the worker


class _LessonFinder:
    """First in ``sys.meta_path``: a module named like a lesson (``names``, data from the
    grader) is only ever ``<source_dir>/<name>.py``, never a package, a ``.pyc``, an extension
    module or anything else on the path named like it. No such file: no such module."""

    def __init__(self, source_dir: Path, names: list[str]) -> None:
        self.source_dir = source_dir
        self.names = frozenset(names)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.names:
            return None
        file = self.source_dir / f"{fullname}.py"
        if not file.is_file():  # the same words as Python's own import system
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        loader: Any = _LessonLoader(file)
        spec = importlib.machinery.ModuleSpec(fullname, loader, origin=str(file))
        spec.has_location = True  # sets __file__, which tracebacks and shape traces read
        return spec


def _learner_frames(tb: Any, source_dir: Path) -> list[dict]:
    """The traceback frames that belong to files in the learner's folder, outermost first."""
    frames = []
    for frame in traceback.extract_tb(tb):
        path = Path(frame.filename)
        if path.parent == source_dir:
            frames.append(
                {
                    "file": path.name,
                    "line": frame.lineno,
                    "function": frame.name,
                    "code": (frame.line or "").strip()[:200],
                }
            )
    return frames


def _describe_error(exc: BaseException, source_dir: Path) -> dict:
    try:
        message = str(exc)[:2000]
    except Exception:  # noqa: BLE001 - a learner's exception may fail to print
        message = "<message could not be printed>"
    info: dict[str, Any] = {
        "type": type(exc).__name__[:100],
        "message": message,
        "frames": _learner_frames(exc.__traceback__, source_dir),
    }
    if isinstance(exc, SystemExit):
        info["message"] = (
            f"sys.exit({exc.code!r}) was called instead of returning a value; remove it from your file."
        )[:500]
    if isinstance(exc, PermissionError) and exc.filename is not None and _confined["abi"]:
        info["message"] = (
            f"{message} (while it is graded, your code may write no file, not even in its "
            "working folder: return your results instead of saving them)"
        )[:2000]
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        info["type"] = "OutputLimit"
        info["message"] = (
            f"Your code printed more than {OUTPUT_LIMIT // 2**20} MiB, the limit "
            "for one check; look for a print inside a loop."
        )
    if isinstance(exc, SyntaxError):
        path = Path(exc.filename or "")
        info["syntax"] = {
            "file": path.name,
            "line": exc.lineno,
            "offset": exc.offset,
            "text": (exc.text or "").rstrip("\n")[:300],
        }
        info["message"] = exc.msg
    frames = info["frames"]
    info["origin"] = frames[-1]["file"].removesuffix(".py") if frames else None
    return info


def _lesson_modules(source_dir: Path) -> list[str]:
    """Names of the modules imported from the learner's folder (the lesson and its imports).

    Only a path with the folder's name in it can be in the folder, so only those become a
    ``Path``: a Path for each of numpy's two hundred modules cost a worker over a millisecond."""
    found = []
    folder = source_dir.name
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and (type(path) is not str or folder in path) and Path(path).parent == source_dir:
            found.append(name)
    return sorted(found)


def _shapes(value: Any) -> list:
    """The shapes inside a value (an array, or a tuple/list of them), for a shape trace."""
    if isinstance(value, np.ndarray):
        return [list(value.shape)]
    if isinstance(value, (tuple, list)) and len(value) <= 8:
        return [shape for item in value for shape in _shapes(item)]
    return [None]


def _record_lesson_calls(module: Any, source_dir: Path, trace: list[dict]) -> list:
    """Wrap the functions ``module`` imported from the learner's other lessons so that each
    call appends its name and its argument and result shapes to ``trace``; returns undo steps."""
    undo = []
    for name, value in list(vars(module).items()):
        origin = sys.modules.get(getattr(value, "__module__", "") or "")
        path = getattr(origin, "__file__", None)
        if not (
            inspect.isfunction(value) and origin is not module and path and Path(path).parent == source_dir
        ):
            continue

        def recorder(*args: Any, _name: str = name, _real: Any = value, **kwargs: Any) -> Any:
            entry: dict = {"function": _name, "args": [s for a in args for s in _shapes(a)]}
            trace.append(entry)
            result = _real(*args, **kwargs)
            entry["result"] = _shapes(result)
            return result

        setattr(module, name, recorder)
        undo.append(lambda _name=name, _real=value: setattr(module, _name, _real))
    return undo


def _binds(function: Any, args: tuple, kwargs: dict) -> bool:
    """True when ``function`` surely takes these arguments, as ``inspect.Signature.bind`` would
    say, read from a plain function's code object (a few µs, where ``inspect`` takes tens: the
    check runs on every call). False when it cannot or when unsure (a callable of another kind,
    one with attributes such as ``__signature__`` or ``__wrapped__``, an argument passed by
    keyword to a positional-only parameter): ``_mismatch`` decides then."""
    if type(function) is not FunctionType or type(function.__dict__) is not dict or function.__dict__:
        return False
    code, defaults, kwdefaults = function.__code__, function.__defaults__, function.__kwdefaults__
    defaults = () if defaults is None else defaults
    if type(defaults) is not tuple or not (kwdefaults is None or type(kwdefaults) is dict):
        return False
    count, kwonly, flags = code.co_argcount, code.co_kwonlyargcount, code.co_flags
    names = code.co_varnames
    if len(defaults) > count or len(names) < count + kwonly or (len(args) > count and not flags & _VARARGS):
        return False
    positional, keyword_only = names[:count], names[count : count + kwonly]
    for key in kwargs:
        if key in positional:
            if positional.index(key) < max(code.co_posonlyargcount, len(args)):
                return False  # positional-only, or given twice
        elif key not in keyword_only and not flags & _VARKEYWORDS:
            return False
    required = positional[len(args) : count - len(defaults)]
    if any(name not in kwargs for name in required):
        return False
    return all(name in kwargs or (kwdefaults is not None and name in kwdefaults) for name in keyword_only)


def _mismatch(function: Any, args: tuple, kwargs: dict) -> dict | None:
    """Why ``function``'s signature cannot take these arguments, found without running it (a
    "SignatureMismatch" error with the learner's signature as data), or None when it can."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # no signature to read: the call itself will tell
        return None
    try:
        signature.bind(*args, **kwargs)
        return None
    except TypeError as exc:
        complaint = str(exc)
    # Python's own words for this call ("linear() takes 2 positional arguments but 3 were
    # given"), from an empty function of the same signature: names and kinds only, no defaults'
    # values or annotations, so nothing of the learner's is evaluated.
    empty = inspect.Parameter.empty
    bare = signature.replace(
        parameters=[
            p.replace(annotation=empty, default=empty if p.default is empty else None)
            for p in signature.parameters.values()
        ],
        return_annotation=empty,
    )
    namespace: dict[str, Any] = {}
    try:
        exec(f"def stand_in{bare}:\n    pass\n", namespace)  # noqa: S102 - built from identifiers
        stand_in = namespace["stand_in"]
        qualname = getattr(function, "__qualname__", None)
        stand_in.__qualname__ = qualname if isinstance(qualname, str) else "function"
        stand_in(*args, **kwargs)
    except TypeError as exc:
        complaint = str(exc)
    except Exception:  # noqa: BLE001 - keep inspect's words
        pass
    return {
        "type": "SignatureMismatch",
        "message": complaint[:2000],
        "signature": str(bare)[:500],
        "frames": [],
        "origin": None,
    }


def _refusal(kind: str, message: str) -> dict:
    """A reply for a call the worker did not make (no such function, a class, a generator)."""
    return {"ok": False, "error": {"type": kind, "message": message, "frames": [], "origin": None}}


def _shared_inputs(shared: Any) -> list[np.ndarray]:
    """A call's input arrays: writable views of the file the grader wrote them into (the
    descriptor this worker inherited, mapped once, and again when the grader grew it), so that
    what the learner's code does to them happens in the grader's file. ``release``: the grader
    measures this worker's memory, so earlier calls' pages must leave its resident memory."""
    if not isinstance(shared, dict) or type(shared.get("size")) is not int:
        raise protocol.ProtocolError("bad shared inputs")
    size = shared["size"]
    if size and len(_shared["map"]) < size:
        _shared["map"] = mmap.mmap(_shared["fd"], max(size, os.fstat(_shared["fd"]).st_size))
    elif size and shared.get("release") is True:  # read again if still used (some µs a call)
        _shared["map"].madvise(mmap.MADV_DONTNEED)
    return protocol.shared_views(_shared["map"] if size else bytearray(0), shared.get("arrays"))


def _call(module: Any, header: dict, arrays: list[np.ndarray], source_dir: Path) -> tuple[dict, list]:
    name = header.get("function", "")
    function = getattr(module, name, None)
    if function is None or not callable(function):
        return _refusal("MissingFunction", name), []
    if "shared" in header:
        try:
            arrays = _shared_inputs(header["shared"])
        except (OSError, ValueError, protocol.ProtocolError) as exc:
            if isinstance(exc, OSError) and exc.errno == errno.ENOMEM:
                return _refusal("MemoryError", "the call's inputs did not fit in the memory limit"), []
            return _refusal("SharedInputs", f"the grader's inputs could not be read here ({exc})"), []
    args = protocol.decode(header["args"], arrays)
    kwargs = protocol.decode(header["kwargs"], arrays)
    if inspect.isclass(function):
        return _refusal(
            "NotAFunction",
            f"{name} is a class, not a function: write `def {name}(...)` and return the array.",
        ), []
    trace: list[dict] = []
    unwrap = _record_lesson_calls(module, source_dir, trace) if header.get("trace") else []
    try:
        # Reading a signature may run the learner's code too (a __signature__ property).
        mismatch = None if _binds(function, args, kwargs) else _mismatch(function, args, kwargs)
        result = None if mismatch else function(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - everything the learner raises is reported
        _restore_builtins()
        for undo in unwrap:
            undo()
        return {"ok": False, "error": _describe_error(exc, source_dir), "trace": trace}, []
    _restore_builtins()
    for undo in unwrap:
        undo()
    if mismatch:
        return {"ok": False, "error": mismatch, "trace": trace}, []
    if inspect.isgenerator(result):
        return _refusal(
            "NotAFunction",
            f"{name} is a generator function (it contains `yield`): use `return`, not `yield`, "
            "to give back the array.",
        ), []
    out: list[np.ndarray] = []
    try:
        tagged = protocol.encode(result, out)
    except BaseException as exc:  # noqa: BLE001
        return {"ok": False, "error": _describe_error(exc, source_dir)}, []
    return {"ok": True, "result": tagged, "trace": trace}, out


def main(argv: list[str]) -> int:
    """``argv``: the request and response pipes, the inputs file's descriptor, and "filtered"
    when the keeper installed the seccomp filter (no sockets) on this process."""
    request_fd, response_fd, _shared["fd"] = int(argv[0]), int(argv[1]), int(argv[2])
    filtered = argv[3:4] == ["filtered"]
    # Before anything of the learner's: write no file anywhere (only the descriptors it holds).
    confined = _confined["abi"] = sandbox.confine()
    # On SIGUSR1 the grader learns where a call that overran its time is stuck.
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=False)
    faulthandler.enable(file=sys.stderr, all_threads=False)  # and where a crash happened
    read = lambda n: protocol.read_exact(request_fd, n)  # noqa: E731
    loads = protocol.LastParsed()  # _call and unpack only read what it returns
    try:  # the first message says what to load; a spare worker waits here, numpy imported
        order, _ = protocol.unpack(read)
    except (EOFError, protocol.ProtocolError):
        return 0
    source_dir = Path(str(order.get("source_dir", ""))).resolve()
    module_name = str(order.get("module", ""))
    lessons = [name for name in order.get("lessons", []) if isinstance(name, str) and name.isidentifier()]
    readable = order.get("readable")
    if readable is not None and not (
        isinstance(readable, list) and sandbox.restrict_reads([str(path) for path in readable])
    ):
        refusal = _refusal(
            "Unconfined",
            "This machine cannot keep the code graded from reading the course's reference "
            "solutions and other submissions (it has no Landlock), so it was not run.",
        )
        protocol.write_all(response_fd, protocol.pack({**refusal, "lesson_modules": []}, []))
        return 0
    _limit_resources(int(order.get("memory_bytes", 0)))
    sys.dont_write_bytecode = True  # never leave __pycache__ in the learner's folder
    # Lesson modules (this one and those it imports) come from their .py source only, found
    # before any other finder; the learner's own helpers (utils.py) import from the folder.
    sys.meta_path.insert(0, _LessonFinder(source_dir, [*lessons, module_name]))
    sys.path.append(str(source_dir))  # last, so a learner's numpy.py cannot shadow numpy

    import importlib

    module = None
    try:
        module = importlib.import_module(module_name)
        _restore_builtins()
        header: dict = {
            "ok": True,
            "lesson_modules": _lesson_modules(source_dir),
            "sandbox": confined,
            "filtered": filtered,
        }
    except BaseException as exc:  # noqa: BLE001
        _restore_builtins()
        header = {
            "ok": False,
            "error": _describe_error(exc, source_dir),
            "lesson_modules": _lesson_modules(source_dir),
        }
    protocol.write_all(response_fd, protocol.pack(header, []))

    while True:
        try:
            request, arrays = protocol.unpack(read, loads=loads)
        except EOFError:
            return 0
        if request.get("op") != "call" or module is None:
            return 0
        response, out = _call(module, request, arrays, source_dir)
        try:
            message = protocol.pack(response, out)
        except BaseException as exc:  # noqa: BLE001 - e.g. MemoryError on a huge result
            message = protocol.pack({"ok": False, "error": _describe_error(exc, source_dir)}, [])
        protocol.write_all(response_fd, message)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
