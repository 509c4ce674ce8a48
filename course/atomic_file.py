"""Replacing a file at once: a reader sees the old content or the new, never half of either.

The progress state, the result cache, the examples a cold check keeps and the catalog's JSON
copy are all written this way. Standard library only, and ``tempfile`` is imported only when a
file is written: a check reads these modules before it sends its request.
"""

from __future__ import annotations

import os
from pathlib import Path


def replace(path: Path, text: str, mode: int | None = None, durable: bool = False) -> None:
    """Write ``text`` to a hidden temporary file in ``path``'s folder, then rename it over
    ``path``. ``mode``: the new file's permission bits (default 0600, ``mkstemp``'s);
    ``durable``: on disk before the rename. Raises OSError, leaving nothing behind."""
    import tempfile

    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        if mode is not None:
            os.fchmod(handle, mode)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
