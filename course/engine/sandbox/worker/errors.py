"""How the worker describes an exception of the learner's as plain data for the grader.

``describe_error`` gives the exception's type and message (reworded for an exit, a refused write,
printing past ``OUTPUT_LIMIT`` or a syntax error) and the frames in the learner's own files; the
grader checks what it reads back (``replies.check_reply``). Imported with ``main``, before
anything of the learner's runs.
"""

from __future__ import annotations

import errno
import os
import traceback
from pathlib import Path
from typing import Any

OUTPUT_LIMIT = 8 * 1024 * 1024
# The Landlock ABI this worker confined itself with (0: none), and, for a sealed grade, the paths
# it may read: set by main.
confined: dict[str, Any] = {"abi": 0}


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


def _what_it_may_not(filename: str) -> str:
    """Why a graded worker was refused ``filename``: a path outside what a sealed grade may read
    (``confined["readable"]``) was a read; anything else, a write."""
    readable = confined.get("readable")
    if isinstance(readable, list):
        path = os.path.abspath(filename)
        if not any(path == root or path.startswith(root.rstrip("/") + "/") for root in readable):
            return (
                "while it is graded, your code may read only your own folder, Python and its "
                "libraries: nothing of the course's, another submission's or the system's"
            )
    return (
        "while it is graded, your code may write no file, not even in its working folder: "
        "return your results instead of saving them"
    )


def describe_error(exc: BaseException, source_dir: Path) -> dict:
    """``exc`` as plain data: its type and message, the learner's frames (files in
    ``source_dir``), ``origin`` (the module of the innermost one) and, for a syntax error, where."""
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
    if isinstance(exc, PermissionError) and exc.filename is not None and confined["abi"]:
        info["message"] = f"{message} ({_what_it_may_not(str(exc.filename))})"[:2000]
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
    if isinstance(exc, ModuleNotFoundError) and isinstance(exc.name, str):
        info["missing_module"] = exc.name[:200]  # which import failed, as data
    frames = info["frames"]
    info["origin"] = frames[-1]["file"].removesuffix(".py") if frames else None
    return info
