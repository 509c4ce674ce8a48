"""Pictures of lesson 10 (read by course.engine.pictures.load): every head of every layer of the
shipped tiny model on one sequence with a copied segment, run through the learner's
tiny_model_weights, each map labelled with the role and confidence the learner's classify_heads
and head_confidence measure on a batch of task sequences; then a table of the learner's numbers,
with the previous-token share measured on the last rows alone (T != S, as a KV-cache decode sees
them). No attention-map pipeline (MAPS): the head grid is the picture.

What the learner has not written yet is left out and said so: before tiny_model_weights works,
the maps come from the trusted course.tiny_model.forward; before head_confidence or
classify_heads work, the labels say which function is missing."""

from __future__ import annotations

import numpy as np

from course import tiny_model
from course.engine.testing import (
    DependencyNotReady,
    HeadGrid,
    LearnerError,
    NotStarted,
    NumberTable,
)

# One sequence of 10 tokens (narrow enough for 4 maps in 100 columns) in which tokens 1..4 come
# back at 5..8: in the copy, a layer-1 copy head looks at the token after the earlier occurrence
# (row 5 at key 2, row 6 at key 3, ...).
SEQUENCE = np.array([[20, 5, 18, 9, 27, 5, 18, 9, 27, 25]])
COPY = (1, 5, 4)  # the segment at 1, again at 5, 4 tokens
MEASURED_ON = 200  # task sequences the roles are measured on
LENGTH = 16  # their first 16 tokens: the positions the model was trained on most
LAST = 6  # the last rows alone, against every key


class Missing(Exception):
    """A function of the lesson, or an earlier lesson's it calls, still raises
    NotImplementedError (the function's name is the message)."""


def _call(module, name, *args):
    try:
        return getattr(module, name)(*args)
    except (NotStarted, DependencyNotReady):
        raise Missing(name) from None


def _weights(module, model, tokens, n_heads, n_layers):
    """The learner's (n_layers, B, H, T, T) weights, or the trusted ones when not started yet."""
    want = (n_layers, tokens.shape[0], n_heads, tokens.shape[1], tokens.shape[1])
    try:
        weights = _call(module, "tiny_model_weights", model, tokens, n_heads)
    except Missing:
        return np.stack(tiny_model.forward(model, tokens, n_heads=n_heads)[1]), False
    if not isinstance(weights, np.ndarray) or weights.shape != want:
        raise LearnerError(
            f"tiny_model_weights returned {getattr(weights, 'shape', type(weights).__name__)}; "
            f"expected (n_layers, B, H, T, T) = {want}."
        )
    return np.asarray(weights, dtype=np.float64), True


def _per_head(module, name, *args, n_heads):
    values = _call(module, name, *args)
    if not isinstance(values, np.ndarray) or values.shape != (n_heads,):
        raise LearnerError(
            f"{name} returned {getattr(values, 'shape', type(values).__name__)}; "
            f"expected (H,) = ({n_heads},)."
        )
    return np.asarray(values, dtype=np.float64)


def _roles(module, weights, n_heads):
    roles = _call(module, "classify_heads", weights)
    if (
        not isinstance(roles, (list, tuple))
        or len(roles) != n_heads
        or not all(isinstance(r, str) for r in roles)
    ):
        raise LearnerError(f"classify_heads did not return a list of {n_heads} role strings.")
    return [str(role)[:16] for role in roles]


def _measured(module, weights, n_heads):
    """One layer's numbers by the learner's functions; None for what is not written yet."""
    found: dict = {}
    for key, call in (
        ("confidence", lambda: _per_head(module, "head_confidence", weights, n_heads=n_heads)),
        ("share -1", lambda: _per_head(module, "relative_position_share", weights, -1, n_heads=n_heads)),
        (
            "last",
            lambda: _per_head(
                module, "relative_position_share", weights[..., -LAST:, :], -1, n_heads=n_heads
            ),
        ),
        ("share 0", lambda: _per_head(module, "relative_position_share", weights, 0, n_heads=n_heads)),
        ("role", lambda: _roles(module, weights, n_heads)),
    ):
        try:
            found[key] = call()
        except Missing:
            found[key] = None
    return found


def _label(found, h):
    role = found["role"][h] if found["role"] is not None else "role: ?"
    conf = f"conf {found['confidence'][h]:.2f}" if found["confidence"] is not None else "conf ?"
    return f"{role}\n{conf}"


def figures(module):
    """The head grid and the table, every number measured by the learner's functions."""
    cfg = tiny_model.config()
    n_heads, n_layers = cfg["n_heads"], cfg["n_layers"]
    model = tiny_model.load()
    tokens, _, _ = tiny_model.make_task(MEASURED_ON, seed=0)
    tokens = tokens[:, :LENGTH]
    measured, yours = _weights(module, model, tokens, n_heads, n_layers)  # (L, B, H, T, T)
    shown = _weights(module, model, SEQUENCE, n_heads, n_layers)[0][:, 0]  # (L, H, T, T)

    labels, rows = [], []
    missing: set[str] = set()
    for layer in range(n_layers):
        found = _measured(module, measured[layer], n_heads)
        missing |= {key for key, value in found.items() if value is None}
        labels.append(tuple(_label(found, h) for h in range(n_heads)))
        for h in range(n_heads):
            cell = [found[key][h] if found[key] is not None else np.nan for key in ("confidence", "share -1")]
            cell += [found[key][h] if found[key] is not None else np.nan for key in ("last", "share 0")]
            role = found["role"][h] if found["role"] is not None else "?"
            rows.append((layer, h, *(float(v) for v in cell), role))

    source, copy, size = COPY
    tokens_text = " ".join(str(t) for t in SEQUENCE[0])
    whose = "" if yours else " (from course.tiny_model.forward: your tiny_model_weights is not ready yet)"
    notes = []
    if {"confidence"} & missing:
        notes.append("head_confidence")
    if {"share -1", "last", "share 0"} & missing:
        notes.append("relative_position_share")
    if "role" in missing:
        notes.append("classify_heads")
    pending = f" Not written yet: {', '.join(notes)} (shown as ? and NaN)." if notes else ""
    return [
        HeadGrid(
            f"Every head of the tiny model on the tokens {tokens_text} (tokens {source}-"
            f"{source + size - 1} come back at {copy}-{copy + size - 1}){whose}. Under each map: "
            f"the role and confidence your functions measure on {MEASURED_ON} task sequences of "
            f"{LENGTH} tokens.{pending}",
            shown,
            tuple(labels),
        ),
        NumberTable(
            f"Your measurements (the {MEASURED_ON} task sequences of {LENGTH} tokens of the labels above; "
            f"'last {LAST}': the last "
            f"{LAST} query rows against all {LENGTH} keys, as a KV-cache decode sees them)",
            ("layer", "head", "confidence", "share -1", f"-1, last {LAST}", "share 0", "role"),
            tuple(rows),
            ("d", "d", ".3f", ".3f", ".3f", ".3f", ""),
        ),
    ]
