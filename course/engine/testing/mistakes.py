"""Named classic mistakes and how an answer or a piece of code is matched to one.

A ``Mistake`` is an id (data: the JSON's ``mistake_id``), the sentence a learner reads, the
exercises it can happen in, and optionally the named misconception it shows. ``diagnose`` matches
a wrong answer to the variants a grading test supplies; ``named_by_code`` matches the learner's
code around an error to patterns. ``compare`` re-exports all of it for the grading tests.

A name is given only on evidence, because a wrong name is worse than none: the answer matches the
mistake's variant, the case tells that variant from the right answer, and no other variant that
the answer also matches says something else (``diagnose``). The reporting plugin adds the name to
a check's message only for a check of one of the mistake's own exercises.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from course.engine.testing import misconceptions

_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


@dataclass(frozen=True)
class Mistake:
    """A classic mistake a grading test can recognise.

    ``id`` names it as data (kebab-case, unique within its lesson; the JSON's ``mistake_id``);
    ``says`` is the sentence the learner reads; ``exercises`` are the exercises of its lesson
    whose code can make it (nothing names it on a check of another exercise);
    ``misconception`` is the id of the named misconception it shows, if any (an id of
    ``course/content/misconceptions.toml``; the JSON's ``misconception``). ``str(mistake)`` is
    its sentence, so messages can embed it.
    """

    id: str
    says: str
    misconception: str = ""
    exercises: tuple[str, ...] = ()
    parts: tuple[Mistake, ...] = field(default=(), compare=False)  # of a Mistake.any_of

    def __post_init__(self) -> None:
        for value in (self.id, self.misconception or "x"):
            if not _ID.fullmatch(value):
                raise ValueError(f"grader bug: {value!r} is not a kebab-case id")
        if not self.exercises or not all(isinstance(name, str) and name for name in self.exercises):
            raise ValueError(f"grader bug: mistake {self.id!r} must name the exercises it belongs to")
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
        object.__setattr__(copy, "exercises", self.exercises)
        object.__setattr__(copy, "parts", self.parts)
        return copy

    def belongs_to(self, exercise: str) -> bool:
        """Whether a check of ``exercise`` may name this mistake."""
        return exercise in self.exercises

    @classmethod
    def any_of(cls, *mistakes: Mistake, joined: str = "; or ") -> Mistake:
        """Several mistakes that give the same answer: their ids and sentences joined, the
        misconception they all show (none when they differ), the exercises of any of them."""
        shown = {m.misconception for m in mistakes}
        return cls(
            "-or-".join(m.id for m in mistakes),
            joined.join(m.says for m in mistakes),
            shown.pop() if len(shown) == 1 else "",
            tuple(dict.fromkeys(name for m in mistakes for name in m.exercises)),
            tuple(part for m in mistakes for part in (m.parts or (m,))),
        )

    def claims(self) -> tuple[tuple[str, str], ...]:
        """What naming it claims, as (id, sentence) pairs: itself, or each mistake it joins."""
        return tuple((m.id, m.says) for m in (self.parts or (self,)))


Mistakes = Mapping[Mistake, Any]


class KnownMistake(AssertionError):
    """A failed check whose answer shows a named classic mistake (``mistake``).

    ``message`` says what is wrong without naming it: the reporting plugin adds the name
    (``results.NAMING``) when the check belongs to one of the mistake's exercises. Raise it only on
    evidence that singles the mistake out: a variant through ``diagnose``, or a fact seen
    directly (an input changed in place, a float where the right count came back)."""

    def __init__(self, message: str, mistake: Mistake) -> None:
        if not isinstance(mistake, Mistake):
            raise TypeError(f"grader bug: a known mistake must be a Mistake, not {mistake!r}")
        super().__init__(message)
        self.mistake = mistake


def failure(message: str, mistake: Mistake | None) -> AssertionError:
    """The failure of a check: a ``KnownMistake`` naming ``mistake`` when there is one."""
    if mistake is not None:
        return KnownMistake(message, mistake)
    return AssertionError(message)


MATCHING_RTOL, MATCHING_ATOL = 1e-4, 1e-5  # looser than any check: a variant computed another way


def _matches(actual: np.ndarray, candidate: Any, rtol: float, atol: float) -> bool:
    candidate = np.asarray(candidate)
    if candidate.shape != actual.shape or not {actual.dtype.kind, candidate.dtype.kind} <= set("biufc"):
        return False
    if actual.dtype.kind in "biu" and candidate.dtype.kind in "biu":
        return bool(np.array_equal(actual, candidate))  # counts and masks: exactly
    with np.errstate(all="ignore"):
        return bool(
            np.allclose(
                actual.astype(np.float64),
                candidate.astype(np.float64),
                rtol=max(rtol, MATCHING_RTOL),
                atol=max(atol, MATCHING_ATOL),
                equal_nan=True,
            )
        )


def _degenerate(values: np.ndarray, expected: np.ndarray) -> bool:
    """All zeros, all NaN, all infinite, or a boolean array of one value: an answer that many
    different mistakes give (and a function that does nothing yet), so no evidence of any one
    of them. Where the right answer is no number at all (NaN), zeros are the symptom itself."""
    if values.size < 2 or values.dtype.kind not in "biufc":
        return False
    with np.errstate(all="ignore"):
        flat = values.astype(np.float64).ravel()
        if np.all(np.isnan(flat)) or np.all(np.isinf(flat)):
            return True
        if values.dtype.kind == "b":
            return bool(np.all(flat == flat[0]))
        return bool(np.all(flat == 0)) and not np.isnan(expected.astype(np.float64)).all()


def ensure_declared(mistakes: Mistakes | None) -> None:
    """Every key of ``mistakes`` is a Mistake: checked on every call, so a grading test that
    names a mistake by a bare sentence fails when the solutions are graded, not only when a
    learner happens to make that mistake."""
    for mistake in mistakes or ():
        if not isinstance(mistake, Mistake):
            raise TypeError(f"grader bug: mistakes must be keyed by Mistake, not {mistake!r}")


def diagnose(
    actual: Any, mistakes: Mistakes | None, expected: Any, rtol: float = 1e-6, atol: float = 1e-9
) -> Mistake | None:
    """The known mistake that the wrong answer ``actual`` singles out, or None.

    ``mistakes`` maps each Mistake to the array it produces (or a callable that computes it, so
    costly variants are only computed when the answer is wrong); ``expected`` is the right answer.
    At the matching tolerance (``MATCHING_RTOL``, ``MATCHING_ATOL`` or the check's own, if
    looser) a mistake is evidence only when ``actual`` matches its variant while the variant does
    not match ``expected`` (the case tells them apart). Nothing is named when ``actual`` itself
    matches ``expected`` (a near miss: rounding, a float32 computation), when the variant is
    degenerate (all zeros, all NaN: many mistakes give those), or when two matching variants
    differ from each other; several matching variants that agree are named together. When the
    answer's dtype is what is wrong (its values right), only a variant of that very dtype and
    values is evidence.
    """
    ensure_declared(mistakes)
    if not mistakes or not isinstance(actual, np.ndarray) or actual.dtype.kind not in "biufc":
        return None
    expected = np.asarray(expected)
    dtype_only = actual.dtype != expected.dtype and _matches(actual, expected, rtol, atol)
    if not dtype_only and _matches(actual, expected, rtol, atol):
        return None
    found: list[tuple[Mistake, np.ndarray]] = []
    for mistake, variant in mistakes.items():
        try:
            value = np.asarray(variant() if callable(variant) else variant)
        except Exception:  # noqa: BLE001 - a variant that cannot be formed simply does not match
            continue
        if not _matches(actual, value, rtol, atol):
            continue
        if dtype_only:
            if value.dtype != actual.dtype:
                continue
        elif _matches(expected, value, rtol, atol) or _degenerate(value, expected):
            continue
        found.append((mistake, value))
    if not found or any(not _matches(found[0][1], value, rtol, atol) for _, value in found[1:]):
        return None
    named = list({mistake.id: mistake for mistake, _ in found}.values())
    return named[0] if len(named) == 1 else Mistake.any_of(*named)


_ruled_out: set[tuple[str, str]] = set()  # (id, sentence): a mistake worded for one case


def rule_out(mistakes: Mistakes | None, expected: Any, rtol: float = 1e-6, atol: float = 1e-9) -> None:
    """A comparison came out right: each mistake whose variant differs from ``expected`` here
    is ruled out, for a learner who made it would have failed. The reporting plugin collects
    them (``take_ruled_out``) when the whole check passed and names none of them on another
    check of the same exercise. Only variants given as values count: one still to be computed
    is left, as computing it on every pass would cost every grade."""
    expected = np.asarray(expected)
    for mistake, variant in (mistakes or {}).items():
        if not callable(variant) and not _matches(expected, np.asarray(variant), rtol, atol):
            _ruled_out.update(mistake.claims())


def take_ruled_out() -> frozenset[tuple[str, str]]:
    """The (id, sentence) pairs ruled out since the last call (see ``rule_out``), forgetting
    them. A mistake worded for a case (``Mistake.format``: "axis 0 instead of axis 1") is
    ruled out only as worded: another wording of the same id is another claim."""
    taken = frozenset(_ruled_out)
    _ruled_out.clear()
    return taken


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
    code: list[str], patterns: Mapping[Mistake, str | tuple[str, ...]] | None, exercise: str
) -> Mistake | None:
    """The mistake of ``exercise`` whose regular expression matches a line of the learner's
    ``code`` around the error (``learner_code.around``), or None. A tuple of patterns must all
    match, each on some line (k and v both projected from x_q, on two lines). When several
    match, the one whose patterns include every other's is named (both k and v from x_q, rather
    than only one of them); when none does, none is named: the evidence does not single one out.

    A grading test module names the mistakes that raise instead of returning a wrong answer
    (``k.T`` on a batched k, a cache concatenated on the wrong axis) in ``CODE_MISTAKES =
    {Mistake: pattern}``; the plugin applies it to every check that ended in the learner's
    ValueError or IndexError (what shapes that do not fit raise: another exception is not what
    these patterns explain). The patterns read the learner's code (data), never an error message."""
    ensure_declared(patterns)
    found: list[tuple[Mistake, set[str]]] = []
    for mistake, wanted in (patterns or {}).items():
        every = {wanted} if isinstance(wanted, str) else set(wanted)
        if mistake.belongs_to(exercise) and all(any(re.search(p, line) for line in code) for p in every):
            found.append((mistake, every))
    widest = [mistake for mistake, every in found if all(other <= every for _, other in found)]
    return widest[0] if len(widest) == 1 else None
