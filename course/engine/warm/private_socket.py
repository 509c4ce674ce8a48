"""Where the warm grader's Unix socket lives, and how each end knows the other is our user.

Another local user must not be able to answer for the warm grader (a "passed" for every
request) nor to ask it for anything. So the socket lives in ``attention-course-<uid>/`` under
``$XDG_RUNTIME_DIR``, else the temporary folder (``$TMPDIR``, then /tmp), and that folder is used
only if it is a real folder owned by us that nobody else can enter (``private_folder``): one
that another user made first, or that is open to others, is never used. Before a byte is sent,
the caller checks that the socket file is ours and that the process behind it runs as us
(``SO_PEERCRED``: the kernel's record of the peer, which the peer cannot forge); the server
checks the same of every caller. Standard library only: the calling side never imports numpy.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from collections.abc import Iterator
from pathlib import Path

PATH_LIMIT = 100  # AF_UNIX paths are limited to about 108 bytes


def _bases() -> Iterator[str]:
    """Where our folder may be, in order: $XDG_RUNTIME_DIR, the temporary folder, /tmp (the
    temporary folder is looked up only when needed: a check need not import ``tempfile``)."""
    if os.environ.get("XDG_RUNTIME_DIR"):
        yield os.environ["XDG_RUNTIME_DIR"]
    import tempfile

    if tempfile.gettempdir():
        yield tempfile.gettempdir()
    yield "/tmp"


def socket_in_private_folder(name: str) -> Path | None:
    """``name`` in our private folder; None when no such folder can be had, or when the peer
    of a socket cannot be known (no SO_PEERCRED: not Linux), so no server is started for
    nothing."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    for base in _bases():
        folder = Path(base) / f"attention-course-{os.getuid()}"
        if len(str(folder / name)) < PATH_LIMIT:
            break
    return folder / name if private_folder(folder) else None


def private_folder(folder: Path) -> bool:
    """Make ``folder`` (mode 0700) unless it exists; True only if it is a real folder owned by
    us that nobody else can enter or write, in a parent where nobody else can rename it."""
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    try:
        mine, parent = os.lstat(folder), os.stat(folder.parent)
    except OSError:
        return False
    shared_parent = parent.st_mode & 0o022 and not parent.st_mode & stat.S_ISVTX
    return (
        stat.S_ISDIR(mine.st_mode)
        and mine.st_uid == os.getuid()
        and not mine.st_mode & 0o077
        and parent.st_uid in (0, os.getuid())
        and not shared_parent
    )


def peer_is_us(connection: socket.socket) -> bool:
    """Whether the process at the other end of a Unix socket runs as our user."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return False
    size = struct.calcsize("3i")
    try:
        _, uid, _ = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, option, size))
    except (OSError, struct.error):
        return False
    return uid == os.getuid()


def connect(path: Path | None, timeout: float) -> socket.socket | None:
    """A connection to the server at ``path``, or None: no path, no socket there, a socket that
    is not ours, or a peer that does not run as us."""
    if path is None:
        return None
    try:
        found = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISSOCK(found.st_mode) or found.st_uid != os.getuid():
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.settimeout(timeout)
        connection.connect(str(path))
        if peer_is_us(connection):
            return connection
    except ConnectionRefusedError:  # nobody listens: a server that was killed left it
        remove_if_abandoned(path)
    except OSError:
        pass
    connection.close()
    return None


def remove_if_abandoned(path: Path) -> bool:
    """Remove the socket ``path`` if no server holds its lock (``path.lock``, held for a
    server's lifetime): a server killed without cleaning up left it. Whether it was removed."""
    import fcntl

    try:
        with open(f"{path}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            path.unlink(missing_ok=True)
            return True
    except OSError:
        return False
