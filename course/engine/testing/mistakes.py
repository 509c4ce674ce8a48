"""Named classic mistakes and how an answer or a piece of code is matched to one.

A ``Mistake`` is an id (data: the JSON's ``mistake_id``), the sentence a learner reads, and
optionally the named misconception it shows. ``diagnose`` matches a wrong answer to the variants
a grading test supplies; ``named_by_code`` matches the learner's code around an error to patterns.
``compare`` re-exports all of it for the grading tests.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from course.engine.testing import misconceptions

_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


@dataclass(frozen=True)
class Mistake:
    """A classic mistake a grading test can recognise.

    ``id`` names it as data (kebab-case, unique within its lesson; the JSON's ``mistake_id``);
    ``says`` is the sentence the learner reads; ``misconception`` is the id of the named
    misconception it shows, if any (an id of ``course/content/misconceptions.toml``; the JSON's
    ``misconception``). ``str(mistake)`` is its sentence, so messages can embed it.
    """

    id: str
    says: str
    misconception: str = ""

    def __post_init__(self) -> None:
        for value in (self.id, self.misconception or "x"):
            if not _ID.fullmatch(value):
                raise ValueError(f"grader bug: {value!r} is not a kebab-case id")
        if self.misconception and self.misconception not in misconceptions.ids():
            raise ValueError(
                f"grader bug: mistake {self.id!r} names the misconception {self.misconception!r}, "
                "which course/content/misconceptions.toml does not hold"
            )

    def __str__(self) -> str:
        return self.says

    def format(self, **fields: Any) -> Mistake:
        """The same mistake, its sentence filled in (``says`` may hold ``{axis}`` and the like)."""
        return self._saying(self.says.format(**fields))

    def plus(self, more: str) -> Mistake:
        """The same mistake, its sentence extended by ``more``."""
        return self._saying(self.says + more)

    def _saying(self, says: str) -> Mistake:
        # Its id and misconception were checked when it was made: a copy with another sentence
        # skips ``__post_init__`` (grading tests word their mistakes hundreds of times a grade).
        copy = object.__new__(Mistake)
        object.__setattr__(copy, "id", self.id)
        object.__setattr__(copy, "says", says)
        object.__setattr__(copy, "misconception", self.misconception)
        return copy

    @classmethod
    def any_of(cls, *mistakes: Mistake, joined: str = "; or ") -> Mistake:
        """Several mistakes that give the same answer: their ids and sentences joined, the first
        misconception any of them shows."""
        return cls(
            "-or-".join(m.id for m in mistakes),
            joined.join(m.says for m in mistakes),
            next((m.misconception for m in mistakes if m.misconception), ""),
        )


Mistakes = Mapping[Mistake, Any]


class KnownMistake(AssertionError):
    """A failed check whose answer matches a named classic mistake (``mistake``)."""

    def __init__(self, message: str, mistake: Mistake) -> None:
        if not isinstance(mistake, Mistake):
            raise TypeError(f"grader bug: a known mistake must be a Mistake, not {mistake!r}")
        super().__init__(message)
        self.mistake = mistake


def failure(message: str, mistake: Mistake | None) -> AssertionError:
    """The failure of a check: a ``KnownMistake`` naming ``mistake`` when there is one."""
    if mistake is not None:
        return KnownMistake(f"{message}\nThis looks like a known mistake: {mistake}.", mistake)
    return AssertionError(message)


def _matches(actual: np.ndarray, candidate: Any, rtol: float, atol: float) -> bool:
    candidate = np.asarray(candidate)
    if candidate.shape != actual.shape or actual.dtype.kind not in "biufc":
        return False
    with np.errstate(all="ignore"):
        return bool(
            np.allclose(
                actual.astype(np.float64),
                candidate.astype(np.float64),
                rtol=max(rtol, 1e-4),
                atol=max(atol, 1e-5),
                equal_nan=True,
            )
        )


def ensure_declared(mistakes: Mistakes | None) -> None:
    """Every key of ``mistakes`` is a Mistake: checked on every call, so a grading test that
    names a mistake by a bare sentence fails when the solutions are graded, not only when a
    learner happens to make that mistake."""
    for mistake in mistakes or ():
        if not isinstance(mistake, Mistake):
            raise TypeError(f"grader bug: mistakes must be keyed by Mistake, not {mistake!r}")


def diagnose(
    actual: Any, mistakes: Mistakes | None, rtol: float = 1e-6, atol: float = 1e-9
) -> Mistake | None:
    """The first known mistake that ``actual`` reproduces, or None.

    ``mistakes`` maps each Mistake to the array it produces (or a callable that computes it, so
    costly variants are only computed when the answer is wrong).
    """
    ensure_declared(mistakes)
    if not mistakes or not isinstance(actual, np.ndarray):
        return None
    for mistake, variant in mistakes.items():
        try:
            value = variant() if callable(variant) else variant
        except Exception:  # noqa: BLE001 - a variant that cannot be formed simply does not match
            continue
        if _matches(actual, value, rtol, atol):
            return mistake
    return None


def compute_every_variant(mistakes: Mistakes | None) -> None:
    """Compute each variant of ``mistakes`` (see ``memo.warming_up``); one that cannot be
    formed is skipped, as ``diagnose`` skips it."""
    for variant in (mistakes or {}).values():
        if callable(variant):
            try:
                variant()
            except Exception:  # noqa: BLE001 - as in diagnose
                continue


def named_by_code(
    code: list[str], patterns: Mapping[Mistake, str | tuple[str, ...]] | None
) -> Mistake | None:
    """The first mistake (in the order given) whose regular expression matches a line of the
    learner's ``code`` around the error (``learner_code.around``), or None. A tuple of patterns
    must all match, each on some line (k and v both projected from x_q, on two lines).

    A grading test module names the mistakes that raise instead of returning a wrong answer
    (``k.T`` on a batched k, a cache concatenated on the wrong axis) in ``CODE_MISTAKES =
    {Mistake: pattern}``; the plugin applies it to every check that ended in the learner's
    exception. The patterns read the learner's code (data), never an error message."""
    ensure_declared(patterns)
    for mistake, wanted in (patterns or {}).items():
        every = (wanted,) if isinstance(wanted, str) else wanted
        if all(any(re.search(pattern, line) for line in code) for pattern in every):
            return mistake
    return None
