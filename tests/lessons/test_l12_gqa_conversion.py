"""Grading tests for lesson 12 (l12_gqa_conversion): converting multi-head layers to grouped-query
attention (mean_pool_kv_heads, select_kv_heads, first_head_kv_heads, random_head_kv_heads,
convert_model) and measuring the converted model (gqa_model_forward, conversion_table).

The conversions are checked on random MHA layers built here: model width D=5, H=6 heads of width
K=4 (H*K = 24 columns), converted to G=3 key/value heads (groups of r=2), G=2 (r=3), G=1 and G=6.
D differs from H*K, so rows and columns cannot be swapped unnoticed; with 1 < G < H the groups of
consecutive heads ({0, 1}, {2, 3}, {4, 5} for G=3) differ from the modulo groups ({0, 3}, {1, 4},
{2, 5}), so pooling by h % G gives different numbers. The expected answers come from loops over
groups, heads and columns written here.

The models are small random ones built here (vocabulary V=7, L=8 positions, D=12, H=4 heads of
K=3, 2 layers, B=3 sequences of T=6 tokens), never the shipped tiny model: its forward pass is a
loop over sequences, heads and positions, and the accuracy and loss are counted position by
position.

Under an instructor's secret the random layers, models, tokens and targets come from other
streams (``rng``), the seeds handed to random_head_kv_heads, convert_model and conversion_table
are other ones (drawn so that their picks are not all first heads), and the hand-written cases
(picks, refused sizes, the hand-checked layers) use other numbers, transformed so that the answer
stays exact.

"Copies, not views" cannot be seen from the arrays that come back: they travel to the grader as
bytes, so whether they shared memory with the input in the learner's process is lost. What the
grader CAN see is an update written into the result in the same worker call: the lesson's given
fine_tune_step converts, subtracts 0.5 from every converted array in place (as an optimizer
would) and returns the result and params. If a converted array was params' own array or a view
of it, params changed, and the grader sees that in the input file it reads back itself
(``lesson.mutated``) and in the params returned.
"""

import itertools
import math
import re

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

D, H, K = 5, 6, 4  # a layer: model width, heads, head width (H*K = 24 columns)
G, R = 3, 2  # the main conversion: 3 key/value heads, groups of 2
M_V, M_L, M_D, M_H, M_K, M_LAYERS = 7, 8, 12, 4, 3, 2  # the small model
M_B, M_T = 3, 6  # its batch of sequences
IGNORE = -1


# ---------------------------------------------------------------- data
def mha_params(r, d=D, n_heads=H, k=K, bias=True, dtype=np.float64):
    """A random MHA layer: w_q, w_k, w_v (d, H*K), w_o (H*K, d), biases when ``bias``."""
    params = {
        "w_q": r.standard_normal((d, n_heads * k)),
        "w_k": r.standard_normal((d, n_heads * k)),
        "w_v": r.standard_normal((d, n_heads * k)),
        "w_o": r.standard_normal((n_heads * k, d)),
    }
    if bias:
        params.update(
            b_q=r.standard_normal(n_heads * k),
            b_k=r.standard_normal(n_heads * k),
            b_v=r.standard_normal(n_heads * k),
            b_o=r.standard_normal(d),
        )
    return {name: w.astype(dtype) for name, w in params.items()}


def mha_model(r, bias=True, spread=2.0):
    """A small random MHA model in the tiny model's format; ``spread`` sharpens the attention."""
    s = spread / math.sqrt(M_D)
    layers = []
    for _ in range(M_LAYERS):
        p = mha_params(r, d=M_D, n_heads=M_H, k=M_K, bias=bias)
        layers.append({name: w * (s if name.startswith("w") else 0.5) for name, w in p.items()})
    return {
        "tok_emb": r.standard_normal((M_V, M_D)),
        "pos_emb": r.standard_normal((M_L, M_D)) * 0.5,
        "unembed": r.standard_normal((M_D, M_V)) / math.sqrt(M_D),
        "b_unembed": r.standard_normal(M_V) * 0.1,
        "layers": layers,
    }


def task(r, b=M_B, t=M_T):
    """Random tokens and targets, about half the positions scored (the rest IGNORE)."""
    tokens = r.integers(0, M_V, size=(b, t))
    targets = np.where(r.random((b, t)) < 0.5, r.integers(0, M_V, size=(b, t)), IGNORE)
    targets[:, 0] = r.integers(0, M_V, size=b)  # at least one scored position per sequence
    return tokens.astype(np.int64), targets.astype(np.int64)


# ---------------------------------------------------------------- oracles (slow and obvious)
def consecutive_groups(n_heads, n_kv_heads):
    """Lesson 8's groups: group g is heads g*r, ..., g*r + r - 1."""
    r = n_heads // n_kv_heads
    return [[g * r + j for j in range(r)] for g in range(n_kv_heads)]


def modulo_groups(n_heads, n_kv_heads):
    """The wrong groups: group g is heads g, g + G, g + 2G, ..."""
    return [[h for h in range(n_heads) if h % n_kv_heads == g] for g in range(n_kv_heads)]


def pool_columns(w, groups, k, combine):
    """Columns of head width k, group by group: new head g = combine(old heads of group g).
    w is (rows, H*k) or (H*k,)."""
    w = np.asarray(w)
    flat = w.ndim == 1
    w2 = w[None, :] if flat else w
    out = np.zeros((w2.shape[0], len(groups) * k), dtype=np.float64)
    for g, heads in enumerate(groups):
        for c in range(k):
            for row in range(w2.shape[0]):
                values = [float(w2[row, h * k + c]) for h in heads]
                out[row, g * k + c] = combine(values)
    out = out.astype(w.dtype)
    return out[0] if flat else out


def mean(values):
    return sum(values) / len(values)


def convert_loop(params, n_heads, n_kv_heads, groups=None, combine=mean, pool=("k", "v")):
    """The expected conversion: w_<x> and b_<x> of every x in ``pool`` replaced group by group,
    every other entry as it is. groups: lists of heads (default lesson 8's)."""
    groups = groups if groups is not None else consecutive_groups(n_heads, n_kv_heads)
    k = params["w_q"].shape[1] // n_heads
    out = {name: None if value is None else np.array(value) for name, value in params.items()}
    for x in pool:
        if x == "o":  # the rows of w_o are the heads
            out["w_o"] = pool_columns(params["w_o"].T, groups, k, combine).T
            continue
        for name in (f"w_{x}", f"b_{x}"):
            if params.get(name) is not None:
                out[name] = pool_columns(params[name], groups, k, combine)
    return out


def select_loop(params, n_heads, n_kv_heads, picks, absolute=False):
    """Keep head g*r + picks[g] of group g (or head picks[g] itself when ``absolute``)."""
    r = n_heads // n_kv_heads
    groups = [[int(p) if absolute else g * r + int(p)] for g, p in enumerate(picks)]
    return convert_loop(params, n_heads, n_kv_heads, groups)


def rng_picks(n_heads, n_kv_heads, seed):
    return np.random.default_rng(seed).integers(0, n_heads // n_kv_heads, size=n_kv_heads)


def varied_seed(name, public, fits=lambda seed: True):
    """The seed handed to learner code: ``public`` without a secret; under one, another seed in
    0 .. 999 drawn until ``fits(seed)`` (the public seeds all fit)."""
    v = variation(name)
    if not v.secret:
        return public
    while not fits(seed := v.integers(0, 1000, public)):
        pass
    return seed


def varied_picks(name, public, n_heads, n_kv_heads):
    """The picks handed to learner code: ``public`` without a secret; under one, other picks
    that keep some head other than the first of its group."""
    r = n_heads // n_kv_heads
    others = [p for p in itertools.product(range(r), repeat=n_kv_heads) if any(p) and list(p) != public]
    return np.array(variation(name).pick([tuple(public), *others]))


def heads_kept(picks, n_heads, n_kv_heads):
    return ", ".join(str(g * (n_heads // n_kv_heads) + int(p)) for g, p in enumerate(picks))


def some_head_not_first(n_heads, n_kv_heads):
    """Whether a seed's picks keep some head other than the first of its group (so keeping the
    first heads cannot pass for the seed's heads)."""
    return lambda seed: bool(rng_picks(n_heads, n_kv_heads, seed).any())


@remembered
def attention_layer_loop(x, params, n_heads, n_kv_heads, kv_head=None, causal=True):
    """Self-attention of one layer, one sequence, head and position at a time: (B, T, D).
    Query head h reads key/value head kv_head(h), by default h // (H // G)."""
    n_b, n_t, _ = x.shape
    k = params["w_q"].shape[1] // n_heads
    r = n_heads // n_kv_heads
    kv_head = kv_head or (lambda h: h // r)
    zero = np.zeros(params["w_q"].shape[1])

    def bias(name, width):
        value = params.get(name)
        return np.zeros(width) if value is None else value

    concat = np.zeros((n_b, n_t, n_heads * k))
    for b in range(n_b):
        for h in range(n_heads):
            g = kv_head(h)
            qc, kc = slice(h * k, (h + 1) * k), slice(g * k, (g + 1) * k)
            keys = [x[b, s] @ params["w_k"][:, kc] + bias("b_k", n_kv_heads * k)[kc] for s in range(n_t)]
            values = [x[b, s] @ params["w_v"][:, kc] + bias("b_v", n_kv_heads * k)[kc] for s in range(n_t)]
            for t in range(n_t):
                query = x[b, t] @ params["w_q"][:, qc] + bias("b_q", zero.size)[qc]
                seen = range(t + 1) if causal else range(n_t)
                scores = [float(query @ keys[s]) / math.sqrt(k) for s in seen]
                top = max(scores)
                e = [math.exp(sc - top) for sc in scores]
                for s, weight in zip(seen, e, strict=True):
                    concat[b, t, qc] += weight / sum(e) * values[s]
    out = np.zeros((n_b, n_t, x.shape[2]))
    for b in range(n_b):
        for t in range(n_t):
            out[b, t] = concat[b, t] @ params["w_o"] + bias("b_o", x.shape[2])
    return out


@remembered
def forward_loop(model, tokens, n_heads, n_kv_heads, residual=True, positions=True, **how):
    """The model's logits (B, T, V): embed, each layer adds its attention, unembed."""
    n_b, n_t = tokens.shape
    x = np.zeros((n_b, n_t, model["tok_emb"].shape[1]))
    for b in range(n_b):
        for t in range(n_t):
            x[b, t] = model["tok_emb"][tokens[b, t]] + (model["pos_emb"][t] if positions else 0.0)
    for params in model["layers"]:
        out = attention_layer_loop(x, params, n_heads, n_kv_heads, **how)
        x = x + out if residual else out
    logits = np.zeros((n_b, n_t, model["unembed"].shape[1]))
    for b in range(n_b):
        for t in range(n_t):
            logits[b, t] = x[b, t] @ model["unembed"] + model["b_unembed"]
    return logits


def loss_accuracy_loop(logits, targets):
    """Mean cross-entropy and accuracy over the scored positions, one position at a time."""
    losses, hits = [], []
    for b in range(targets.shape[0]):
        for t in range(targets.shape[1]):
            if targets[b, t] == IGNORE:
                continue
            row = [float(z) for z in logits[b, t]]
            top = max(row)
            log_total = top + math.log(sum(math.exp(z - top) for z in row))
            losses.append(log_total - row[targets[b, t]])
            hits.append(float(max(range(len(row)), key=lambda i: row[i]) == targets[b, t]))
    return sum(losses) / len(losses), sum(hits) / len(hits)


def convert_model_loop(model, n_heads, n_kv_heads, method, seed=0, same_seed=False):
    layers = []
    for i, params in enumerate(model["layers"]):
        if method == "mean":
            layers.append(convert_loop(params, n_heads, n_kv_heads))
        elif method == "first":
            layers.append(select_loop(params, n_heads, n_kv_heads, [0] * n_kv_heads))
        elif method == "random":
            picks = rng_picks(n_heads, n_kv_heads, seed if same_seed else seed + i)
            layers.append(select_loop(params, n_heads, n_kv_heads, picks))
        else:
            layers.append(convert_loop(params, n_heads, n_kv_heads, modulo_groups(n_heads, n_kv_heads)))
    new = {name: np.array(value) for name, value in model.items() if name != "layers"}
    new["layers"] = layers
    return new


def norm(x):
    return math.sqrt(sum(float(v) ** 2 for v in np.ravel(x)))


# ---------------------------------------------------------------- classic mistakes, by name
MODULO = Mistake(
    "modulo-groups",
    "the heads were pooled by the wrong grouping: key/value head g is the mean of heads g, "
    "g + G, g + 2G, ... (h % G) instead of the consecutive heads g*r .. g*r + r - 1 "
    "(h // (H // G)), which lesson 8's attention pairs with query heads g*r .. g*r + r - 1; "
    "reshape the columns to (G, r, K), not (r, G, K)",
    exercises=("mean_pool_kv_heads", "convert_model"),
)
FIRST_NOT_MEAN = Mistake(
    "first-not-mean",
    "the first head, not the mean: key/value head g is head g*r alone; mean-pooling averages "
    "all r heads of the group",
    exercises=("mean_pool_kv_heads", "convert_model"),
)
MEAN_NOT_FIRST = Mistake(
    "mean-not-first",
    "the mean of each group, not its first head: this baseline keeps head g*r unchanged",
    exercises=("first_head_kv_heads",),
)
SUM_NOT_MEAN = Mistake(
    "sum-not-mean",
    "the sum of each group, not the mean: divide by r = H // G (np.mean, not np.sum)",
    exercises=("mean_pool_kv_heads", "convert_model"),
)
POOLED_Q = Mistake(
    "pooled-q",
    "W_Q was pooled too: only the key and value heads are shared, the H query heads keep "
    "their own w_q and b_q",
    misconception="pool-all-projections",
    exercises=("convert_model", "first_head_kv_heads", "mean_pool_kv_heads", "select_kv_heads"),
)
POOLED_O = Mistake(
    "pooled-o",
    "W_O was pooled too: its rows belong to the H query heads' outputs, which GQA keeps",
    misconception="pool-all-projections",
    exercises=("convert_model", "first_head_kv_heads", "mean_pool_kv_heads", "select_kv_heads"),
)
NOT_POOLED = Mistake(
    "not-pooled",
    "{name} was returned unchanged: it must be pooled to G heads as well",
    exercises=("convert_model", "first_head_kv_heads", "mean_pool_kv_heads", "select_kv_heads"),
)
BIAS_ADDED = Mistake(
    "bias-added",
    "the result has {name}, which params did not have: missing biases stay missing",
    exercises=("convert_model", "first_head_kv_heads", "mean_pool_kv_heads", "select_kv_heads"),
)
BIAS_DROPPED = Mistake(
    "bias-dropped",
    "{name} is missing from the result: copy (or pool) every entry of params",
    exercises=("convert_model", "first_head_kv_heads", "mean_pool_kv_heads", "select_kv_heads"),
)
SHARES = Mistake(
    "shares-memory",
    "the result shares arrays with params (the same arrays, or views of them): updating the "
    "converted layer in place changed the MHA checkpoint; copy every entry (np.copy)",
    exercises=("first_head_kv_heads", "mean_pool_kv_heads", "random_head_kv_heads"),
)
PICKS_ABSOLUTE = Mistake(
    "picks-absolute",
    "picks[g] was used as a head number; it is the position inside group g: keep head g*r + picks[g]",
    exercises=("first_head_kv_heads", "select_kv_heads"),
)
OTHER_DRAW = Mistake(
    "other-draw",
    "a head of each group, but not the ones np.random.default_rng(seed).integers(0, r, size=G) "
    "picks (a generator of its own from the seed, one draw of G integers)",
    exercises=("random_head_kv_heads",),
)
SAME_SEED = Mistake(
    "same-seed",
    "every layer used the same seed: layer i must use seed + i",
    exercises=("convert_model",),
)
NO_RESIDUAL = Mistake(
    "no-residual",
    "the residual connection is missing: each layer ADDS its output to its input, x = x + out",
    exercises=("gqa_model_forward",),
)
NO_POSITIONS = Mistake(
    "no-positions",
    "the position embeddings are missing: x = tok_emb[tokens] + pos_emb[:T]",
    exercises=("gqa_model_forward",),
)
NO_CAUSAL = Mistake(
    "no-causal",
    "the attention is not causal: pass causal_mask(T) to grouped_query_attention",
    exercises=("gqa_model_forward",),
)
TILED = Mistake(
    "tiled",
    "query head h read key/value head h % G instead of h // (H // G): use lesson 8's "
    "grouped_query_attention, which repeats each key/value head in place",
    exercises=("gqa_model_forward",),
)
ERROR_OVER_CONVERTED = Mistake(
    "error-over-converted",
    "the error was divided by the norm of the converted model's logits instead of the "
    "reference's (the MHA model's)",
    exercises=("conversion_table",),
)
ERROR_NOT_RELATIVE = Mistake(
    "error-not-relative",
    "the error is not divided by the reference's norm: it must be relative",
    exercises=("conversion_table",),
)
CACHE_H = Mistake(
    "cache-h",
    "the KV cache was counted with H heads, not the G key/value heads the converted model caches",
    exercises=("conversion_table",),
)
CACHE_BATCH = Mistake(
    "cache-batch",
    "the KV cache was counted for the whole batch; it is the cache of ONE sequence of T tokens",
    exercises=("conversion_table",),
)


# ---------------------------------------------------------------- helpers for the checks
LETTERS = {
    "w_q": "D HK",
    "w_k": "D GK",
    "w_v": "D GK",
    "w_o": "HK D",
    "b_q": "HK",
    "b_k": "GK",
    "b_v": "GK",
    "b_o": "D",
}


def check_layer(result, expected, params, n_heads, n_kv_heads, what, extra=None):
    """The learner's converted layer: a dict with the expected keys, each array right.
    ``extra`` maps a Mistake to a whole wrong layer (a dict, or a callable giving one)."""
    if not isinstance(result, dict):
        kind = "None (is a `return` missing?)" if result is None else type(result).__name__
        raise AssertionError(f"{what} returned {kind}; expected a dict like params.")
    for name in params:
        if name not in result:
            mistake = BIAS_DROPPED.format(name=name)
            raise KnownMistake(f"{what} has no {name!r}.", mistake)
    for name in result:
        if name not in params:
            mistake = BIAS_ADDED.format(name=name)
            raise KnownMistake(f"{what} has {name!r}, which params did not have.", mistake)
    wrong_layers = {
        MODULO: lambda: convert_loop(params, n_heads, n_kv_heads, modulo_groups(n_heads, n_kv_heads)),
        FIRST_NOT_MEAN: lambda: select_loop(params, n_heads, n_kv_heads, [0] * n_kv_heads),
        SUM_NOT_MEAN: lambda: convert_loop(params, n_heads, n_kv_heads, combine=sum),
        **(extra or {}),
    }
    pooled_all = lambda: convert_loop(params, n_heads, n_kv_heads, pool=("q", "k", "v", "o"))  # noqa: E731
    for name, want in expected.items():
        if want is None:
            if result[name] is not None:
                raise AssertionError(f"{what}[{name!r}] should stay None, as in params.")
            continue
        mistakes = {
            mistake: (lambda layer=layer, name=name: (layer() if callable(layer) else layer)[name])
            for mistake, layer in wrong_layers.items()
        }
        if name in ("w_q", "b_q"):
            mistakes[POOLED_Q] = lambda name=name: pooled_all()[name]
        if name == "w_o":
            mistakes[POOLED_O] = lambda: pooled_all()["w_o"]
        if name in ("w_k", "w_v", "b_k", "b_v") and n_kv_heads < n_heads:
            mistakes[NOT_POOLED.format(name=name)] = params[name]
        check_array(
            result[name],
            want,
            what=f"{what}[{name!r}]",
            dims=LETTERS[name],
            mistakes=mistakes,
        )


def check_raises_value_error(call, what, numbers, example, why=""):
    """The learner's code must raise ValueError with a message that names the numbers;
    ``why`` says what is wrong with the arguments (shown when nothing was raised)."""
    try:
        call()
    except LearnerError as error:
        text = str(error)
        lines = text.splitlines()
        starts = [i for i, line in enumerate(lines) if line.startswith("ValueError")]
        if not starts:
            raise AssertionError(f"{what} must raise ValueError, but it raised:\n{text}") from None
        message = "\n".join(lines[starts[-1] :])
        named = all(re.search(rf"(?<![\d.]){re.escape(str(n))}(?![\d.])", message) for n in numbers)
        raised_here = starts[-1] > 0 and lines[starts[-1] - 1].strip().startswith("raise")
        explains = raised_here or re.search(r"divis|divid|multiple|at least|column|wide|width", message, re.I)
        if not (named and explains):
            raise AssertionError(
                f"{what} raised {message!r}, but it must raise ValueError with a message that "
                f"names the numbers, e.g. ValueError({example!r}). (An error numpy raises later, "
                "while reshaping, does not count: check the sizes first.)"
            ) from None
        return
    because = f" ({why})" if why else ""
    raise AssertionError(
        f"{what} returned a result, but it must raise ValueError{because}, e.g. ValueError({example!r})."
    )


def refusals(lesson, name, more=lambda n_kv_heads: ()):
    """The size checks every conversion shares: G < 1, G not dividing H, a w_k not H*K wide.
    ``more(G)``: the arguments after n_kv_heads (picks of the right length, a seed)."""
    # Under an instructor's secret: other params, other G that do not divide H, another G < 0
    # and another G for the (D, G*K) key weights.
    v = variation("sizes refused")
    not_dividing_6, not_dividing_8, negative = v.pick((4, 5)), v.pick((3, 5, 6, 7)), v.pick((-2, -1, -3))
    n_gqa = v.pick((G, 2, 1))
    r = rng(90)
    params = mha_params(r)
    call = getattr(lesson, name)
    g = not_dividing_6
    check_raises_value_error(
        lambda: call(params, H, g, *more(g)),
        f"{name}(params, n_heads=6, n_kv_heads={g})",
        (6, g),
        f"n_heads=6 is not divisible by n_kv_heads={g}",
        f"G = {g} does not divide H = 6: the heads cannot be cut into groups of equal size",
    )
    params8 = mha_params(r, n_heads=8, k=3)
    g = not_dividing_8
    check_raises_value_error(
        lambda: call(params8, 8, g, *more(g)),
        f"{name}(params of 8 heads, n_heads=8, n_kv_heads={g})",
        (8, g),
        f"n_heads=8 is not divisible by n_kv_heads={g}",
        f"G = {g} does not divide H = 8: the heads cannot be cut into groups of equal size",
    )
    for bad in (0, negative):
        check_raises_value_error(
            lambda bad=bad: call(params, H, bad, *more(bad)),
            f"{name}(params, n_heads=6, n_kv_heads={bad})",
            (bad,),
            f"n_kv_heads={bad} must be at least 1",
            "a layer needs at least one key/value head",
        )
    g = n_gqa
    gqa = dict(params, w_k=params["w_k"][:, : g * K], b_k=params["b_k"][: g * K])
    check_raises_value_error(
        lambda: call(gqa, H, g, *more(g)),
        f"{name}(params whose w_k is already (D, G*K) = (5, {g * K}), n_heads=6, n_kv_heads={g})",
        (g * K, 24),
        f"w_k has {g * K} columns; an MHA layer with n_heads=6 heads of width K=4 has H*K=24",
        "w_k is not an MHA layer's H*K = 24 columns wide",
    )


def check_copies(lesson, method, params, n_heads, n_kv_heads, expected):
    """fine_tune_step updates the learner's conversion in place: params must not change."""
    what = (
        f"fine_tune_step(params, {n_heads}, {n_kv_heads}, {method!r}) "
        "(your conversion, then w -= 0.5 in place)"
    )
    result = lesson.fine_tune_step(params, n_heads, n_kv_heads, method)
    changed = [label.replace("argument 1", "params") for label in lesson.mutated]
    back = result[1] if isinstance(result, (tuple, list)) and len(result) == 2 else None
    if isinstance(back, dict) and not changed:
        for name, value in params.items():
            if name not in back or not np.array_equal(np.asarray(back[name]), value):
                changed.append(f"params[{name!r}]")
        changed += [f"params[{name!r}] (added)" for name in back if name not in params]
    if changed:
        raise KnownMistake(
            f"{what} changed params ({', '.join(changed)}).",
            SHARES,
        )
    if back is None or not isinstance(result[0], dict):
        raise AssertionError(
            f"{what} did not return (converted, params): fine_tune_step is given in the lesson "
            "file; restore it as it was (course reset keeps your other functions only if you copy them)."
        )
    stepped = {name: (None if w is None else w - 0.5) for name, w in expected.items()}
    for name, want in stepped.items():
        got = result[0].get(name)
        if want is None or not isinstance(got, np.ndarray) or got.shape != want.shape:
            continue  # the conversion itself is graded elsewhere
        if np.allclose(got, want + 0.5) and not np.allclose(got, want):
            raise AssertionError(
                f"{what}: the converted arrays were not updated in place; fine_tune_step is given "
                "in the lesson file, restore it as it was."
            )


# ---------------------------------------------------------------- mean_pool_kv_heads
@exercise("mean_pool_kv_heads")
class TestMeanPool:
    def test_w_k_and_w_v_shrink_to_g_heads_and_w_q_w_o_keep_h(self, lesson):
        """w_k and w_v shrink to G heads, (D, G*K); w_q and w_o keep H"""
        params = mha_params(rng(1))
        what = "mean_pool_kv_heads(params (D=5, H*K=24), n_heads=6, n_kv_heads=3)"
        result = lesson.mean_pool_kv_heads(params, H, G)
        check_layer(result, convert_loop(params, H, G), params, H, G, what)

    @hand_checked
    def test_two_heads_pooled_into_one_by_hand(self, lesson):
        """two heads pooled into one by hand: the mean of their columns"""
        # H = 2 heads of width K = 1, G = 1: the key head is the mean of the two columns
        # Under an instructor's secret: the key/value numbers scaled by s and shifted by c > 0
        # (the mean goes to mean * s + c, the sum to sum * s + 2c), the two heads swapped.
        v = variation("two heads pooled by hand")
        s, c, order = v.scale(), v.shift(values=(1, 2, 3)), v.permutation(2)

        def kv(row):
            return np.array(row) * s + c

        params = {
            "w_q": np.array([[1.0, 2.0]])[:, order],
            "w_k": kv([[2.0, 6.0]])[:, order],
            "w_v": kv([[-1.0, 3.0]])[:, order],
            "w_o": np.array([[1.0], [1.0]])[order],
            "b_k": kv([1.0, 0.0])[order],
        }
        result = lesson.mean_pool_kv_heads(params, 2, 1)
        what = (
            f"mean_pool_kv_heads of w_k {params['w_k'].tolist()}, w_v {params['w_v'].tolist()}, "
            f"b_k {params['b_k'].tolist()} (H=2, K=1) to G=1"
        )
        expected = dict(params, w_k=kv([[4.0]]), w_v=kv([[1.0]]), b_k=kv([0.5]))
        summed = dict(params, w_k=kv([[8.0]]) + c, w_v=kv([[2.0]]) + c, b_k=kv([1.0]) + c)
        check_layer(result, expected, params, 2, 1, what, extra={SUM_NOT_MEAN: summed})

    def test_an_entry_that_is_none_is_kept_as_none(self, lesson):
        """an entry that is None (b_q, b_k) is kept as None"""
        # A checkpoint without a query bias or key bias may store None for it: kept as it is.
        params = dict(mha_params(rng(3)), b_q=None, b_k=None)
        what = "mean_pool_kv_heads(params with b_q = None and b_k = None, n_heads=6, n_kv_heads=3)"
        check_layer(lesson.mean_pool_kv_heads(params, H, G), convert_loop(params, H, G), params, H, G, what)

    def test_consecutive_heads_are_pooled_not_heads_g_g_plus_g(self, lesson):
        """consecutive heads are pooled, not heads g, g + G, ... (h % G)"""
        # head h's key columns are all h: the pooled head g must hold the mean of its group
        # Under an instructor's secret: head h filled with s*h + c instead.
        v = variation("key head h filled with h")
        s, c = v.scale(), v.shift()
        params = mha_params(rng(2))
        numbers = np.arange(H, dtype=np.float64) * s + c
        params["w_k"] = np.repeat(numbers, K)[None, :].repeat(D, axis=0)
        expected = convert_loop(params, H, G)  # kv heads 0.5, 2.5, 4.5 (modulo: 1.5, 2.5, 3.5)
        number = "the number h" if not v.secret else f"{s:g}*h {'-' if c < 0 else '+'} {abs(c):g}"
        result = lesson.mean_pool_kv_heads(params, H, G)
        check_layer(
            result,
            expected,
            params,
            H,
            G,
            f"mean_pool_kv_heads(params with key head h filled with {number}, n_heads=6, n_kv_heads=3)",
        )

    def test_groups_of_three(self, lesson):
        """groups of three heads: H = 6, G = 2"""
        params = mha_params(rng(3))
        result = lesson.mean_pool_kv_heads(params, H, 2)
        check_layer(result, convert_loop(params, H, 2), params, H, 2, "mean_pool_kv_heads(params, 6, 2)")

    def test_one_group_is_multi_query_attention(self, lesson):
        """one group (G = 1) is multi-query attention"""
        params = mha_params(rng(4))
        result = lesson.mean_pool_kv_heads(params, H, 1)
        check_layer(result, convert_loop(params, H, 1), params, H, 1, "mean_pool_kv_heads(params, 6, 1)")

    def test_g_equal_to_h_gives_equal_arrays(self, lesson):
        """G = H gives arrays equal to params"""
        params = mha_params(rng(5))
        result = lesson.mean_pool_kv_heads(params, H, H)
        check_layer(result, params, params, H, H, "mean_pool_kv_heads(params, 6, 6)")

    def test_missing_biases_stay_missing(self, lesson):
        """missing biases stay missing (none at all, or no b_q and b_v)"""
        params = mha_params(rng(6), bias=False)
        result = lesson.mean_pool_kv_heads(params, H, G)
        check_layer(
            result,
            convert_loop(params, H, G),
            params,
            H,
            G,
            "mean_pool_kv_heads(params without biases, 6, 3)",
        )
        partial = mha_params(rng(7))
        del partial["b_v"], partial["b_q"]
        result = lesson.mean_pool_kv_heads(partial, H, G)
        check_layer(
            result,
            convert_loop(partial, H, G),
            partial,
            H,
            G,
            "mean_pool_kv_heads(params without b_q and b_v, 6, 3)",
        )

    def test_float32_stays_float32(self, lesson):
        """float32 params stay float32"""
        params = mha_params(rng(8), dtype=np.float32)
        result = lesson.mean_pool_kv_heads(params, H, G)
        check_layer(
            result, convert_loop(params, H, G), params, H, G, "mean_pool_kv_heads(float32 params, 6, 3)"
        )

    def test_params_are_left_unchanged(self, lesson):
        """params are left unchanged"""
        params = mha_params(rng(9))
        lesson.mean_pool_kv_heads(params, H, G)
        check_not_modified(lesson, "mean_pool_kv_heads(params, 6, 3)")

    def test_the_result_holds_copies_not_views_of_params(self, lesson):
        """the result holds copies, not views, of params"""
        params = mha_params(rng(10))
        for n_kv_heads in (G, H):
            check_copies(lesson, "mean", params, H, n_kv_heads, convert_loop(params, H, n_kv_heads))

    def test_sizes_that_do_not_fit_are_refused(self, lesson):
        """sizes that do not fit raise ValueError (G < 1, H % G != 0, w_k)"""
        refusals(lesson, "mean_pool_kv_heads")

    @given(
        n_kv_heads=st.integers(1, 3),
        r=st.integers(1, 3),
        k=st.integers(1, 3),
        d=st.integers(1, 4),
        bias=st.booleans(),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_any_sizes_match_the_loop(self, lesson, n_kv_heads, r, k, d, bias, seed):
        """any sizes match a group-by-group loop"""
        params = mha_params(rng(seed), d=d, n_heads=n_kv_heads * r, k=k, bias=bias)
        n_heads = n_kv_heads * r
        result = lesson.mean_pool_kv_heads(params, n_heads, n_kv_heads)
        check_layer(
            result,
            convert_loop(params, n_heads, n_kv_heads),
            params,
            n_heads,
            n_kv_heads,
            f"mean_pool_kv_heads(params (D={d}, K={k}, bias={bias}), "
            f"n_heads={n_heads}, n_kv_heads={n_kv_heads})",
        )


# ---------------------------------------------------------------- select_kv_heads
@exercise("select_kv_heads")
class TestSelect:
    def test_one_head_of_each_group_is_kept(self, lesson):
        """one head of each group is kept: picks=[1, 0, 1] keeps heads 1, 2, 5"""
        # Under an instructor's secret: other picks (never all first heads).
        params = mha_params(rng(20))
        picks = varied_picks("picks of groups of two", [1, 0, 1], H, G)
        result = lesson.select_kv_heads(params, H, G, picks)
        check_layer(
            result,
            select_loop(params, H, G, picks),
            params,
            H,
            G,
            f"select_kv_heads(params, 6, 3, picks={picks.tolist()}) (heads {heads_kept(picks, H, G)})",
            extra={PICKS_ABSOLUTE: lambda: select_loop(params, H, G, picks, absolute=True)},
        )

    def test_groups_of_three_and_no_biases(self, lesson):
        """groups of three and no biases: picks=[2, 1] keeps heads 2, 4"""
        # Under an instructor's secret: other picks (never all first heads).
        params = mha_params(rng(21), bias=False)
        picks = varied_picks("picks of groups of three", [2, 1], H, 2)
        result = lesson.select_kv_heads(params, H, 2, picks)
        check_layer(
            result,
            select_loop(params, H, 2, picks),
            params,
            H,
            2,
            f"select_kv_heads(params without biases, 6, 2, picks={picks.tolist()}) "
            f"(heads {heads_kept(picks, H, 2)})",
            extra={PICKS_ABSOLUTE: lambda: select_loop(params, H, 2, picks, absolute=True)},
        )

    def test_params_are_left_unchanged(self, lesson):
        """params are left unchanged"""
        # Under an instructor's secret: other params and picks.
        params = mha_params(rng(22))
        picks = varied_picks("picks of an unchanged params", [0, 1, 0], H, G)
        lesson.select_kv_heads(params, H, G, picks)
        check_not_modified(lesson, f"select_kv_heads(params, 6, 3, {picks.tolist()})")

    def test_sizes_and_picks_that_do_not_fit_are_refused(self, lesson):
        """sizes, and picks not G integers in 0 .. r-1, raise ValueError"""
        # Under an instructor's secret: other params, the wrong pick elsewhere and other numbers.
        v = variation("picks refused")
        where, too_big, negative = v.integers(0, 3, 1), v.pick((2, 4, 5)), v.pick((-1, -2, -3))
        too_few = v.pick(([0, 1], [1, 0], [1, 1]))
        params = mha_params(rng(23))
        refusals(
            lesson, "select_kv_heads", lambda n_kv_heads: (np.zeros(max(n_kv_heads, 0), dtype=np.int64),)
        )
        for bad in (too_big, None, negative):
            picks, numbers = ([0] * G, (bad,)) if bad is not None else (too_few, (3,))
            if bad is not None:
                picks[where] = bad
            check_raises_value_error(
                lambda picks=picks: lesson.select_kv_heads(params, H, G, np.array(picks)),
                f"select_kv_heads(params, 6, 3, picks={picks}) (3 picks in 0 .. 1 expected)",
                numbers,
                f"picks must be n_kv_heads=3 integers in 0 .. 1, got {picks}",
            )


# ---------------------------------------------------------------- first_head_kv_heads
@exercise("first_head_kv_heads")
class TestFirstHead:
    def test_the_first_head_of_each_group_is_kept(self, lesson):
        """the first head of each group is kept, for G = 3, 2, 1 and 6"""
        for n_kv_heads in (G, 2, 1, H):
            params = mha_params(rng(30 + n_kv_heads))
            result = lesson.first_head_kv_heads(params, H, n_kv_heads)
            check_layer(
                result,
                select_loop(params, H, n_kv_heads, [0] * n_kv_heads),
                params,
                H,
                n_kv_heads,
                f"first_head_kv_heads(params, 6, {n_kv_heads})",
                extra={
                    MEAN_NOT_FIRST: lambda params=params, n=n_kv_heads: convert_loop(params, H, n),
                    PICKS_ABSOLUTE: lambda params=params, n=n_kv_heads: select_loop(
                        params, H, n, [0] * n, absolute=True
                    ),
                },
            )

    def test_the_result_holds_copies_not_views_of_params(self, lesson):
        """the result holds copies, not views, of params"""
        params = mha_params(rng(35))
        for n_kv_heads in (G, H):
            check_copies(
                lesson, "first", params, H, n_kv_heads, select_loop(params, H, n_kv_heads, [0] * n_kv_heads)
            )

    def test_sizes_that_do_not_fit_are_refused(self, lesson):
        """sizes that do not fit raise ValueError (G < 1, H % G != 0, w_k)"""
        refusals(lesson, "first_head_kv_heads")


# ---------------------------------------------------------------- random_head_kv_heads
@exercise("random_head_kv_heads")
class TestRandomHead:
    def check(self, lesson, params, n_kv_heads, seed):
        result = lesson.random_head_kv_heads(params, H, n_kv_heads, seed)
        r = H // n_kv_heads
        others = {
            OTHER_DRAW: lambda: next(
                (
                    layer
                    for picks in itertools.product(range(r), repeat=n_kv_heads)
                    for layer in [select_loop(params, H, n_kv_heads, picks)]
                    if isinstance(result, dict)
                    and all(
                        isinstance(result.get(n), np.ndarray)
                        and result[n].shape == layer[n].shape
                        and np.allclose(result[n], layer[n])
                        for n in ("w_k", "w_v")
                    )
                ),
                None,
            )
        }
        check_layer(
            result,
            select_loop(params, H, n_kv_heads, rng_picks(H, n_kv_heads, seed)),
            params,
            H,
            n_kv_heads,
            f"random_head_kv_heads(params, 6, {n_kv_heads}, seed={seed})",
            extra=others,
        )

    def test_the_heads_np_random_default_rng_seed_picks_are_kept(self, lesson):
        """the heads np.random.default_rng(seed).integers picks are kept"""
        # Under an instructor's secret: other params and seeds (whose picks are not all first heads).
        params = mha_params(rng(40))
        for seed in (0, 1, 7):
            self.check(
                lesson, params, G, varied_seed(f"random heads seed {seed}", seed, some_head_not_first(H, G))
            )

    def test_groups_of_three_and_of_six(self, lesson):
        """groups of three (G = 2) and of six (G = 1)"""
        # Under an instructor's secret: other params and seeds (whose picks are not all first heads).
        params = mha_params(rng(41))
        self.check(lesson, params, 2, varied_seed("random heads G=2", 3, some_head_not_first(H, 2)))
        self.check(lesson, params, 1, varied_seed("random heads G=1", 4, some_head_not_first(H, 1)))

    def test_the_same_seed_keeps_the_same_heads(self, lesson):
        """the same seed keeps the same heads"""
        # Under an instructor's secret: other params and seed.
        params = mha_params(rng(42))
        seed = varied_seed("the same seed twice", 5)
        first = lesson.random_head_kv_heads(params, H, G, seed)
        second = lesson.random_head_kv_heads(params, H, G, seed)
        if not (isinstance(first, dict) and isinstance(second, dict)):
            raise AssertionError(f"random_head_kv_heads(params, 6, 3, {seed}) did not return a dict.")
        for name in ("w_k", "w_v"):
            check_array(
                np.asarray(second.get(name)),
                np.asarray(first.get(name)),
                what=f"a second random_head_kv_heads(params, 6, 3, seed={seed})[{name!r}] "
                "(the same seed must keep the same heads)",
                dims="D GK",
            )

    def test_the_result_holds_copies_not_views_of_params(self, lesson):
        """the result holds copies, not views, of params"""
        params = mha_params(rng(43))
        check_copies(lesson, "random", params, H, G, select_loop(params, H, G, rng_picks(H, G, 0)))
        check_copies(lesson, "random", params, H, H, params)

    def test_sizes_that_do_not_fit_are_refused(self, lesson):
        """sizes that do not fit raise ValueError (G < 1, H % G != 0, w_k)"""
        refusals(lesson, "random_head_kv_heads", lambda n_kv_heads: (0,))


# ---------------------------------------------------------------- convert_model
def check_model(result, expected, model, n_heads, n_kv_heads, what, extra=None):
    if not isinstance(result, dict) or not isinstance(result.get("layers"), (list, tuple)):
        raise AssertionError(f"{what} did not return a model dict with a list of 'layers'.")
    if len(result["layers"]) != len(expected["layers"]):
        raise AssertionError(
            f"{what} has {len(result['layers'])} layers; expected {len(expected['layers'])}."
        )
    letters = {"tok_emb": "V D", "pos_emb": "L D", "unembed": "D V", "b_unembed": "V"}
    for name, want in expected.items():
        if name != "layers":
            check_array(result.get(name), want, what=f"{what}[{name!r}]", dims=letters[name])
    for i, (layer, want) in enumerate(zip(result["layers"], expected["layers"], strict=True)):
        wrong = {m: (lambda f=f, i=i: f()["layers"][i]) for m, f in (extra or {}).items()}
        check_layer(
            layer, want, model["layers"][i], n_heads, n_kv_heads, f"{what}['layers'][{i}]", extra=wrong
        )


@exercise("convert_model")
class TestConvertModel:
    def test_every_layer_is_mean_pooled_and_the_embeddings_copied(self, lesson):
        """every layer is mean-pooled and the embeddings copied"""
        model = mha_model(rng(50))
        result = lesson.convert_model(model, M_H, 2, "mean")
        check_model(
            result,
            convert_model_loop(model, M_H, 2, "mean"),
            model,
            M_H,
            2,
            "convert_model(model, 4, 2, 'mean')",
        )

    def test_first_and_modulo(self, lesson):
        """methods 'first' and 'modulo' convert every layer"""
        model = mha_model(rng(51))
        for method in ("first", "modulo"):
            result = lesson.convert_model(model, M_H, 2, method)
            check_model(
                result,
                convert_model_loop(model, M_H, 2, method),
                model,
                M_H,
                2,
                f"convert_model(model, 4, 2, {method!r})",
            )

    def test_random_uses_seed_plus_the_layer_index(self, lesson):
        """'random' uses seed + i for layer i"""
        # Under an instructor's secret: another model and seeds (layers 0 and 1 keep different
        # heads, not all first ones).
        model = mha_model(rng(52))

        def fits(seed):
            picks = [rng_picks(M_H, 1, seed + i) for i in range(M_LAYERS)]
            return bool((picks[0] != picks[1]).any()) and any(p.any() for p in picks)

        for seed in (
            varied_seed("convert_model seed 0", 0, fits),
            varied_seed("convert_model seed 3", 3, fits),
        ):
            result = lesson.convert_model(model, M_H, 1, "random", seed)
            check_model(
                result,
                convert_model_loop(model, M_H, 1, "random", seed),
                model,
                M_H,
                1,
                f"convert_model(model, 4, 1, 'random', seed={seed})",
                extra={
                    SAME_SEED: lambda seed=seed: convert_model_loop(
                        model, M_H, 1, "random", seed, same_seed=True
                    )
                },
            )

    def test_the_model_is_left_unchanged(self, lesson):
        """the model is left unchanged"""
        model = mha_model(rng(53))
        lesson.convert_model(model, M_H, 2, "mean")
        check_not_modified(lesson, "convert_model(model, 4, 2, 'mean')")

    def test_an_unknown_method_is_refused(self, lesson):
        """an unknown method ('median') raises ValueError"""
        model = mha_model(rng(54))
        check_raises_value_error(
            lambda: lesson.convert_model(model, M_H, 2, "median"),
            "convert_model(model, 4, 2, 'median')",
            ("median",),
            "method='median' is not one of ('mean', 'first', 'random', 'modulo')",
        )


# ---------------------------------------------------------------- gqa_model_forward
def gqa_model(r, n_kv_heads, bias=True):
    """A random model whose layers are already grouped-query (w_k, w_v (D, G*K))."""
    model = mha_model(r, bias=bias)
    model["layers"] = [select_loop(p, M_H, n_kv_heads, [0] * n_kv_heads) for p in model["layers"]]
    for layer in model["layers"]:  # fresh key/value weights, not copies of the first heads
        for name in ("w_k", "w_v"):
            layer[name] = r.standard_normal(layer[name].shape) * 2 / math.sqrt(M_D)
    return model


def forward_mistakes(model, tokens, n_heads, n_kv_heads):
    mistakes = {
        NO_RESIDUAL: lambda: forward_loop(model, tokens, n_heads, n_kv_heads, residual=False),
        NO_POSITIONS: lambda: forward_loop(model, tokens, n_heads, n_kv_heads, positions=False),
        NO_CAUSAL: lambda: forward_loop(model, tokens, n_heads, n_kv_heads, causal=False),
    }
    if 1 < n_kv_heads < n_heads:
        mistakes[TILED] = lambda: forward_loop(
            model, tokens, n_heads, n_kv_heads, kv_head=lambda h: h % n_kv_heads
        )
    return mistakes


@exercise("gqa_model_forward")
class TestForward:
    def test_the_mha_model_with_g_equal_to_h(self, lesson):
        """the MHA model with G = H = 4: logits (B, T, V)"""
        r = rng(60)
        model = mha_model(r)
        tokens, _ = task(r)
        check_array(
            lesson.gqa_model_forward(model, tokens, M_H, M_H),
            forward_loop(model, tokens, M_H, M_H),
            what="gqa_model_forward(MHA model, tokens (B, T) = (3, 6), 4, 4)",
            dims="B T V",
            mistakes=forward_mistakes(model, tokens, M_H, M_H),
        )

    def test_a_grouped_query_model(self, lesson):
        """a grouped-query model, G = 2 and G = 1"""
        r = rng(61)
        for n_kv_heads in (2, 1):
            model = gqa_model(r, n_kv_heads)
            tokens, _ = task(r)
            check_array(
                lesson.gqa_model_forward(model, tokens, M_H, n_kv_heads),
                forward_loop(model, tokens, M_H, n_kv_heads),
                what=f"gqa_model_forward(model with G={n_kv_heads}, tokens (3, 6), 4, {n_kv_heads})",
                dims="B T V",
                mistakes=forward_mistakes(model, tokens, M_H, n_kv_heads),
            )

    def test_shorter_sequences_use_the_first_positions(self, lesson):
        """shorter sequences (T = 3) use the first positions of pos_emb"""
        r = rng(62)
        model = gqa_model(r, 2, bias=False)
        tokens, _ = task(r, b=2, t=3)
        check_array(
            lesson.gqa_model_forward(model, tokens, M_H, 2),
            forward_loop(model, tokens, M_H, 2),
            what="gqa_model_forward(model without biases, tokens (2, 3), 4, 2)",
            dims="B T V",
            mistakes=forward_mistakes(model, tokens, M_H, 2),
        )

    def test_the_model_is_left_unchanged(self, lesson):
        """the model is left unchanged"""
        r = rng(63)
        model = gqa_model(r, 2)
        tokens, _ = task(r)
        lesson.gqa_model_forward(model, tokens, M_H, 2)
        check_not_modified(lesson, "gqa_model_forward(model, tokens, 4, 2)")


# ---------------------------------------------------------------- conversion_table
@remembered
def table_loop(model, tokens, targets, n_heads, counts, methods, seed=0):
    reference = forward_loop(model, tokens, n_heads, n_heads)
    n_layers, k = len(model["layers"]), model["layers"][0]["w_q"].shape[1] // n_heads
    shape = (len(methods), len(counts))
    out = {"relative_error": np.zeros(shape), "loss": np.zeros(shape), "accuracy": np.zeros(shape)}
    logits_of = {}
    for i, method in enumerate(methods):
        for j, n_kv_heads in enumerate(counts):
            converted = convert_model_loop(model, n_heads, n_kv_heads, method, seed)
            logits = forward_loop(converted, tokens, n_heads, n_kv_heads)
            logits_of[i, j] = logits
            out["relative_error"][i, j] = norm(logits - reference) / norm(reference)
            out["loss"][i, j], out["accuracy"][i, j] = loss_accuracy_loop(logits, targets)
    out["cache_bytes"] = np.array(
        [2 * tokens.shape[1] * n_layers * g * k * 2 for g in counts], dtype=np.int64
    )
    return out, reference, logits_of


@exercise("conversion_table")
class TestConversionTable:
    def table(self, lesson, seed, methods, counts):
        # Under an instructor's secret: another model, tokens and targets, and another seed.
        r = rng(seed)
        model = mha_model(r)
        tokens, targets = task(r)
        seed_arg = varied_seed(f"conversion_table seed {seed}", 0)
        result = lesson.conversion_table(model, tokens, targets, M_H, counts, methods, seed_arg)
        what = f"conversion_table(model, tokens (3, 6), targets, 4, {counts}, {methods}, {seed_arg})"
        if not isinstance(result, dict):
            raise AssertionError(f"{what} returned {type(result).__name__}; expected a dict of four arrays.")
        missing = [n for n in ("relative_error", "loss", "accuracy", "cache_bytes") if n not in result]
        if missing:
            raise AssertionError(f"{what} has no {', '.join(map(repr, missing))}.")
        expected, reference, logits_of = table_loop(model, tokens, targets, M_H, counts, methods, seed_arg)
        return result, expected, reference, logits_of, what

    def test_errors_losses_and_accuracies_of_each_method_and_g(self, lesson):
        """relative errors, losses and accuracies of each method and G"""
        methods, counts = ("mean", "first", "modulo"), (1, 2, 4)
        result, expected, reference, logits_of, what = self.table(lesson, 70, methods, counts)
        over_converted = np.array(
            [[norm(logits_of[i, j] - reference) / norm(logits_of[i, j]) for j in range(3)] for i in range(3)]
        )
        absolute = np.array([[norm(logits_of[i, j] - reference) for j in range(3)] for i in range(3)])
        check_array(
            result["relative_error"],
            expected["relative_error"],
            what=f"{what}['relative_error']",
            dims="M N",
            mistakes={ERROR_OVER_CONVERTED: over_converted, ERROR_NOT_RELATIVE: absolute},
        )
        for name in ("loss", "accuracy"):
            check_array(result[name], expected[name], what=f"{what}[{name!r}]", dims="M N")

    def test_the_kv_cache_of_one_sequence_with_g_heads(self, lesson):
        """cache_bytes: the KV cache of one sequence with G heads"""
        counts = (1, 2, 4)
        result, expected, _, _, what = self.table(lesson, 71, ("mean",), counts)
        per_g = expected["cache_bytes"]
        check_array(
            np.asarray(result["cache_bytes"]),
            per_g,
            what=f"{what}['cache_bytes']",
            dims="N",
            mistakes={
                CACHE_H: np.full(3, per_g[-1] * M_H // counts[-1]),
                CACHE_BATCH: per_g * M_B,
            },
        )

    def test_g_equal_to_h_changes_nothing(self, lesson):
        """G = H changes nothing: relative error 0 for every method"""
        result, expected, _, _, what = self.table(lesson, 72, ("mean", "first", "random"), (4,))
        check_array(
            result["relative_error"],
            np.zeros((3, 1)),
            what=f"{what}['relative_error']",
            dims="M N",
            atol=1e-9,
        )
        check_array(result["accuracy"], expected["accuracy"], what=f"{what}['accuracy']", dims="M N")

    def test_random_rows_use_the_seed(self, lesson):
        """'random' rows use the seed"""
        result, expected, _, _, what = self.table(lesson, 73, ("random",), (1, 2))
        for name in ("relative_error", "loss"):
            check_array(result[name], expected[name], what=f"{what}[{name!r}]", dims="M N")

    def test_the_inputs_are_left_unchanged(self, lesson):
        """the model, tokens and targets are left unchanged"""
        r = rng(74)
        model = mha_model(r)
        tokens, targets = task(r)
        lesson.conversion_table(model, tokens, targets, M_H, (2,), ("mean",), 0)
        check_not_modified(lesson, "conversion_table(model, tokens, targets, 4, (2,), ('mean',), 0)")
