"""``safe_text``: text a submission contributes, made safe to show on a terminal and to write.

A bundle or an nbgrader student folder is hostile input, and its text reaches the instructor's
terminal (`course grade`'s progress lines), the CSV gradebook, the JSON report, the JUnit XML and
the nbgrader CSV: the bundle's own file name or the student folder's, the name and version in
``result.json``, member names, ``timestamp.txt``, every problem that quotes any of them, and what
the learner's code raised or printed. Shown raw, that text could

- drive the terminal: ESC (0x1b) and the one-character CSI (U+009B) start sequences that move
  the cursor, erase lines or retitle the window (a row read "18 points" on screen while the CSV
  said 11); CR, backspace and the other C0 and C1 controls and DEL overwrite what was shown;
- be shown in another order than it is stored: the bidi controls U+202A-U+202E (embeddings and
  overrides) and U+2066-U+2069 (isolates), and the marks U+061C, U+200E and U+200F;
- kill a writer, and with it the whole class's file: a lone surrogate (a ``"\\ud800"`` in
  ``result.json``, or a byte of a file name that is not UTF-8, which ``os.fsdecode`` keeps as
  U+DC80-U+DCFF) cannot be encoded as UTF-8, so one bundle left a header-only gradebook; XML 1.0
  forbids C0 controls but tab and newline, surrogates, U+FFFE and U+FFFF;
- split a one-line field (a CSV cell, a progress line): newline, CR, NEL, U+2028 and U+2029.

Each such character is shown escaped, as Python writes it in a string literal: tab, newline
and CR as ``\\t``, ``\\n`` and ``\\r``, another C0 or C1 control or DEL as ``\\xNN`` (ESC is
the four characters ``\\x1b``), a bidi control, a line separator or a lone surrogate as
``\\uNNNN`` (``\\u202e``), except U+DC80-U+DCFF: that is the byte NN ``os.fsdecode``
(surrogateescape) could not decode, shown as that byte, ``\\xNN``, as
``bytes.decode(..., "backslashreplace")`` shows it. Bytes are decoded with ``os.fsdecode``
first. Everything else, accents and emoji included, is kept.

One line or several: by default every field is one line, so tab and newline are escaped too
(names, file names, versions, timestamps, problems, CSV cells, XML attributes, terminal lines).
``lines=True`` keeps tab and newline, and only them, for text that is several lines by nature
(a check's message, what the code printed: the JSON report, the text of a JUnit failure).

A backslash is never escaped, so escaping is idempotent: text made safe once comes back
unchanged, and each writer can make whatever it is given safe again without doubling a
backslash. The price is that a learner who types the four characters ``\\x1b`` reads the same as
one whose name held an ESC: both are four inert characters.
"""

from __future__ import annotations

import os
import re

# Every character a field may not hold as itself; the multi-line pattern lets tab and newline be.
_NOT_SHOWN = (
    r"\x7f-\x9f"  # DEL and C1 (NEL 0x85 and the one-character CSI 0x9b among them)
    r"\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidi marks, embeddings, overrides, isolates
    r"\u2028\u2029"  # line and paragraph separators
    r"\ud800-\udfff"  # surrogates: only ever lone in a str
    r"\ufffe\uffff"  # not characters (XML 1.0 forbids them)
)
_ONE_LINE = re.compile(rf"[\x00-\x1f{_NOT_SHOWN}]")
_LINES = re.compile(rf"[\x00-\x08\x0b-\x1f{_NOT_SHOWN}]")
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:  # a byte os.fsdecode could not decode (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}"


def safe_text(value: object, lines: bool = False) -> str:
    """``value`` as text with every control, bidi control, line separator, lone surrogate and
    XML-invalid character shown escaped (``\\x1b``, ``\\u202e``; see the module's docstring);
    ``lines``: keep tab and newline. Never raises; the result encodes as UTF-8 and is valid XML
    1.0 text, and ``safe_text(safe_text(x)) == safe_text(x)``."""
    try:
        text = os.fsdecode(value) if isinstance(value, bytes) else str(value)
    except Exception:  # a str() that fails: say what it was, not what it holds
        text = f"<{type(value).__name__}>"
    return (_LINES if lines else _ONE_LINE).sub(_escaped, text)
