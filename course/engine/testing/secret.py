"""An instructor's grading secret: when one is in use, every input the grading tests give learner
code derives from it, so no answer can be recorded ahead of a grade from the public inputs.

Without a secret every function here gives the public inputs (``rng(seed)`` is
``np.random.default_rng(seed)``, a ``Variation`` changes nothing), so a public grade is the one the
course has always given. With one, ``rng`` streams, the property checks' seed and each literal
case's ``Variation`` (scale by a power of two, shift, permute: the hand-checked idea with other
numbers) come from a key derived from it. The key stays in the grading process: workers start
from an allow-listed environment and are exec'd, never forked from a process holding it. What
leaves the process is ``identity()``, another derivation of the secret, which keys caches and
names the secret in a gradebook without revealing the key.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import numpy as np

VARIABLE = "COURSE_GRADING_SECRET"
MIN_CHARACTERS = 8  # a shorter secret is refused: a class could try every one
_KEY: list[bytes] = []  # the key inputs derive from; empty: the public inputs
T = TypeVar("T")


class SecretError(ValueError):
    """A secret that cannot be used (unreadable file, too short); its message is for people."""


def use(secret: str | bytes | None) -> None:
    """Grade with ``secret`` from now on in this process (None: the public inputs)."""
    if secret is None:
        _KEY.clear()
        return
    _KEY[:] = [_key_of(secret)]


def _key_of(secret: str | bytes) -> bytes:
    raw = (secret.encode() if isinstance(secret, str) else bytes(secret)).strip()
    if len(raw) < MIN_CHARACTERS:
        raise SecretError(f"a grading secret needs at least {MIN_CHARACTERS} characters")
    return hashlib.sha256(b"attention-course grading secret\0" + raw).digest()


def keep_from_other_processes() -> None:
    """Make this process (which holds a secret) not dumpable: no other process of the user may
    read its memory or its environment through /proc, whatever the sandbox of a worker (exec'd
    processes, workers among them, are dumpable again). Linux only; elsewhere nothing."""
    import ctypes

    try:
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError):
        pass


def use_file(path: Path) -> None:
    """Grade with the secret held in the file ``path`` (its text, surrounding blanks removed)."""
    try:
        text = Path(path).read_bytes()
    except OSError as problem:
        raise SecretError(f"cannot read the secret file {path}: {problem.strerror or problem}") from None
    use(text)


def use_environment() -> bool:
    """Grade with ``$COURSE_GRADING_SECRET`` when it is set and not empty; whether it was."""
    value = os.environ.get(VARIABLE, "")
    if value.strip():
        use(value)
        return True
    return False


def in_use() -> bool:
    """Whether this process grades with a secret."""
    return bool(_KEY)


def _derived(purpose: str, key: bytes | None = None) -> bytes:
    return hmac.new(key or _KEY[0], purpose.encode(), hashlib.sha256).digest()


def identity() -> str:
    """A short name of the secret in use ("" without one): it keys caches and tells apart
    gradebooks of different secrets, and reveals nothing of the inputs' key."""
    return _derived("identity").hex()[:16] if _KEY else ""


def environment_identity() -> str:
    """``identity()`` of ``$COURSE_GRADING_SECRET`` ("" when unset or unusable), without
    grading with it: what a check's caches and warm grader are keyed by before it grades."""
    value = os.environ.get(VARIABLE, "")
    try:
        return _derived("identity", _key_of(value)).hex()[:16] if value.strip() else ""
    except SecretError:
        return ""


def _words(digest: bytes) -> list[int]:
    return [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]


def rng(seed: int | Sequence[int] = 0) -> np.random.Generator:
    """The generator a grading test draws inputs from: ``np.random.default_rng(seed)`` without a
    secret; with one, a stream of ``seed`` and the secret together."""
    import numpy as np

    if not _KEY:
        return np.random.default_rng(seed)
    seeds = list(seed) if isinstance(seed, Sequence) else [seed]
    return np.random.default_rng([*(abs(int(s)) for s in seeds), *_words(_derived("rng"))])


def hypothesis_seed(public: int) -> int:
    """The seed every property check draws its examples from: ``public`` without a secret."""
    return int.from_bytes(_derived("hypothesis")[:8], "little") if _KEY else public


class Variation:
    """Other numbers for one literal case under a secret, the same ones on every grade with it;
    without a secret each draw is the identity (scale 1, shift 0, no permutation), so the case
    is the public one. Scales are powers of two and shifts small integers: exact in floating
    point, so a hand-checked answer stays exact."""

    def __init__(self, name: str) -> None:
        import numpy as np

        self._stream = np.random.default_rng(_words(_derived("variation:" + name))) if _KEY else None

    @property
    def secret(self) -> bool:
        """Whether this variation changes anything (a secret is in use)."""
        return self._stream is not None

    def scale(self, powers: Sequence[int] = (-2, -1, 1, 2)) -> float:
        """2 ** p for one p of ``powers`` (1.0 without a secret)."""
        if self._stream is None:
            return 1.0
        return float(2.0 ** int(self._stream.choice(list(powers))))

    def shift(self, values: Sequence[float] = (-3, -2, -1, 1, 2, 3)) -> float:
        """One of ``values`` (0.0 without a secret). Adding 0.0 turns -0.0 into 0.0, other
        bytes: leave an input that may hold -0.0 alone when the shift is 0."""
        if self._stream is None:
            return 0.0
        return float(self._stream.choice(list(values)))

    def integers(self, low: int, high: int, public: int) -> int:
        """An integer in [low, high) other than ``public`` when there is one (``public``
        without a secret)."""
        if self._stream is None or high - low < 2 and low <= public < high:
            return public
        while (value := int(self._stream.integers(low, high))) == public:
            pass
        return value

    def permutation(self, n: int) -> np.ndarray:
        """A permutation of range(n), never the identity when n > 1 (the identity without a
        secret)."""
        import numpy as np

        if self._stream is None or n < 2:
            return np.arange(n)
        while True:
            order = self._stream.permutation(n)
            if (order != np.arange(n)).any():
                return order

    def pick(self, options: Sequence[T]) -> T:
        """One of ``options`` other than the first when there are others (the first without a
        secret)."""
        if self._stream is None or len(options) < 2:
            return options[0]
        return options[1 + int(self._stream.integers(len(options) - 1))]


def variation(name: str) -> Variation:
    """The variation of the literal case ``name`` (a name unique within its lesson's tests)."""
    return Variation(name)
