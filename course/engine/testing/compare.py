"""What grading tests use: the exercise marker, array comparison with feedback, shared settings.

``check_array`` is where most feedback comes from. It compares the learner's answer with the
expected one and, when they differ, explains how: the shape in dimension letters, the dtype, the
size of the error, NaNs, a small slice, and, when the answer matches a known wrong variant that the
test supplies (``mistakes``), the name of that mistake.

A classic mistake is a ``Mistake``: an id (data, stable, what the JSON and the misconception
registry refer to), the sentence a learner reads (``says``), and optionally the id of the named
misconception it shows (``course/content/misconceptions.toml``). Nothing downstream reads the
sentence. Mistakes and their diagnosis (``mistakes``) and the hypothesis profile with
``GRADING_SEED`` (``profile``) are re-exported here, and from here by ``course.engine.testing``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from course.engine.testing import memo
from course.engine.testing.mistakes import KnownMistake as KnownMistake
from course.engine.testing.mistakes import Mistake as Mistake
from course.engine.testing.mistakes import Mistakes, compute_every_variant, ensure_declared
from course.engine.testing.mistakes import diagnose as diagnose
from course.engine.testing.mistakes import failure as failure
from course.engine.testing.mistakes import named_by_code as named_by_code
from course.engine.testing.mistakes import rule_out as rule_out
from course.engine.testing.mistakes import take_ruled_out as take_ruled_out
from course.engine.testing.profile import GRADING_SEED as GRADING_SEED
from course.engine.testing.profile import settings as settings
from course.engine.wire.messages import Opaque

exercise = pytest.mark.exercise
"""``@exercise("softmax")`` ties a test (or a class of tests) to one exercise of the catalog."""
hand_checked = pytest.mark.hand_checked
"""``@hand_checked`` marks a small case whose answer is worked out by hand in the test: when it
fails it explains the mistake best, so it is shown before random and generated cases."""
enumerable = pytest.mark.enumerable
"""``@enumerable("why")`` marks a check whose calls are the same under an instructor's secret
(``secret``) because their inputs are few enough to list (a scalar such as ``causal_mask(3)``):
docs/instructors.md lists these checks with their points, and the project's tests hold that no
other check makes a call with the public inputs under a secret."""


def tolerances(dtype: np.dtype) -> tuple[float, float]:
    """(rtol, atol) that any correct implementation meets in this dtype."""
    if np.dtype(dtype) == np.float32:
        return 2e-4, 2e-5
    return 1e-6, 1e-9


def _type_name(value: Any) -> str:
    if isinstance(value, Opaque):
        return f"a {value.type_name} ({value.text})"
    if value is None:
        return "None (is a `return` missing?)"
    return f"a {type(value).__name__}"


def _shape_in_letters(shape: tuple, expected: tuple, dims: tuple[str, ...]) -> str:
    """Read ``shape`` in the letters of ``expected`` where each size names one letter."""
    by_size: dict[int, list[str]] = {}
    for size, letter in zip(expected, dims, strict=True):
        by_size.setdefault(size, []).append(letter)
    letters = []
    for size in shape:
        names = by_size.get(size, [])
        letters.append(names[0] if len(names) == 1 else str(size))
    return "(" + ", ".join(letters) + ")"


def _fmt(values: np.ndarray) -> str:
    return np.array2string(
        np.asarray(values), precision=4, suppress_small=True, max_line_width=70, threshold=8, edgeitems=3
    )


SHOWN_DIFFERENCES = 6  # differing entries listed one a line; the rest are counted
ROW_WIDTH = 10  # at most this many entries of the row around the first difference


def _differences(actual: np.ndarray, expected: np.ndarray, wrong: np.ndarray) -> list[str]:
    """The entries where ``actual`` differs from ``expected`` (a few, each with its position and
    both values), then the row of the first one in full, or the ROW_WIDTH entries around it:
    never an elided summary that hides the very entry that is wrong."""
    if not expected.ndim:
        return [f"  expected {expected.item()}, got {actual.item()}"]
    where = np.argwhere(wrong)
    lines = [
        f"  at {[int(i) for i in index]}: expected {expected[tuple(index)]}, got {actual[tuple(index)]}"
        for index in where[:SHOWN_DIFFERENCES]
    ]
    if len(where) > SHOWN_DIFFERENCES:
        lines.append(f"  ... and {len(where) - SHOWN_DIFFERENCES} more")
    first = tuple(int(i) for i in where[0])
    width = expected.shape[-1]
    start = min(max(first[-1] - ROW_WIDTH // 2, 0), max(width - ROW_WIDTH, 0))
    stop = min(start + ROW_WIDTH, width)
    columns = ":" if (start, stop) == (0, width) else f"{start}:{stop}"
    label = "[" + ", ".join([str(i) for i in first[:-1]] + [columns]) + "]"
    for name, values in (("expected", expected), ("got     ", actual)):
        row = np.array2string(values[first[:-1]][start:stop], max_line_width=200, threshold=ROW_WIDTH + 1)
        lines.append(f"  {name}{label} = {row}")
    return lines


def isclose(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> Any:
    """``np.isclose(actual, expected, rtol, atol, equal_nan=True)`` for two float64 arrays and
    finite tolerances: its very formula without its checks of types and tolerances, which cost
    more than the comparison itself on the small arrays grading tests compare many times a grade."""
    close = (np.abs(actual - expected) <= atol + rtol * np.abs(expected)) & np.isfinite(expected) | (
        actual == expected
    )
    return close | (np.isnan(actual) & np.isnan(expected))


def check_array(
    actual: Any,
    expected: np.ndarray,
    *,
    what: str,
    dims: str,
    dtype: np.dtype | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    mistakes: Mistakes | None = None,
) -> None:
    """Fail with a learner-facing explanation unless ``actual`` equals ``expected``.

    ``what`` names the call (``"linear(x, w, b)"``); ``dims`` gives the expected axes as
    letters (``"B T D"``); ``dtype`` is the dtype the answer must have (default: expected's).
    """
    ensure_declared(mistakes)
    if memo.warming():
        compute_every_variant(mistakes)
    expected = np.asarray(expected)
    letters = tuple(dims.split())
    assert len(letters) == expected.ndim, "grader bug: dims and expected disagree"
    want = "(" + ", ".join(letters) + ")" if letters else "a scalar"
    if not isinstance(actual, np.ndarray):
        raise AssertionError(
            f"{what} returned {_type_name(actual)}; expected a numpy array of "
            f"shape {want} = {expected.shape}."
        )

    def named(message: str) -> AssertionError:
        return failure(message, diagnose(actual, mistakes, expected))  # variants computed only on failure

    if actual.shape != expected.shape:
        reads = ""
        if actual.ndim == expected.ndim and sorted(actual.shape) == sorted(expected.shape):
            reads = f", which reads as {_shape_in_letters(actual.shape, expected.shape, letters)}"
        raise named(
            f"{what} has the wrong shape: expected {want} = {expected.shape}, got {actual.shape}{reads}."
        )
    want_dtype = np.dtype(dtype) if dtype is not None else expected.dtype
    if actual.dtype != want_dtype:
        raise named(f"{what} returned dtype {actual.dtype}; expected {want_dtype}.")
    if actual.dtype == np.bool_ or expected.dtype == np.bool_:
        wrong = actual != expected
        if not wrong.any():
            rule_out(mistakes, expected)
        else:
            raise named(
                "\n".join(
                    [f"{what} is wrong at {wrong.sum()} of {wrong.size} positions:"]
                    + _differences(actual, expected, wrong)
                )
            )
        return
    default_rtol, default_atol = tolerances(want_dtype)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    with np.errstate(all="ignore"):
        a64, e64 = actual.astype(np.float64), expected.astype(np.float64)
        close = isclose(a64, e64, rtol, atol)
        if close.all():
            rule_out(mistakes, expected, rtol, atol)
            return
        error = np.abs(a64 - e64)
    bad_nan = np.isnan(a64) & ~np.isnan(e64)
    lines = [f"{what} returned wrong values."]
    finite_error = np.where(np.isfinite(error), error, -1.0)
    worst = np.unravel_index(int(np.argmax(np.where(bad_nan, np.inf, finite_error))), error.shape)
    if bad_nan.any():
        lines.append(
            f"  {int(bad_nan.sum())} NaN values where numbers were expected "
            f"(the first at {[int(i) for i in np.argwhere(bad_nan)[0]]})."
        )
    if np.isfinite(finite_error).any() and finite_error.max() >= 0:
        lines.append(
            f"  largest error {finite_error.max():.3g}; {close.mean():.0%} of the values "
            f"are close (rtol {rtol:g}, atol {atol:g})."
        )
    with np.errstate(all="ignore"):
        relative = np.where(np.isfinite(error), error / np.maximum(np.abs(e64), atol), np.inf)
    if want_dtype == np.float64 and not bad_nan.any() and 1e-9 <= relative.max() <= 1e-4:
        index = tuple(int(i) for i in np.unravel_index(int(np.argmax(relative)), relative.shape))
        lines.append(
            f"  every value is right to about {-int(np.floor(np.log10(relative.max())))} digits "
            f"(at {list(index)}: expected {e64[index]!r}, got {a64[index]!r}): float32 arithmetic "
            "rounds at about 1e-7. Is some step computed in float32 and cast back?"
        )
    if expected.ndim:
        row = worst[:-1]
        where = "[" + ", ".join([str(int(i)) for i in row] + [":"]) + "]"
        lines.append(f"  expected{where} = {_fmt(expected[row])}")
        lines.append(f"  got     {where} = {_fmt(actual[row])}")
    else:
        lines.append(f"  expected {float(expected):.6g}, got {float(actual):.6g}")
    raise named("\n".join(lines))


def check_tuple(result: Any, what: str, names: tuple[str, ...] = ("out", "weights")) -> tuple:
    """The learner's tuple of ``len(names)`` results, or a failure that says what came back."""
    if isinstance(result, (tuple, list)) and len(result) == len(names):
        return tuple(result)
    if isinstance(result, np.ndarray):
        got = f"one array of shape {result.shape}"
    elif isinstance(result, (tuple, list)):
        got = f"a {type(result).__name__} of {len(result)} items"
    else:
        got = _type_name(result)
    listed = ", ".join(names)
    raise AssertionError(
        f"{what} returned {got}; it must return the {len(names)} results "
        f"({listed}): end with `return {listed}`."
    )


def check_not_modified(lesson: Any, what: str) -> None:
    """Fail if the learner's last call changed any of its input arrays in place."""
    if lesson.mutated:
        raise AssertionError(
            f"{what} changed its input in place ({', '.join(lesson.mutated)}). "
            "Functions must leave their inputs untouched: write `x = x - m`, "
            "not `x -= m`."
        )


def check_scalar(actual: Any, expected: float, *, what: str, rtol: float = 1e-9) -> None:
    """Fail unless ``actual`` is a number equal to ``expected`` (integers compare exactly)."""
    if isinstance(actual, np.ndarray) and actual.ndim == 0:
        actual = actual.item()
    if isinstance(actual, bool) or not isinstance(actual, (int, float, np.integer, np.floating)):
        raise AssertionError(f"{what} returned {_type_name(actual)}; expected the number {expected}.")
    if not np.isclose(float(actual), float(expected), rtol=rtol, atol=0):
        raise AssertionError(f"{what} returned {actual}; expected {expected}.")


def _mib(size: float) -> str:
    return f"{size / 1024**2:.1f} MiB"


def check_peak_below(
    peak_bytes: int, limit_bytes: float, *, what: str, hint: str = "", import_bytes: int = 0
) -> None:
    """The memory a measured call used at its peak (``lesson.measure(...).peak_bytes``, read by
    the grader from the kernel) is under ``limit_bytes``; else a message in MiB, with ``hint``
    (say, which array would take that much: "a (T, S) array of scores takes 97.7 MiB").
    ``import_bytes`` (``.import_bytes``): the module's import's own peak, which the figure
    counts; named when it is what went over."""
    if peak_bytes >= limit_bytes:
        imported = (
            f" The import of the module alone peaked at {_mib(import_bytes)}: what a module "
            "computes when it is loaded counts too."
            if import_bytes >= limit_bytes
            else ""
        )
        raise AssertionError(
            f"{what} used {_mib(peak_bytes)} of memory at its peak; it must stay under "
            f"{_mib(limit_bytes)}." + imported + (f" {hint}" if hint else "")
        )
