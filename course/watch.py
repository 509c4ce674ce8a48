"""``course watch``: re-grade the current lesson each time its file is saved, on one screen.

Change events come from inotify where the kernel offers it, else from polling the files'
modification times (``--poll`` forces polling, for network or container file systems where
events do not arrive). Saves are debounced: an editor writing a file in several steps triggers
one check. Keys are read in cbreak mode, so the terminal is always restored, Ctrl-C included.
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
import sys
import termios
import time
import tty
from collections.abc import Callable
from pathlib import Path

DEBOUNCE = 0.15  # seconds of quiet after the last change before grading
_IN_CLOSE_WRITE, _IN_MOVED_TO, _IN_CREATE, _IN_MODIFY = 0x8, 0x80, 0x100, 0x2


class Changes:
    """Tells when any ``*.py`` file of a folder changed, by inotify or by polling."""

    def __init__(self, folder: Path, poll: bool = False) -> None:
        self.folder = folder
        self.fd = -1 if poll else self._inotify(folder)
        self.polling = self.fd < 0
        self._seen = self._stamps()

    @staticmethod
    def _inotify(folder: Path) -> int:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                return -1
            mask = _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE | _IN_MODIFY
            if libc.inotify_add_watch(fd, str(folder).encode(), mask) < 0:
                os.close(fd)
                return -1
            return int(fd)
        except (OSError, AttributeError):
            return -1

    def _stamps(self) -> dict[str, tuple[int, int]]:
        stamps = {}
        for path in self.folder.glob("*.py"):
            try:
                stat = path.stat()
                stamps[path.name] = (stat.st_mtime_ns, stat.st_size)
            except OSError:
                continue
        return stamps

    def readable(self) -> list[int]:
        """File descriptors to wait on (none when polling)."""
        return [] if self.polling else [self.fd]

    def changed(self) -> bool:
        """True when a .py file changed since the last call (drains pending events)."""
        if not self.polling:
            names = []
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                data = b""
            offset = 0
            while offset + 16 <= len(data):
                _, _, _, length = struct.unpack_from("iIII", data, offset)
                names.append(data[offset + 16 : offset + 16 + length].rstrip(b"\0").decode())
                offset += 16 + length
            return any(name.endswith(".py") for name in names)
        stamps = self._stamps()
        changed, self._seen = stamps != self._seen, stamps
        return changed

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)


def run(
    folder: Path, grade_and_draw: Callable[[], None], on_key: Callable[[str], bool], poll: bool = False
) -> None:
    """The watch loop: draw once, then re-draw after each debounced save; ``on_key`` gets each
    key pressed and returns False to stop. The terminal is restored however the loop ends."""
    changes = Changes(folder, poll)
    stdin = sys.stdin.fileno()
    saved = termios.tcgetattr(stdin)
    try:
        tty.setcbreak(stdin)
        grade_and_draw()
        pending_since: float | None = None
        while True:
            timeout = 0.1 if (changes.polling or pending_since is not None) else None
            ready, _, _ = select.select([stdin, *changes.readable()], [], [], timeout)
            if stdin in ready:
                key = os.read(stdin, 1).decode("utf-8", "replace")
                if not on_key(key):
                    return
            if (changes.polling or changes.fd in ready) and changes.changed():
                pending_since = time.monotonic()
            if pending_since is not None and time.monotonic() - pending_since >= DEBOUNCE:
                pending_since = None
                changes.changed()  # the grade itself must not count as a change
                grade_and_draw()
    finally:
        termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        changes.close()
