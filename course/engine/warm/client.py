"""Calling the warm grader: a check's request sent to the background process that keeps pytest,
hypothesis and numpy imported (``server``), or that process started.

A cold ``course check`` spends most of its time importing. So the first check also starts the
warm grader (detached, one per user and course build: see ``server`` for what it does), and
later checks send it their request over a Unix socket. This side is standard library only, so a
warm check never imports numpy: ``course check`` imports this module before it sends its
request, and a check answered from the result cache imports it for ``fingerprint`` alone.

The socket's name carries a fingerprint of the course's files, so a changed course is never
graded by an old server. Anything unexpected on the way (no server, a refused connection, a
malformed answer) makes the caller grade in its own process: the server only ever makes a check
faster.

Another local user must not be able to answer for the server, nor to run code in it. The socket
lives in a folder of ours that nobody else can enter, and each end checks that the other runs as
us (see ``private_socket``); on any doubt the check is graded in the calling process. The
server starts isolated (``python -I``: no current folder, no PYTHONPATH, no user site) with that
private folder as its working folder, so a ``numpy.py`` planted in the temporary folder is
never imported.

Set ``COURSE_SERVER=off`` to grade every check in the calling process.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from course.engine.warm import private_socket

PACKAGE = Path(__file__).resolve().parents[2]
REQUEST_SECONDS = 75.0  # above the time a whole check may take (limits.Limits.run_seconds)


def enabled() -> bool:
    return os.environ.get("COURSE_SERVER", "on").lower() not in ("off", "0", "no", "false")


_LAST: list[tuple[float, str]] = []  # (when, fingerprint) this process computed last
_REUSE_FOR = 2.0  # seconds: a check asks twice (its cache key, the socket); a watch, on every save


def fingerprint(again: bool = True) -> str:
    """A digest of the interpreter, the limits, the grading secret's identity (``secret``) and
    every course file the grade depends on. ``again`` False: the one this process computed
    within the last ``_REUSE_FOR`` seconds, if any (a check reads the build twice in a row; the
    server, watching for a changed build, always computes it again)."""
    if not again and _LAST and time.monotonic() - _LAST[0][0] < _REUSE_FOR:
        return _LAST[0][1]
    from course.content import resources
    from course.engine.testing import secret

    limits = os.environ.get("COURSE_LIMITS", "")
    digest = hashlib.sha256(
        f"{sys.prefix}:{os.path.realpath(sys.executable)}:{limits}:{secret.environment_identity()}".encode()
    )
    for folder in (PACKAGE, resources.data_dir("grading")):
        for path in sorted(folder.rglob("*")):
            if path.suffix in (".py", ".toml", ".ini", ".npz") and "__pycache__" not in path.parts:
                stat = path.stat()
                digest.update(f"{path}:{stat.st_mtime_ns}:{stat.st_size}".encode())
    _LAST[:] = [(time.monotonic(), digest.hexdigest()[:20])]
    return _LAST[0][1]


def socket_path() -> Path | None:
    """This build's socket in our private folder; None when no such folder can be had."""
    return private_socket.socket_in_private_folder(f"grader-{fingerprint(again=False)}.sock")


def request(module: str, source_dir: Path, timeout: float) -> dict | None:
    """The server's grade of ``source_dir/<module>.py`` as a dict, or None if it cannot help."""
    answers = request_many([module], source_dir, timeout)
    return answers[0] if answers else None


def request_many(modules: list[str], source_dir: Path, timeout: float) -> list[dict | None] | None:
    """The server's grades of these lessons of ``source_dir`` (one request: the server grades
    them side by side, one process per core), as dicts in order (None for a lesson it could
    not grade); None if it cannot help at all. A check sends and reads apart (``send``,
    ``answer``), to do its own work in between."""
    return answer(send(modules, source_dir, timeout), len(modules))


def send(modules: list[str], source_dir: Path, timeout: float) -> socket.socket | None:
    """The request of ``request_many``, sent: the connection its answer comes on, or None if
    no server could take it."""
    try:
        connection = private_socket.connect(socket_path(), timeout)
        if connection is None:
            return None
        try:
            order = {"modules": list(modules), "source_dir": str(source_dir)}
            connection.settimeout(timeout * max(1, len(modules)))
            connection.sendall(json.dumps(order).encode() + b"\n")
            connection.shutdown(socket.SHUT_WR)
        except OSError:
            connection.close()
            return None
        return connection
    except (OSError, ValueError):
        return None


def answer(
    connection: socket.socket | None, count: int, while_waiting: Callable[[], object] | None = None
) -> list[dict | None] | None:
    """The answer to a request ``send`` sent for ``count`` lessons (see ``request_many``); the
    connection is closed. ``while_waiting`` is called first: the caller's own preparation,
    done while the server grades (whatever it raises is ignored)."""
    if connection is None:
        return None
    try:
        with connection:
            if while_waiting is not None:
                try:
                    while_waiting()
                except Exception:  # noqa: BLE001 - the caller's preparation, not the request
                    pass
            chunks = []
            while chunk := connection.recv(1 << 16):
                chunks.append(chunk)
        answered = json.loads(b"".join(chunks))
        results = answered.get("results") if isinstance(answered, dict) else None
        if not isinstance(results, list) or len(results) != count:
            return None
        return [r if isinstance(r, dict) and "exercises" in r else None for r in results]
    except (OSError, ValueError):
        return None


def stop() -> bool:
    """Ask the server of this course build to exit; True if one answered."""
    try:
        opened = private_socket.connect(socket_path(), 5)
        if opened is None:
            return False
        with opened as connection:
            connection.sendall(b'{"op": "stop"}\n')
            return b"stopped" in connection.recv(100)
    except OSError:
        return False


def ready(timeout: float) -> bool:
    """Wait until a server for this build accepts connections (for benchmarks and tests)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        connection = private_socket.connect(socket_path(), 5)
        if connection is not None:
            connection.close()
            return True
        time.sleep(0.1)
    return False


def start_in_background() -> None:
    """Start a server for this course build unless one is running (or starting) already."""
    path = socket_path()
    if path is None:
        return
    try:
        with open(f"{path}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: nobody serves this build
    except OSError:
        return
    import subprocess

    from course.engine.sandbox.limits import ONE_THREAD

    subprocess.Popen(
        [sys.executable, "-I", "-c", _BOOT, str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=dict(os.environ, **ONE_THREAD),
        close_fds=True,
        cwd=path.parent,  # private: nothing planted there is imported (and -I ignores it anyway)
    )


# -I ignores PYTHONPATH, the user's site-packages and the current folder, so the server is told
# where the course lives (as the sandbox's keeper is: see course/engine/sandbox/process.py).
_BOOT = (
    f"import sys; sys.path.insert(0, {str(PACKAGE.parent)!r}); "
    "from pathlib import Path; from course.engine.warm.server import serve; "
    "sys.exit(serve(Path(sys.argv[1])))"
)
