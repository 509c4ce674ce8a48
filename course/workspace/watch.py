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
# ... when the last event was a file closed after writing or renamed into place: an editor's
# save is complete then, and this only gathers the events of the same save.
SAVED_DEBOUNCE = 0.03
_IN_CLOSE_WRITE, _IN_MOVED_TO, _IN_CREATE, _IN_MODIFY = 0x8, 0x80, 0x100, 0x2


class Changes:
    """Tells when any ``*.py`` file of a folder changed, by inotify or by polling."""

    def __init__(self, folder: Path, poll: bool = False) -> None:
        self.folder = folder
        self.fd = -1 if poll else self._inotify(folder)
        self.polling = self.fd < 0
        self.saved = False  # the last change seen ended a save (closed after writing, renamed)
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
            masks = []
            while offset + 16 <= len(data):
                _, mask, _, length = struct.unpack_from("iIII", data, offset)
                names.append(data[offset + 16 : offset + 16 + length].rstrip(b"\0").decode())
                masks.append(mask)
                offset += 16 + length
            ours = [mask for name, mask in zip(names, masks, strict=True) if name.endswith(".py")]
            if ours:
                self.saved = bool(ours[-1] & (_IN_CLOSE_WRITE | _IN_MOVED_TO))
            return bool(ours)
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
            timeout = 0.1 if changes.polling else None
            if pending_since is not None:  # wake up when the quiet time is over
                left = max(0.0, pending_since + _quiet(changes) - time.monotonic())
                timeout = left if timeout is None else min(timeout, left)
            ready, _, _ = select.select([stdin, *changes.readable()], [], [], timeout)
            if stdin in ready:
                key = os.read(stdin, 1).decode("utf-8", "replace")
                if not on_key(key):
                    return
            if (changes.polling or changes.fd in ready) and changes.changed():
                pending_since = time.monotonic()
            if pending_since is not None and time.monotonic() - pending_since >= _quiet(changes):
                pending_since = None
                changes.changed()  # the grade itself must not count as a change
                grade_and_draw()
    finally:
        termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        changes.close()


def _quiet(changes: Changes) -> float:
    """Seconds of quiet after the last change before grading: short once a save is complete."""
    return SAVED_DEBOUNCE if changes.saved and not changes.polling else DEBOUNCE
