"""Grading tests for lesson 10 (l10_head_roles): head_confidence, relative_position_share,
classify_heads, tiny_model_weights, model_head_roles.

Everything is graded on attention weights and models built HERE: synthetic weights whose heads
are made to be positional, content or diffuse (with fully masked rows, T != S, ties and heads
with nothing to measure), and small models of the tiny model's structure. Nothing is graded on
the shipped model card: a classifier that looks roles up in course.tiny_model.card() instead of
measuring them gets them wrong here, and is told so.

Sizes of the synthetic weights: B=2 sequences, H=3 heads, T=5 queries, S=7 keys (all different,
so a swapped axis shows as a wrong shape and a top-left alignment as wrong numbers). Models:
3 layers of H=4 heads, D=20 (K=5), vocabulary V=9, max_len L=7, batches of 2 sequences of 6.

The oracles below are loops over every head, row and key; run with one rule changed (alignment,
tie-breaking, masked rows, thresholds) they compute the classic WRONG answers, only to name a
mistake when an answer matches one of them.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from course.engine.testing import (
    KnownMistake,
    LearnerError,
    Mistake,
    check_array,
    check_not_modified,
    exercise,
    hand_checked,
    remembered,
    rng,
    variation,
)

B, H, T, S = 2, 3, 5, 7
OFFSETS = (-2, -1, 0, 1)
POSITIONAL, CONFIDENT = 0.9, 0.5


# ---------------------------------------------------------------- oracles (slow and obvious)
def rows_by_head(weights):
    """Every query row of every leading index, per head: a list of H lists of (i, row)."""
    w = np.asarray(weights, dtype=np.float64)
    n_h, n_t, n_s = w.shape[-3:]
    lead = w.reshape(-1, n_h, n_t, n_s)
    return [[(i, lead[n, h, i]) for n in range(lead.shape[0]) for i in range(n_t)] for h in range(n_h)]


def all_zero(row):
    return all(float(v) == 0.0 for v in row)


def confidence_loop(weights, skip_zero=True):
    """Per head: the mean of every counted row's largest weight; NaN when no row counts."""
    out = []
    for rows in rows_by_head(weights):
        tops = [max(float(v) for v in row) for _, row in rows if not (skip_zero and all_zero(row))]
        out.append(sum(tops) / len(tops) if tops else math.nan)
    return np.array(out)


def argmax_loop(row, last=False):
    """The first index of the largest weight (the last one with last=True)."""
    best = 0
    for j, v in enumerate(row):
        if v > row[best] or (last and v == row[best]):
            best = j
    return best


def share_loop(weights, offset, shift=None, last=False, skip_zero=True, skip_outside=True, empty=math.nan):
    """Per head: among counted rows, the share whose argmax is the key i + shift + offset.

    shift defaults to S - T (bottom-right); the other arguments change one rule only to compute a
    named wrong answer."""
    n_t, n_s = np.shape(weights)[-2:]
    shift = n_s - n_t if shift is None else shift
    out = []
    for rows in rows_by_head(weights):
        hits = counted = 0
        for i, row in rows:
            j = i + shift + offset
            if skip_zero and all_zero(row):
                continue
            if skip_outside and not 0 <= j < n_s:
                continue
            counted += 1
            hits += argmax_loop(row, last) == j
        out.append(hits / counted if counted else empty)
    return np.array(out)


def classify_loop(
    weights,
    offsets=OFFSETS,
    positional=POSITIONAL,
    confident=CONFIDENT,
    share=share_loop,
    strict=False,
    content_first=False,
    tie_last=False,
    first_reaching=False,
):
    """One role per head by the lesson's rule; the keyword arguments compute named wrong ones."""
    shares = [share(weights, o) for o in offsets]
    confidence = confidence_loop(weights)

    def reaches(value, threshold):
        return value > threshold if strict else value >= threshold

    roles = []
    for h in range(len(confidence)):
        best, best_share = None, -math.inf
        for o, s in zip(offsets, shares, strict=True):
            if not reaches(s[h], positional):
                continue
            if best is None or s[h] > best_share or (tie_last and s[h] == best_share):
                if not (first_reaching and best is not None):
                    best, best_share = o, s[h]
        is_content = reaches(confidence[h], confident)
        if content_first and is_content:
            roles.append("content")
        elif best is not None:
            roles.append(f"positional {best}")
        elif is_content:
            roles.append("content")
        else:
            roles.append("diffuse")
    return roles


@remembered
def forward_loop(model, tokens, n_heads, positions=True, residual=True, causal=True, fresh=False):
    """A tiny_model-style transformer, one sequence, layer, head, query and key at a time.
    Returns the weights (n_layers, B, H, T, T). The keyword arguments change one rule only to
    compute a named wrong answer (fresh: every layer reads the embeddings)."""
    tokens = np.asarray(tokens)
    n_b, n_t = tokens.shape
    layers = model["layers"]
    out = np.zeros((len(layers), n_b, n_heads, n_t, n_t))
    for b in range(n_b):
        embedded = np.array(
            [model["tok_emb"][tokens[b, t]] + (model["pos_emb"][t] if positions else 0.0) for t in range(n_t)]
        )  # (T, D)
        x = embedded.copy()
        for li, p in enumerate(layers):
            width = p["w_q"].shape[1]
            k_w = width // n_heads
            concat = np.zeros((n_t, width))
            for h in range(n_heads):
                cols = slice(h * k_w, (h + 1) * k_w)
                q = x @ p["w_q"][:, cols] + p["b_q"][cols]
                k = x @ p["w_k"][:, cols] + p["b_k"][cols]
                v = x @ p["w_v"][:, cols] + p["b_v"][cols]
                for i in range(n_t):
                    keys = [j for j in range(n_t) if j <= i or not causal]
                    scores = [
                        sum(float(q[i, c]) * float(k[j, c]) for c in range(k_w)) / math.sqrt(k_w)
                        for j in keys
                    ]
                    top = max(scores)
                    e = [math.exp(s - top) for s in scores]
                    for j, ej in zip(keys, e, strict=True):
                        out[li, b, h, i, j] = ej / sum(e)
                        concat[i, cols] += ej / sum(e) * v[j]
            layer_out = concat @ p["w_o"] + p["b_o"]
            x = embedded if fresh else (x + layer_out if residual else layer_out)
    return out


# ---------------------------------------------------------------- synthetic weights
def spread_row(n_s, top, at, r, allowed=None):
    """A row of n_s weights summing to 1 whose largest weight, `top`, sits at key `at` only;
    the rest is spread over the other allowed keys, each clearly smaller than `top`."""
    allowed = np.ones(n_s, bool) if allowed is None else allowed.copy()
    allowed[at] = False
    others = np.flatnonzero(allowed)
    row = np.zeros(n_s)
    row[at] = top
    if len(others) == 0:
        row[at] = 1.0
        return row
    share = r.uniform(0.5, 1.5, size=len(others))
    share = share / share.sum() * (1.0 - top)
    share = np.minimum(share, top * 0.8)
    row[others] = share
    row[at] = 1.0 - share.sum()  # at least top: still the single largest weight
    return row


def make_head(kind, n_lead, n_t, n_s, r, offset=-1, hit_rate=1.0, masked=None):
    """(n_lead, T, S) weights of one head. kind: "positional" (first argmax at i + (S - T) +
    offset in `hit_rate` of the rows where that key exists), "content" (a large weight on a
    random key), "diffuse" (small weights). masked: (n_lead, T) booleans, rows left all zero."""
    w = np.zeros((n_lead, n_t, n_s))
    rows = [(n, i) for n in range(n_lead) for i in range(n_t)]
    targets = [i + (n_s - n_t) + offset for _, i in rows]
    inside = [k for k, j in enumerate(targets) if 0 <= j < n_s]
    n_hit = round(hit_rate * len(inside))
    hit = set(r.permutation(inside)[:n_hit].tolist()) if kind == "positional" else set()
    for k, (n, i) in enumerate(rows):
        if masked is not None and masked[n, i]:
            continue
        if k in hit:
            at = targets[k]
        else:
            choices = [j for j in range(n_s) if j != targets[k]] or [0]
            at = int(r.choice(choices))
        top = r.uniform(0.2, 0.4) if kind == "diffuse" else r.uniform(0.6, 0.95)
        w[n, i] = spread_row(n_s, top, at, r)
    return w


def make_weights(kinds, r, n_lead=B, n_t=T, n_s=S, masked=None):
    """(n_lead, H, T, S) weights from one (kind, offset, hit_rate) per head."""
    heads = [make_head(kind, n_lead, n_t, n_s, r, offset, rate, masked) for kind, offset, rate in kinds]
    return np.stack(heads, axis=1)


def random_weights(r, shape, zero_rows=0.2, sharp=3.0):
    """Softmax rows of random scores, a share `zero_rows` of them all zero (fully masked)."""
    scores = r.standard_normal(shape) * sharp
    w = np.exp(scores - scores.max(axis=-1, keepdims=True))
    w /= w.sum(axis=-1, keepdims=True)
    w[r.random(shape[:-1]) < zero_rows] = 0.0
    return w


# ---------------------------------------------------------------- models
def random_model(r, n_layers=3, n_heads=4, d=20, vocab=9, max_len=7, scale=1.5):
    """A tiny_model-style model: tok_emb (V, D), pos_emb (L, D), layers of lesson-6 params."""
    s = scale / math.sqrt(d)
    layers = [
        {
            "w_q": r.standard_normal((d, d)) * s,
            "b_q": r.standard_normal(d) * 0.3,
            "w_k": r.standard_normal((d, d)) * s,
            "b_k": r.standard_normal(d) * 0.3,
            "w_v": r.standard_normal((d, d)) * s,
            "b_v": r.standard_normal(d) * 0.3,
            "w_o": r.standard_normal((d, d)) * s,
            "b_o": r.standard_normal(d) * 0.3,
        }
        for _ in range(n_layers)
    ]
    return {
        "tok_emb": r.standard_normal((vocab, d)),
        "pos_emb": r.standard_normal((max_len, d)),
        "unembed": r.standard_normal((d, vocab)),
        "b_unembed": np.zeros(vocab),
        "layers": layers,
    }


def built_model(r, max_len=7, vocab=5):
    """A 2-layer, 2-head model built to have roles: layer 0 head 0 looks one token back (its
    queries and keys read one-hot positions), layer 0 head 1 has zero queries (even weights),
    layer 1 head 0 looks for the same token (one-hot tokens); the rest is random and small."""
    k_w = max_len + 1  # head width: room for positions 0 .. L
    d = 2 * k_w  # D = 16 for L = 7
    model = random_model(r, n_layers=2, n_heads=2, d=d, vocab=vocab, max_len=max_len, scale=0.3)
    model["pos_emb"] = np.zeros((max_len, d))
    model["pos_emb"][:, :max_len] = np.eye(max_len)  # position p: feature p
    model["tok_emb"] = np.zeros((vocab, d))
    model["tok_emb"][:, k_w : k_w + vocab] = np.eye(vocab)  # token v: feature K + v
    big = 30.0 * math.sqrt(k_w)
    first, second = model["layers"]
    for name in ("w_q", "w_k", "b_q", "b_k"):
        first[name] = np.zeros_like(first[name])
    for p in range(max_len):
        first["w_q"][p, p] = big  # query of position p: big * e_p
        first["w_k"][p, p + 1] = 1.0  # key of position p: e_(p+1): the score is big for p = i - 1
    second["w_q"][:, :k_w] = 0.0
    second["w_k"][:, :k_w] = 0.0
    for v in range(vocab):
        second["w_q"][k_w + v, v] = big  # query of token v: big * e_v
        second["w_k"][k_w + v, v] = 1.0  # key of token v: e_v
    second["b_q"][:k_w] = 0.0
    second["b_k"][:k_w] = 0.0
    first["w_o"] *= 0.1  # layer 0 barely disturbs the one-hot codes layer 1 reads
    return model


def heads_permuted(model, orders, n_heads):
    """A copy of ``model`` whose layer l's head j is its head orders[l][j]: the head's columns of
    w_q, w_k, w_v and their biases and its rows of w_o move together, so the model computes the
    same thing and the weights (and roles) of its heads come in the new order."""
    layers = []
    for p, order in zip(model["layers"], orders, strict=True):
        k_w = p["w_q"].shape[1] // n_heads
        cols = (np.asarray(order)[:, None] * k_w + np.arange(k_w)).ravel()  # head blocks reordered
        moved = {name: np.asarray(p[name])[..., cols] for name in ("w_q", "b_q", "w_k", "b_k", "w_v", "b_v")}
        layers.append({**p, **moved, "w_o": np.asarray(p["w_o"])[cols]})
    return {**model, "layers": layers}


# ---------------------------------------------------------------- classic mistakes, by name
MASKED_COUNTED = Mistake(
    "masked-rows-counted",
    "fully masked rows (all weights 0) were counted: a query that saw no key has no largest "
    "weight and no argmax; leave those rows out",
    misconception="masked-rows-counted",
    exercises=("classify_heads", "head_confidence", "relative_position_share"),
)
MAX_OVER_QUERIES = Mistake(
    "max-over-queries",
    "the largest weight was taken over the queries (axis -2, T), not over each row's keys "
    "(axis -1, S): max(axis=-1) gives one number per query row",
    exercises=("head_confidence",),
)
LEADING_KEPT = Mistake(
    "confidence-leading-axes-kept",
    "averaged over the query rows of each sequence only: the result keeps the leading axes; "
    "pool the rows of every leading index into one mean per head, (H,)",
    exercises=("head_confidence",),
)
OVER_HEADS = Mistake(
    "confidence-over-heads",
    "averaged over the wrong axis: over the heads (and leading axes), one number per query "
    "position; average over the rows instead, one number per head",
    exercises=("head_confidence",),
)
MEAN_OF_MEANS = Mistake(
    "mean-of-means",
    "averaged per sequence first, then over the sequences: pool every row of every sequence "
    "into one mean per head, so that a sequence with more unmasked rows weighs more",
    exercises=("head_confidence",),
)
TOP_LEFT = Mistake(
    "relative-position-top-left",
    "the relative position is aligned top-left (key j = i + offset): with T queries against "
    "S keys query i sits at position i + (S - T), so its key at the offset is "
    "j = i + (S - T) + offset",
    misconception="top-left-causal",
    exercises=("classify_heads", "model_head_roles", "relative_position_share"),
)
ARGMAX_LAST = Mistake(
    "argmax-last",
    "of equal largest weights the LAST key was taken; the share counts the FIRST argmax "
    "(np.argmax's own rule)",
    exercises=("classify_heads", "relative_position_share"),
)
OUTSIDE_COUNTED = Mistake(
    "outside-rows-counted",
    "rows whose key at the offset falls outside 0 .. S-1 (query 0 has no previous token) were "
    "counted as misses; leave them out",
    exercises=("classify_heads", "relative_position_share"),
)
SIGN_FLIPPED = Mistake(
    "offset-sign-flipped",
    "the offset points the wrong way: offset -1 is the key BEFORE the query, j = i + (S - T) - 1",
    exercises=("relative_position_share",),
)
ZERO_NOT_NAN = Mistake(
    "zero-not-nan",
    "a head with no row to measure got 0 instead of NaN (0 of 0 rows is no evidence, not 0%)",
    exercises=("relative_position_share",),
)
STRICT = Mistake(
    "strict-threshold",
    "a threshold was compared with > instead of >=: a share of exactly 0.9 is positional "
    "(Voita et al.: at least 90%), a confidence of exactly 0.5 is content",
    exercises=("classify_heads",),
)
CONTENT_FIRST = Mistake(
    "content-before-positional",
    "a confident positional head was called content: test the positional rule first (a "
    "positional head is usually confident too)",
    exercises=("classify_heads",),
)
TIE_LAST = Mistake(
    "tie-last-offset",
    "of two offsets with equal shares the later one won; the first in `offsets` must win",
    exercises=("classify_heads",),
)
FIRST_REACHING = Mistake(
    "first-offset-reaching",
    "the first offset that reached the threshold won, not the one with the largest share",
    exercises=("classify_heads",),
)
READS_CARD = Mistake(
    "reads-the-card",
    "these are the roles printed on the tiny model's card (course.tiny_model.card()), not "
    "roles measured on the weights passed in: classify the weights you are given",
    exercises=("classify_heads", "model_head_roles"),
)
CARD_CONFIDENCE = Mistake(
    "card-confidence",
    "these are the confidences printed on the tiny model's card, not measured on the weights passed in",
    exercises=("head_confidence",),
)
NO_POSITIONS = Mistake(
    "no-position-embeddings",
    "the position embeddings are missing: x = tok_emb[tokens] + pos_emb[:T]",
    exercises=("tiny_model_weights",),
)
NO_RESIDUAL = Mistake(
    "no-residual",
    "no residual connection: the next layer must read x + out, not out alone",
    exercises=("tiny_model_weights",),
)
FRESH = Mistake(
    "every-layer-reads-embeddings",
    "every layer was fed the embeddings: feed each layer the residual stream x + out left by "
    "the layers before it",
    exercises=("tiny_model_weights",),
)
NO_MASK = Mistake(
    "no-causal-mask",
    "no causal mask: the tiny model is causal, pass causal_mask(T) to multi_head_attention",
    exercises=("tiny_model_weights",),
)
FIRST_ROWS = Mistake(
    "first-rows-not-last",
    "with last=n the FIRST n query rows were kept; keep the last n, weights[..., -n:, :]",
    exercises=("model_head_roles",),
)
LAST_KEYS_TOO = Mistake(
    "last-keys-too",
    "with last=n the keys were cut to the last n as well: keep every key, the queries sit at "
    "positions T - n .. T - 1 against all T keys",
    exercises=("model_head_roles",),
)


def card_heads():
    """The shipped card's heads (trusted data), or [] when it cannot be read."""
    try:
        from course import tiny_model

        return list(tiny_model.card()["heads"])
    except Exception:  # noqa: BLE001 - the card only names a mistake; grading never needs it
        return []


def card_roles_by_layer():
    layers: dict[int, list[str]] = {}
    for head in card_heads():
        layers.setdefault(int(head["layer"]), []).append(str(head["role"]))
    return [layers[k] for k in sorted(layers)]


def card_role_mistakes(n_heads):
    """Every way of reading roles off the card for n_heads heads (one layer's, or cut)."""
    candidates = []
    for roles in card_roles_by_layer():
        candidates += [roles, roles[:n_heads]]
    every = [str(h["role"]) for h in card_heads()]
    candidates += [every, every[:n_heads]]
    return candidates


def card_confidence_mistakes(n_heads):
    layers: dict[int, list[float]] = {}
    for head in card_heads():
        layers.setdefault(int(head["layer"]), []).append(float(head["confidence"]))
    return [np.array(values[:n_heads]) for values in layers.values() if len(values) >= n_heads]


def confidence_mistakes(weights):
    w = np.asarray(weights, dtype=np.float64)
    n_h = w.shape[-3]

    def mean_of_means():
        lead = w.reshape(-1, *w.shape[-3:])
        per = np.array([confidence_loop(lead[n : n + 1]) for n in range(lead.shape[0])])  # (N, H)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a head masked in every sequence: NaN
            return np.nanmean(per, axis=0)

    def over_queries():
        cols = np.moveaxis(w.max(axis=-2), -2, 0).reshape(n_h, -1)  # (H, N*S)
        return cols.mean(axis=1)

    mistakes = {
        MASKED_COUNTED: lambda: confidence_loop(w, skip_zero=False),
        MAX_OVER_QUERIES: over_queries,
        MEAN_OF_MEANS: mean_of_means,
        LEADING_KEPT: lambda: w.max(axis=-1).mean(axis=-1),
        OVER_HEADS: lambda: np.moveaxis(w.max(axis=-1), -1, 0).reshape(w.shape[-2], -1).mean(axis=1),
    }
    for layer, values in enumerate(card_confidence_mistakes(n_h)):
        mistakes[CARD_CONFIDENCE.plus(f" (layer {layer})")] = values
    return mistakes


def share_mistakes(weights, offset):
    return {
        TOP_LEFT: lambda: share_loop(weights, offset, shift=0),
        ARGMAX_LAST: lambda: share_loop(weights, offset, last=True),
        MASKED_COUNTED: lambda: share_loop(weights, offset, skip_zero=False),
        ZERO_NOT_NAN: lambda: share_loop(weights, offset, empty=0.0),
        OUTSIDE_COUNTED: lambda: share_loop(weights, offset, skip_outside=False),
        SIGN_FLIPPED: lambda: share_loop(weights, -offset),
    }


def classify_mistakes(weights, offsets=OFFSETS, positional=POSITIONAL, confident=CONFIDENT):
    def variant(**how):
        return lambda: classify_loop(weights, offsets, positional, confident, **how)

    mistakes = {
        STRICT: variant(strict=True),
        CONTENT_FIRST: variant(content_first=True),
        TIE_LAST: variant(tie_last=True),
        FIRST_REACHING: variant(first_reaching=True),
        TOP_LEFT: variant(share=lambda w, o: share_loop(w, o, shift=0)),
        ARGMAX_LAST: variant(share=lambda w, o: share_loop(w, o, last=True)),
        MASKED_COUNTED: variant(share=lambda w, o: share_loop(w, o, skip_zero=False)),
        OUTSIDE_COUNTED: variant(share=lambda w, o: share_loop(w, o, skip_outside=False)),
    }
    return {READS_CARD: Candidates(card_role_mistakes(np.shape(weights)[-3])), **mistakes}


# ---------------------------------------------------------------- checks of role lists
class Candidates(list):
    """Several wrong answers of one mistake: the answer matches when it equals any of them."""


def plain(value):
    """Tuples as lists, all the way down, for comparing the learner's nesting with ours."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def describe(value):
    kind = getattr(value, "type_name", None)  # an Opaque stand-in for what could not travel
    if kind is not None:
        return f"a {kind} ({getattr(value, 'text', '')[:60]})"
    if value is None:
        return "None (is a `return` missing?)"
    return repr(value)[:200]


def check_roles(actual, expected, *, what, mistakes=None, explain=None):
    """Fail unless ``actual`` is the list of role strings ``expected`` (nested lists for
    several layers); name a known mistake when the answer equals one of ``mistakes``."""
    nested = bool(expected) and isinstance(expected[0], list)
    shape = "a list of layers, each a list of H role strings" if nested else "a list of H role strings"
    if isinstance(actual, np.ndarray) or getattr(actual, "type_name", "") == "ndarray":
        raise AssertionError(
            f"{what} returned an array; return {shape}, e.g. {expected!r}: a Python list of str "
            "(numpy arrays of text cannot be graded)."
        )
    got = plain(actual)
    flat = (
        [v for layer in got for v in (layer if isinstance(layer, list) else [layer])]
        if isinstance(got, list)
        else []
    )
    if not isinstance(got, list) or (nested and not all(isinstance(layer, list) for layer in got)):
        raise AssertionError(f"{what} returned {describe(actual)}; expected {shape}: {expected!r}.")
    if not all(isinstance(v, str) for v in flat):
        bad = next(v for v in flat if not isinstance(v, str))
        raise AssertionError(
            f"{what} returned {describe(actual)}; every role must be a str, such as 'positional -1', "
            f"'content' or 'diffuse' (found {describe(bad)})."
        )
    if got == expected:
        return
    message = f"{what} returned {got!r}; expected {expected!r}."
    if not nested and len(got) == len(expected) and explain is not None:
        for h, (want, have) in enumerate(zip(expected, got, strict=True)):
            if want != have:
                message += f"\n  head {h}: expected {want!r}, got {have!r}: {explain(h)}"
    elif len(got) != len(expected):
        message += f" That is {len(got)} entries for {len(expected)} {'layers' if nested else 'heads'}."
    # As diagnose does for arrays: a mistake whose roles are the answer's, on a case where its
    # roles are not the right ones; several such mistakes are named together.
    found = []
    for mistake, candidate in (mistakes or {}).items():
        if not isinstance(mistake, Mistake):
            raise TypeError(f"grader bug: mistakes must be keyed by Mistake, not {mistake!r}")
        try:
            value = candidate() if callable(candidate) else candidate
        except Exception:  # noqa: BLE001 - a variant that cannot be formed does not match
            continue
        options = [plain(option) for option in (value if isinstance(value, Candidates) else [value])]
        if got in options and expected not in options and mistake.id not in {m.id for m in found}:
            found.append(mistake)
    if found:
        raise KnownMistake(message, found[0] if len(found) == 1 else Mistake.any_of(*found))
    raise AssertionError(message)


def explainer(weights, offsets=OFFSETS):
    """What the head's numbers are, for a message about one head's role."""
    shares = [share_loop(weights, o) for o in offsets]
    confidence = confidence_loop(weights)

    def explain(h):
        listed = ", ".join(f"{o}: {s[h]:.3f}" for o, s in zip(offsets, shares, strict=True))
        return f"its shares by offset are {listed}; its confidence is {confidence[h]:.3f}"

    return explain


def check_confidence(lesson, weights, what):
    check_array(
        lesson.head_confidence(weights),
        confidence_loop(weights),
        what=what,
        dims="H",
        dtype=np.float64,
        mistakes=confidence_mistakes(weights),
    )


def check_share(lesson, weights, offset, what):
    check_array(
        lesson.relative_position_share(weights, offset),
        share_loop(weights, offset),
        what=what,
        dims="H",
        dtype=np.float64,
        mistakes=share_mistakes(weights, offset),
    )


def check_classified(lesson, weights, what, **options):
    expected = classify_loop(weights, **options)
    check_roles(
        lesson.classify_heads(weights, **options),
        expected,
        what=what,
        mistakes=classify_mistakes(weights, **options),
        explain=explainer(weights, options.get("offsets", OFFSETS)),
    )


def check_raises_value_error(call, name):
    """A (T, S) array has no head axis: the function must say so with a ValueError."""
    # Under an instructor's secret: another T and S.
    v = variation(f"{name} without a head axis")
    n_t, n_s = v.integers(1, 9, T), v.integers(1, 9, S)
    w = np.full((n_t, n_s), 1.0 / n_s)
    what = f"{name} on weights of shape (T, S) = ({n_t}, {n_s}), without a head axis"
    try:
        result = call(w)
    except LearnerError as error:
        if error.kind != "ValueError":
            raise AssertionError(
                f"{what} raised {error.kind or 'an error'}: {error.text[:160]}\nRaise a ValueError that "
                "says the weights must be (..., H, T, S) with at least 3 axes."
            ) from None
        return
    raise AssertionError(
        f"{what} returned {describe(result)}; it must raise a ValueError: weights need at least 3 "
        "axes, (..., H, T, S)."
    )


def masked_rows(r, n_lead=B, n_t=T, share=0.3):
    return r.random((n_lead, n_t)) < share


def property_weights(seed, shape, zero_rows, sharp=3.0, decimals=None, *, name):
    """random_weights(rng(seed), shape, ...) for a property check, rounded to ``decimals`` if given.
    Under an instructor's secret, weights of nothing but 0s and 1s (one key per row, or every row
    masked) are too few numbers to differ from a public grade's: they get one more key and at most
    30% masked rows until they hold another number."""
    secret = variation(name).secret
    while True:
        w = random_weights(rng(seed), shape, zero_rows=zero_rows, sharp=sharp)
        w = w if decimals is None else np.round(w, decimals)
        if not (secret and np.isin(w, (0.0, 1.0)).all()):
            return w
        shape, zero_rows = (*shape[:-1], shape[-1] + 1), min(zero_rows, 0.3)


# ---------------------------------------------------------------- head_confidence
@exercise("head_confidence")
class TestHeadConfidence:
    def test_head_confidence_returns_one_float64_per_head(self, lesson):
        """head_confidence returns one float64 per head for weights (B, H, T, S)"""
        w = random_weights(rng(1), (B, H, T, S), zero_rows=0.0)
        check_confidence(lesson, w, "head_confidence(weights (B, H, T, S) = (2, 3, 5, 7))")

    @hand_checked
    def test_small_case_by_hand(self, lesson):
        """small case by hand: [[[1, 0], [0.5, 0.5]]] gives [0.75]"""
        # Under an instructor's secret: another second row, the rows and the keys reordered.
        v = variation("head_confidence by hand")
        rows, keys = v.permutation(2), v.permutation(2)
        second = v.pick([[0.5, 0.5], [0.25, 0.75], [0.625, 0.375]])
        w = np.array([[[1.0, 0.0], second]])[:, rows][..., keys]  # H = 1, T = S = 2: (1 + 0.5) / 2
        check_array(
            lesson.head_confidence(w),
            np.array([(1.0 + max(second)) / 2]),
            what=f"head_confidence({w.tolist()})",
            dims="H",
            dtype=np.float64,
            mistakes=confidence_mistakes(w),
        )

    def test_a_fully_masked_row_is_left_out(self, lesson):
        """a fully masked row (all zeros) is left out of the mean"""
        # head 0: rows [1, 0] and [0, 0] (masked): 1.0, not (1 + 0) / 2
        # head 1: rows [0.6, 0.4] and [0.3, 0.7]: (0.6 + 0.7) / 2
        # Under an instructor's secret: the heads, the rows and the keys reordered.
        v = variation("a fully masked row")
        heads, rows, keys = v.permutation(2), v.permutation(2), v.permutation(2)
        w = np.array([[[1.0, 0.0], [0.0, 0.0]], [[0.6, 0.4], [0.3, 0.7]]])[heads][:, rows][..., keys]
        head, row = int(np.argmax(heads == 0)), int(np.argmax(rows == 1))  # where the masked row went
        check_array(
            lesson.head_confidence(w),
            np.array([1.0, 0.65])[heads],
            what=f"head_confidence(weights (H, T, S) = (2, 2, 2)) with head {head}'s row {row} all zero",
            dims="H",
            dtype=np.float64,
            mistakes=confidence_mistakes(w),
        )

    def test_a_head_with_no_row_left_gets_nan(self, lesson):
        """a head with no row left (all zeros) gets NaN"""
        # Under an instructor's secret: another head is the one masked.
        head = variation("a head with no row left").integers(0, H, 1)
        w = random_weights(rng(2), (B, H, T, S), zero_rows=0.0)
        w[:, head] = 0.0  # every row of every sequence fully masked
        check_confidence(lesson, w, f"head_confidence(weights (2, 3, 5, 7)) whose head {head} is all zeros")

    def test_masked_rows_in_some_sequences_only(self, lesson):
        """rows masked in some sequences only: sequence 0 padded after 2 queries"""
        r = rng(3)
        w = random_weights(r, (B, H, T, S), zero_rows=0.0)
        w[0, :, 2:] = 0.0  # sequence 0 is padded after 2 queries, in every head
        w[1, 2, 4] = 0.0
        check_confidence(lesson, w, "head_confidence(weights (2, 3, 5, 7)), sequence 0 masked after 2 rows")

    def test_every_row_of_every_leading_index_is_pooled(self, lesson):
        """every row of every leading index is pooled: (H, T, S), (L, B, H, T, S)"""
        r = rng(4)
        for shape, name in (((H, T, S), "(H, T, S)"), ((4, B, H, T, S), "(L, B, H, T, S) = (4, 2, 3, 5, 7)")):
            w = random_weights(r, shape)
            check_confidence(lesson, w, f"head_confidence(weights {name})")

    def test_the_maximum_is_over_the_keys_when_t_equals_s(self, lesson):
        """the maximum is over the keys (axis -1) when T = S"""
        w = random_weights(rng(5), (B, 4, 6, 6), zero_rows=0.0, sharp=1.5)
        check_confidence(lesson, w, "head_confidence(weights (B, H, T, S) = (2, 4, 6, 6))")

    def test_synthetic_heads_get_their_confidence(self, lesson):
        """positional, content and diffuse heads get their confidence"""
        r = rng(6)
        kinds = [("positional", -1, 1.0), ("content", 0, 0.0), ("diffuse", 0, 0.0)]
        w = make_weights(kinds, r, masked=masked_rows(r))
        check_confidence(lesson, w, "head_confidence(positional, content and diffuse heads (2, 3, 5, 7))")

    def test_float32_weights_give_float64_and_stay_unchanged(self, lesson):
        """float32 weights give float64 and are left unchanged"""
        w = random_weights(rng(7), (B, H, T, S)).astype(np.float32)
        out = lesson.head_confidence(w)
        check_not_modified(lesson, "head_confidence(weights)")
        check_array(
            out,
            confidence_loop(w),
            what="head_confidence(float32 weights (2, 3, 5, 7))",
            dims="H",
            dtype=np.float64,
            rtol=1e-5,
            atol=1e-6,
            mistakes=confidence_mistakes(w),
        )

    def test_fewer_than_3_axes_raise_a_value_error(self, lesson):
        """weights with fewer than 3 axes, (T, S), raise a ValueError"""
        check_raises_value_error(lambda w: lesson.head_confidence(w), "head_confidence")

    @given(
        lead=st.lists(st.integers(1, 3), min_size=0, max_size=2),
        n_h=st.integers(1, 4),
        n_t=st.integers(1, 5),
        n_s=st.integers(1, 6),
        zero=st.sampled_from([0.0, 0.3, 1.0]),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_head_confidence_equals_the_loop_for_any_shape(self, lesson, lead, n_h, n_t, n_s, zero, seed):
        """head_confidence equals a row-by-row loop for any (..., H, T, S)"""
        w = property_weights(seed, (*lead, n_h, n_t, n_s), zero, name="head_confidence for any shape")
        check_confidence(lesson, w, f"head_confidence(weights {w.shape})")


# ---------------------------------------------------------------- relative_position_share
@exercise("relative_position_share")
class TestRelativePositionShare:
    def test_relative_position_share_returns_one_float64_per_head(self, lesson):
        """relative_position_share returns one float64 per head (offset -1)"""
        w = random_weights(rng(10), (B, H, T, T), zero_rows=0.0)
        check_share(lesson, w, -1, "relative_position_share(weights (B, H, T, T) = (2, 3, 5, 5), -1)")

    @hand_checked
    def test_small_case_by_hand_with_more_keys_than_queries(self, lesson):
        """small case by hand with more keys than queries (T = 2, S = 3)"""
        # T = 2 rows against S = 3 keys: row 0 is position 1, row 1 is position 2.
        # offset -1: row 0 targets key 0 (argmax 1: miss), row 1 targets key 1 (argmax 1: hit)
        # Under an instructor's secret: the rows swapped, and the smaller weights of each row too.
        v = variation("relative_position_share by hand")
        rows, keys = v.permutation(2), v.pick([[0, 1, 2], [2, 1, 0]])
        w = np.array([[[0.2, 0.5, 0.3], [0.1, 0.6, 0.3]]])[:, rows][..., keys]
        check_array(
            lesson.relative_position_share(w, -1),
            np.array([0.5]),
            what=f"relative_position_share({w.tolist()}, -1) (T = 2, S = 3)",
            dims="H",
            dtype=np.float64,
            mistakes=share_mistakes(w, -1),
        )

    def test_previous_token_heads_with_t_not_equal_to_s(self, lesson):
        """previous-token heads with T != S: key i + (S - T) - 1"""
        r = rng(11)
        w = make_weights([("positional", -1, 1.0), ("positional", -1, 0.6), ("content", 0, 0.0)], r)
        check_share(lesson, w, -1, "relative_position_share(weights (B, H, T, S) = (2, 3, 5, 7), -1)")

    def test_every_offset(self, lesson):
        """every offset: -2, -1, 0, 1 and 3"""
        r = rng(12)
        w = make_weights([("positional", -2, 0.8), ("positional", 0, 1.0), ("positional", 1, 0.9)], r)
        for offset in (-2, -1, 0, 1, 3):
            check_share(lesson, w, offset, f"relative_position_share(weights (2, 3, 5, 7), {offset})")

    def test_the_last_rows_of_a_longer_sequence_keep_their_offset(self, lesson):
        """the last 3 rows of a longer sequence keep their offset, as in a KV cache"""
        # a head that always looks one back, seen through its last 3 rows (a KV-cache decode)
        full = make_weights([("positional", -1, 1.0)] * H, rng(13), n_t=S, n_s=S)
        last = full[..., -3:, :]
        check_share(lesson, last, -1, "relative_position_share(weights[..., -3:, :] (2, 3, 3, 7), -1)")

    def test_fully_masked_rows_are_left_out(self, lesson):
        """fully masked rows (all zeros) are left out"""
        r = rng(14)
        masked = masked_rows(r, share=0.4)
        masked[0, 0] = masked[1, 0] = True  # row 0 targets key 2 at offset 0: argmax 0 is a miss
        w = make_weights(
            [("positional", -2, 1.0), ("positional", 0, 0.7), ("diffuse", 0, 0.0)], r, masked=masked
        )
        for offset in (-2, 0):
            check_share(
                lesson, w, offset, f"relative_position_share(weights (2, 3, 5, 7) with masked rows, {offset})"
            )
        # a masked row whose target is key 0 would be a hit if counted
        w2 = make_weights([("positional", -1, 0.5)] * H, rng(15), n_t=T, n_s=T, masked=masked)
        check_share(lesson, w2, -1, "relative_position_share(weights (2, 3, 5, 5) with masked rows, -1)")

    def test_ties_count_for_the_first_largest_weight(self, lesson):
        """ties count for the first largest weight, as np.argmax does"""
        # rows spread evenly over their keys: the first argmax is key 0, the last key S - 1
        # Under an instructor's secret: the heads swapped, head 1's rows reordered.
        v = variation("ties count for the first")
        heads, rows = v.permutation(2), v.permutation(3)
        w = np.zeros((1, 2, 3, 3))
        for i in range(3):
            w[0, 0, i, : i + 1] = 1.0 / (i + 1)  # causal and even: first argmax 0
        w[0, 1] = np.array([[0.5, 0.5, 0.0], [0.4, 0.4, 0.2], [0.1, 0.45, 0.45]])[rows]
        w = w[:, heads]
        for offset in (0, -1):
            check_share(
                lesson, w, offset, f"relative_position_share(rows with equal largest weights, {offset})"
            )

    def test_rows_without_a_key_at_the_offset_are_left_out(self, lesson):
        """rows without a key at the offset (outside 0 .. S-1) are left out"""
        w = make_weights([("positional", -2, 1.0)] * H, rng(16), n_t=T, n_s=T)
        check_share(
            lesson,
            w,
            -2,
            "relative_position_share(weights (2, 3, 5, 5), -2): rows 0 and 1 have no key 2 back",
        )

    def test_nan_when_no_row_counts(self, lesson):
        """NaN when no row counts: offset too far back, or a head all zeros"""
        w = random_weights(rng(17), (B, H, T, S), zero_rows=0.0)
        check_share(
            lesson,
            w,
            -S - 1,
            f"relative_position_share(weights (2, 3, 5, 7), {-S - 1}): no key that far back",
        )
        w[:, 0] = 0.0
        check_share(
            lesson, w, -1, "relative_position_share(weights (2, 3, 5, 7) whose head 0 is all zeros, -1)"
        )

    def test_any_leading_axes_and_float32(self, lesson):
        """any leading axes, and float32 weights give float64"""
        r = rng(18)
        w = random_weights(r, (3, B, H, T, S)).astype(np.float32)
        out = lesson.relative_position_share(w, -1)
        check_not_modified(lesson, "relative_position_share(weights, -1)")
        check_array(
            out,
            share_loop(w, -1),
            what="relative_position_share(float32 weights (3, 2, 3, 5, 7), -1)",
            dims="H",
            dtype=np.float64,
            mistakes=share_mistakes(w, -1),
        )
        w3 = random_weights(r, (H, T, S))
        check_share(lesson, w3, 0, "relative_position_share(weights (H, T, S) = (3, 5, 7), 0)")

    def test_fewer_than_3_axes_raise_a_value_error(self, lesson):
        """weights with fewer than 3 axes, (T, S), raise a ValueError"""
        check_raises_value_error(lambda w: lesson.relative_position_share(w, -1), "relative_position_share")

    @given(
        lead=st.lists(st.integers(1, 3), min_size=0, max_size=2),
        n_h=st.integers(1, 3),
        n_t=st.integers(1, 5),
        n_s=st.integers(1, 6),
        offset=st.integers(-3, 2),
        zero=st.sampled_from([0.0, 0.3]),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_relative_position_share_equals_the_loop(self, lesson, lead, n_h, n_t, n_s, offset, zero, seed):
        """relative_position_share equals a row-by-row loop for any shape"""
        shape, name = (*lead, n_h, n_t, n_s), "relative_position_share for any shape"
        # rounding makes ties among the largest weights common
        w = property_weights(seed, shape, zero, sharp=2.0, decimals=1, name=name)
        check_share(lesson, w, offset, f"relative_position_share(weights {w.shape}, {offset})")


# ---------------------------------------------------------------- classify_heads
ROLE_KINDS = [("positional", -1, 1.0), ("content", 0, 0.0), ("diffuse", 0, 0.0), ("positional", 0, 0.95)]


@exercise("classify_heads")
class TestClassifyHeads:
    def test_classify_heads_returns_one_role_string_per_head(self, lesson):
        """classify_heads returns one role string per head"""
        w = make_weights(ROLE_KINDS, rng(20), n_t=6, n_s=6)
        check_classified(lesson, w, "classify_heads(weights (B, H, T, S) = (2, 4, 6, 6))")

    def test_every_role_with_t_not_equal_to_s(self, lesson):
        """every role with T != S: diffuse, positional -2, content, positional -1"""
        r = rng(21)
        kinds = [("diffuse", 0, 0.0), ("positional", -2, 1.0), ("content", 0, 0.0), ("positional", -1, 0.9)]
        w = make_weights(kinds, r, n_lead=4)  # 4 x 5 = 20 rows: 18 hits is a share of 0.9
        assert classify_loop(w) == ["diffuse", "positional -2", "content", "positional -1"], "grader bug"
        check_classified(lesson, w, "classify_heads(weights (4, 4, 5, 7)): diffuse, -2, content, -1")

    def test_roles_are_measured_on_these_weights_not_read_from_the_card(self, lesson):
        """roles are measured on these weights, not read from the model card"""
        # four heads like the card's, with roles no trained causal model has: a next-token head
        r = rng(22)
        kinds = [("positional", 1, 1.0), ("diffuse", 0, 0.0), ("positional", -2, 1.0), ("diffuse", 0, 0.0)]
        w = make_weights(kinds, r, n_t=8, n_s=8)
        assert classify_loop(w) == ["positional 1", "diffuse", "positional -2", "diffuse"], "grader bug"
        check_classified(lesson, w, "classify_heads(weights (2, 4, 8, 8)) of four synthetic heads")

    def test_a_share_of_exactly_0_9_is_positional(self, lesson):
        """a share of exactly 0.9 is positional (>=, not >)"""
        # 9 of the 10 rows that have a previous token look one back; the tenth looks at itself
        # Under an instructor's secret: another row looks at itself, the heads swapped.
        v = variation("a share of exactly 0.9")
        miss, heads = v.integers(1, 11, 10), v.permutation(2)
        w = np.zeros((1, 2, 11, 11))
        for i in range(11):
            w[0, 0, i, max(i - 1, 0)] = 1.0
            w[0, 1, i, : i + 1] = 1.0 / (i + 1)
        w[0, 0, miss] = 0.0
        w[0, 0, miss, miss] = 1.0
        w = w[:, heads]
        head = int(np.argmax(heads == 0))
        assert share_loop(w, -1)[head] == 0.9, "grader bug"
        check_classified(
            lesson,
            w,
            f"classify_heads(weights (1, 2, 11, 11)) whose head {head} looks one back in 9 of 10 rows",
        )

    def test_a_confidence_of_exactly_0_5_is_content(self, lesson):
        """a confidence of exactly 0.5 is content (>=, not >)"""
        base = np.zeros((1, 1, 4, 4))
        for i in range(4):
            at = (0, 3, 1, 2)[i]  # no fixed offset
            base[0, 0, i, at] = 0.5
            base[0, 0, i, (at + 1) % 4] = 0.25
            base[0, 0, i, (at + 2) % 4] = 0.25
        # Under an instructor's secret: the rows and the keys reordered, until no offset reaches 0.9
        # (and the weights are not the public ones: some reorderings give them back).
        v = variation("a confidence of exactly 0.5")
        while True:
            w = base[..., v.permutation(4), :][..., v.permutation(4)]
            if classify_loop(w) == ["content"] and (not v.secret or (w != base).any()):
                break
        assert confidence_loop(w)[0] == 0.5, "grader bug"
        check_classified(lesson, w, "classify_heads(weights (1, 1, 4, 4)) of confidence 0.5")

    def test_a_confident_positional_head_is_positional(self, lesson):
        """a confident positional head is positional, not content"""
        w = make_weights([("positional", -1, 1.0)] * 2, rng(23), n_t=6, n_s=6)
        check_classified(lesson, w, "classify_heads(weights (2, 2, 6, 6)) of confident previous-token heads")

    def test_the_largest_share_wins_and_ties_go_to_the_first_offset(self, lesson):
        """the largest share wins, and ties go to the first offset"""
        # T = S = 2: offset -1 counts row 1 only, offset 1 row 0 only
        # Under an instructor's secret: other weights, another exception, the heads swapped.
        v = variation("the largest share wins")
        low, high = v.pick([(0.2, 0.8), (0.25, 0.75), (0.125, 0.875), (0.375, 0.625)])
        once, heads = v.integers(0, 10, 9), v.permutation(2)
        w = np.zeros((10, 2, 2, 2))
        w[:, :, 0] = [low, high]  # row 0 looks one ahead (offset 1) in every sequence and head
        w[:, :, 1] = [high, low]  # row 1 looks one back (offset -1) ...
        w[once, 1, 1] = [low, high]  # ... except once in head 1: its share at -1 is 0.9
        w = w[:, heads]
        # head 0: shares -1 and 1 are both 1.0 -> the first in offsets, -1
        # head 1: share -1 is 0.9, share 1 is 1.0 -> the largest, 1
        assert classify_loop(w) == [["positional -1", "positional 1"][h] for h in heads], "grader bug"
        check_classified(lesson, w, "classify_heads(weights (10, 2, 2, 2)) with two offsets above 0.9")

    def test_masked_rows_and_a_head_with_nothing_to_measure(self, lesson):
        """masked rows, and a head with nothing to measure (all zeros) is diffuse"""
        r = rng(24)
        masked = masked_rows(r, share=0.4)
        masked[:, 0] = True  # row 0 is where a masked row's argmax 0 would be a hit at offset -(S - T)
        w = make_weights(
            [("positional", -1, 1.0), ("content", 0, 0.0), ("diffuse", 0, 0.0)], r, masked=masked
        )
        w = np.concatenate([w, np.zeros((B, 1, T, S))], axis=1)  # head 3: every row masked: diffuse
        check_classified(lesson, w, "classify_heads(weights (2, 4, 5, 7) with masked rows; head 3 all zeros)")

    def test_other_offsets_and_thresholds(self, lesson):
        """other offsets and thresholds: (-3, -1), positional=0.8, confident=0.7"""
        r = rng(25)
        w = make_weights(
            [("positional", -3, 0.85), ("content", 0, 0.0), ("positional", -1, 1.0)], r, n_t=7, n_s=7
        )
        check_classified(
            lesson,
            w,
            "classify_heads(weights (2, 3, 7, 7), offsets=(-3, -1), positional=0.8, confident=0.7)",
            offsets=(-3, -1),
            positional=0.8,
            confident=0.7,
        )

    def test_classify_heads_leaves_its_input_unchanged(self, lesson):
        """classify_heads leaves its input weights unchanged"""
        w = make_weights(ROLE_KINDS, rng(26))
        lesson.classify_heads(w)
        check_not_modified(lesson, "classify_heads(weights)")

    @given(
        kinds=st.lists(
            st.tuples(
                st.sampled_from(["positional", "content", "diffuse"]),
                st.integers(-2, 1),
                st.sampled_from([0.5, 0.9, 1.0]),
            ),
            min_size=1,
            max_size=4,
        ),
        n_t=st.integers(2, 6),
        extra=st.integers(0, 2),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_classify_heads_equals_the_rule_on_synthetic_heads(self, lesson, kinds, n_t, extra, seed):
        """classify_heads follows the rule on random synthetic heads"""
        r = rng(seed)
        w = make_weights(kinds, r, n_t=n_t, n_s=n_t + extra, masked=masked_rows(r, n_t=n_t, share=0.2))
        check_classified(lesson, w, f"classify_heads(weights {w.shape}) of heads {[k for k, _, _ in kinds]}")


# ---------------------------------------------------------------- tiny_model_weights
def weights_mistakes(model, tokens, n_heads):
    def variant(**how):
        return lambda: forward_loop(model, tokens, n_heads, **how)

    return {
        NO_POSITIONS: variant(positions=False),
        NO_RESIDUAL: variant(residual=False),
        FRESH: variant(fresh=True),
        NO_MASK: variant(causal=False),
    }


def check_model_weights(lesson, model, tokens, n_heads, what):
    check_array(
        lesson.tiny_model_weights(model, tokens, n_heads),
        forward_loop(model, tokens, n_heads),
        what=what,
        dims="L B H T S",
        dtype=np.float64,
        mistakes=weights_mistakes(model, tokens, n_heads),
    )


@exercise("tiny_model_weights")
class TestTinyModelWeights:
    def test_tiny_model_weights_returns_layers_b_h_t_t(self, lesson):
        """tiny_model_weights returns weights (n_layers, B, H, T, T)"""
        r = rng(30)
        model = random_model(r)
        tokens = r.integers(0, 9, size=(2, 6))
        check_model_weights(
            lesson,
            model,
            tokens,
            4,
            "tiny_model_weights(model of 3 layers, tokens (B, T) = (2, 6), n_heads=4)",
        )

    def test_the_layers_read_the_residual_stream(self, lesson):
        """the layers read the residual stream x + out (large weights)"""
        r = rng(31)
        model = random_model(r, scale=3.0)
        tokens = r.integers(0, 9, size=(2, 5))
        check_model_weights(
            lesson,
            model,
            tokens,
            4,
            "tiny_model_weights(model of 3 layers with large weights, tokens (2, 5), 4)",
        )

    def test_other_sizes_and_the_whole_length(self, lesson):
        """other sizes and the whole length: 2 layers, D = 6, T = max_len = 5"""
        r = rng(32)
        model = random_model(r, n_layers=2, n_heads=2, d=6, vocab=4, max_len=5)
        tokens = r.integers(0, 4, size=(3, 5))
        check_model_weights(
            lesson, model, tokens, 2, "tiny_model_weights(model of 2 layers, D = 6, tokens (3, 5), n_heads=2)"
        )

    def test_the_model_and_the_tokens_are_left_unchanged(self, lesson):
        """the model and the tokens are left unchanged"""
        r = rng(33)
        model = random_model(r)
        tokens = r.integers(0, 9, size=(2, 6))
        lesson.tiny_model_weights(model, tokens, 4)
        check_not_modified(lesson, "tiny_model_weights(model, tokens, 4)")

    def test_the_shipped_tiny_model_gives_the_weights_of_its_own_forward(self, lesson):
        """the shipped tiny model gives the weights of tiny_model.forward"""
        from course import tiny_model

        n_heads = tiny_model.config()["n_heads"]
        # Under an instructor's secret: copy-task sequences of another seed, each layer's heads
        # reordered (tiny_model.forward gives the weights of the reordered model, heads moved too).
        v = variation("the shipped tiny model")
        seed = int(rng(34).integers(2**31)) if v.secret else 5
        model = tiny_model.load()
        model = heads_permuted(model, [v.permutation(n_heads) for _ in model["layers"]], n_heads)
        tokens, _, _ = tiny_model.make_task(2, seed=seed)
        _, expected = tiny_model.forward(model, tokens, n_heads=n_heads)
        check_array(
            lesson.tiny_model_weights(model, tokens, n_heads),
            np.stack(expected),
            what=f"tiny_model_weights(tiny_model.load(), tokens {tokens.shape}, {n_heads})",
            dims="L B H T S",
            dtype=np.float64,
        )


# ---------------------------------------------------------------- model_head_roles
@remembered
def roles_loop(model, tokens, n_heads, last=None):
    weights = forward_loop(model, tokens, n_heads)
    if last is not None:
        weights = weights[..., -last:, :]
    return [classify_loop(w) for w in weights]


def model_roles_mistakes(model, tokens, n_heads, last=None):
    weights = forward_loop(model, tokens, n_heads)
    mistakes: dict = {READS_CARD: card_roles_by_layer()}  # every layer's roles, as on the card
    if last is not None:
        mistakes[FIRST_ROWS] = lambda: [classify_loop(w) for w in weights[..., :last, :]]
        mistakes[LAST_KEYS_TOO] = lambda: [classify_loop(w) for w in weights[..., -last:, -last:]]
        mistakes[TOP_LEFT] = lambda: [
            classify_loop(w, share=lambda x, o: share_loop(x, o, shift=0)) for w in weights[..., -last:, :]
        ]
    return mistakes


def check_model_roles(lesson, model, tokens, n_heads, what, last=None):
    kwargs = {} if last is None else {"last": last}
    check_roles(
        lesson.model_head_roles(model, tokens, n_heads, **kwargs),
        roles_loop(model, tokens, n_heads, last),
        what=what,
        mistakes=model_roles_mistakes(model, tokens, n_heads, last),
    )


@exercise("model_head_roles")
class TestModelHeadRoles:
    def test_model_head_roles_gives_a_list_of_roles_per_layer(self, lesson):
        """model_head_roles gives a list of role strings per layer"""
        r = rng(40)
        # Under an instructor's secret: each layer's two heads swapped.
        v = variation("model built with roles")
        orders = [v.permutation(2), v.permutation(2)]
        model = heads_permuted(built_model(r), orders, 2)
        content = int(np.argmax(orders[1] == 0))  # where layer 1's head 0 went
        while True:  # tokens that repeat enough for layer 1's head 0 to look like content
            tokens = r.integers(0, 5, size=(4, 7))
            expected = roles_loop(model, tokens, 2)
            if expected[1][content] == "content":
                break
        assert expected[0] == [["positional -1", "diffuse"][h] for h in orders[0]], "grader bug"
        check_model_roles(
            lesson,
            model,
            tokens,
            2,
            "model_head_roles(model built with a previous-token head, tokens (4, 7), 2)",
        )

    def test_roles_of_a_model_shaped_like_the_shipped_one_are_measured(self, lesson):
        """roles of a model shaped like the shipped one are measured"""
        # 2 layers of 4 heads, like the tiny model: the card's roles fit its shape, not its weights
        r = rng(41)
        model = random_model(r, n_layers=2, n_heads=4, d=16, scale=4.0)
        tokens = r.integers(0, 9, size=(3, 7))
        check_model_roles(
            lesson, model, tokens, 4, "model_head_roles(random model of 2 layers x 4 heads, tokens (3, 7), 4)"
        )

    def test_the_last_rows_only_as_a_kv_cache_decode_sees_them(self, lesson):
        """last=n: the last n query rows only, as a KV-cache decode sees them"""
        r = rng(42)
        # Under an instructor's secret: each layer's two heads swapped.
        v = variation("model built with roles, last rows")
        model = heads_permuted(built_model(r), [v.permutation(2), v.permutation(2)], 2)
        tokens = r.integers(0, 5, size=(6, 7))
        for last in (3, 1):
            check_model_roles(
                lesson,
                model,
                tokens,
                2,
                f"model_head_roles(model built with a previous-token head, tokens (6, 7), 2, last={last})",
                last=last,
            )
