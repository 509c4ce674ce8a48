"""Lesson 12: from multi-head to grouped-query attention.

The idea
--------
Lesson 8 built grouped-query attention (GQA): H query heads share G key/value heads, query head h
reading key/value head h // (H // G), and lesson 9 measured what that buys: a KV cache H / G times
smaller. But a model trained with multi-head attention (MHA) has H key heads and H value heads.
Training a GQA model from scratch costs as much as training the MHA model did. Ainslie et al.
(2023, "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head Checkpoints")
convert the trained MHA checkpoint instead, in two steps:

1. Conversion. Cut the H key heads into G groups of H // G consecutive heads, the groups lesson 8's
   attention will use, and replace each group by ONE head: the mean of its heads. The same for the
   value heads. The query heads and W_O stay as they are.
2. Uptraining. Continue training the converted model for a small fraction of the original
   pre-training steps (they use 5%) so that it adapts to the shared heads.

In formulas, with r = H // G heads per group and W_K,h the K columns of head h:

    W_K,g  =  (1 / r) * sum_{j=0}^{r-1}  W_K,(g*r + j)         g = 0 .. G-1
    b_K,g  =  (1 / r) * sum_{j=0}^{r-1}  b_K,(g*r + j)         and the same for W_V, b_V

    H = 4, G = 2:   kv head 0 = mean of heads 0, 1       read by query heads 0, 1
                    kv head 1 = mean of heads 2, 3       read by query heads 2, 3

Query head h then reads the mean of a group that contains its own old key/value head: for G = H
nothing changes, for G = 1 (multi-query attention, MQA) every query head reads the mean of all.

The groups must be lesson 8's, consecutive heads. Pooling heads 0 and 2 together (grouping by
h % G) gives arrays of the same shape, and lesson 8's attention then lets query head 1 read the
mean of heads 0 and 2, neither of which it was trained with. The table at the end of the lesson
shows what that costs.

The paper compares mean-pooling with two baselines: keeping the FIRST head of each group, and a
head initialised at random. For MQA (G = 1) after uptraining, mean-pooling worked best, then the
first head, then random: the more a conversion keeps of what the heads knew, the better.
Their headline (T5-XXL, averaged over summarisation, translation and question answering): MHA
scores 47.2 at 1.51 s per sample of inference, MQA 46.6 at 0.24 s, GQA with G = 8 groups 47.1 at
0.28 s, both uptrained with 5% of the pre-training steps. They also note that GQA is usable
right after conversion while MQA needs the uptraining.

What the tiny model can show
----------------------------
course.tiny_model is a 2-layer, 4-head, attention-only transformer trained on a copy task (lesson
10 found its previous-token and copy heads). Here you convert every layer to G = 1, 2 and 4
key/value heads with each method, run the converted model with your own lesson 8 attention, and
measure how far its logits move from the MHA model's, how much accuracy is left, and how small the
KV cache becomes (lesson 9). Our baselines are mean-pooling, the first head and a random head of
each group (the paper's random baseline initialises a new head at random; keeping one of the
group's heads is its cheap cousin). `course show 12 --map` draws the table, measured with your
functions.

What to expect, and what it means:

- Without uptraining, every conversion with G < H hurts this model badly: the logits move about
  as far as their own size, and the accuracy falls from about 0.96: at G = 1 to near chance
  (1/32 = 0.031), 0.044 to 0.055 for the three methods; at G = 2 less far, to 0.18 (mean), 0.25
  (first head) and 0.56 (random head), as measured for the table of `course show 12 --map` (500
  sequences). Four heads are few, and here they do very different jobs (a previous-token head,
  copy heads): the mean of two of them is neither. Which method comes out "best" before
  uptraining is close to noise; a lucky random head can beat the mean. The paper, too, only
  ranks the methods after uptraining, and where it found GQA reasonable right after conversion,
  this tiny model is not.
- The modulo grouping, pooled with the same mean, is worse still at G = 2, down to about chance:
  lesson 8's attention lets query head 1 read the mean of heads 0 and 2, and query head 2 the
  mean of heads 1 and 3, none of them its own. At G = 1 and G = 4 the two groupings make the same
  groups, so their rows agree.
- G = H changes nothing: the error is exactly 0. G = 1 caches H = 4 times less.
- After uptraining (tools/uptrain_gqa.py: 400 steps, 5% of the model's 8000 training steps; the
  results ship in course/tiny_model/gqa_uptraining.json and `course show 12 --map` draws them),
  the mean-pooled models get most of their accuracy back. When this lesson was written: at G = 1
  the mean-pooled model recovered to about 0.87 while the first-head and random-head models stayed
  below 0.5, the paper's order (mean > first > random); at G = 2 all three recovered to 0.91-0.95
  and the first head edged out the mean. The MHA model trained for the same 400 extra steps did not
  improve, so the recovery is the uptraining's, not extra training's.

What this lesson cannot show: the paper's benchmarks, a model whose heads are redundant enough
for a conversion to be nearly free, or anything at the scale where 64 query heads share 8.

Conventions (the same in every lesson)
--------------------------------------
    B batch    T positions    D model width    H query heads    G key/value heads (G divides H)
    K head width (D // H)    V vocabulary    r = H // G heads per group

- params is a lesson-6 parameter dict: w_q (D, H*K), w_k and w_v (D, H*K) for MHA or (D, G*K)
  for GQA, w_o (H*K, D), optional biases b_q, b_k, b_v (width of their weight), b_o (D,). Head h
  owns columns h*K:(h+1)*K. A bias that is absent stays absent.
- A model is a dict: tok_emb (V, D), pos_emb (L, D), unembed (D, V), b_unembed (V,) and layers,
  a list of parameter dicts, as course.tiny_model.load() returns it.
- The conversions return NEW dicts of NEW arrays (copies, never views of the input): an optimizer
  updating the converted weights in place must not change the MHA checkpoint. They never modify
  their inputs and keep their dtype. The grader can see a shared array only where an update
  would reach it: it runs the given fine_tune_step, which updates one converted layer in place,
  for the mean, first-head and random-head methods. It cannot see whether convert_model copies
  the embeddings and the unembedding: that part of the contract is yours to keep.

This lesson uses your causal_mask (lesson 4), grouped_query_attention (lesson 8, with your lessons
1, 3 and 5 inside) and kv_cache_bytes (lesson 9): finish those first.
"""

import numpy as np
from l04_masks import causal_mask  # your lesson 4
from l08_gqa import grouped_query_attention  # your lesson 8
from l09_kv_cache import kv_cache_bytes  # your lesson 9

IGNORE = -1  # a target that is not scored (course.tiny_model.IGNORE)


def mean_pool_kv_heads(params, n_heads, n_kv_heads):
    """Convert an MHA layer to GQA: each key/value head is the mean of a group of heads.

    params:     an MHA layer: w_q (D, H*K), w_k (D, H*K), w_v (D, H*K), w_o (H*K, D), optional
                b_q, b_k, b_v (H*K,), b_o (D,)
    n_heads:    H
    n_kv_heads: G, the key/value heads to keep; G divides H
    returns     a new dict: w_k and w_v (D, G*K), b_k and b_v (G*K,) when the input has them,
                every other entry an unchanged copy; key/value head g is the mean of heads
                g*r, ..., g*r + r - 1, r = H // G (lesson 8's groups)
    raises      ValueError naming the numbers when G < 1, G does not divide H, or w_k or w_v is
                not H*K wide (K = w_q.shape[1] // H)

    TODO:
      1. Check the sizes first: G >= 1, G divides H, and w_k and w_v have H*K columns with K the
         width of w_q divided by H. Raise a ValueError naming the numbers otherwise, e.g.
         "n_heads=6 is not divisible by n_kv_heads=4".
      2. Start the result as a copy of every entry of params: a new copy of each array, a value
         that is not an array (such as None) as it is. Copies, not the same arrays nor views of
         them: a caller who updates the result in place must not change params.
      3. For w_k and w_v, (D, H*K): view the columns as (D, G, r, K), group by group (head h is
         column block h, and heads g*r .. g*r + r - 1 are group g), average over the r axis
         -> (D, G, K), and flatten back to (D, G*K). Not (D, r, G, K): that groups heads
         g, g + G, ... (h % G), which lesson 8's attention does not use.
      4. For b_k and b_v, when present and not None, (H*K,): the same with (G, r, K) -> (G*K,).
      5. Return the new dict. W_Q, W_O and their biases are not pooled: the H query heads stay.
    """
    ### BEGIN SOLUTION
    # Reshaping the H*K columns to (G, r, K) puts head g*r + j at [g, j]: exactly lesson 8's
    # groups of r consecutive heads, the ones query heads g*r .. g*r + r - 1 will read. The mean
    # over the r axis pools each group. (A reshape to (r, G, K) instead would group heads
    # g, g + G, ...: the modulo grouping, which lesson 8's attention does not use.)
    # np.mean returns new arrays; every other entry is copied too, so nothing of the result
    # shares memory with params and an optimizer may update the result in place.
    H, G = n_heads, n_kv_heads
    if G < 1:
        raise ValueError(f"n_kv_heads={G} must be at least 1")
    if H % G:
        raise ValueError(f"n_heads={H} is not divisible by n_kv_heads={G}")
    K = params["w_q"].shape[1] // H
    for name in ("w_k", "w_v"):
        if params[name].shape[1] != H * K:
            raise ValueError(
                f"{name} has {params[name].shape[1]} columns; an MHA layer with n_heads={H} "
                f"heads of width K={K} has H*K={H * K}"
            )
    r = H // G  # heads per group
    out = {name: np.copy(value) if isinstance(value, np.ndarray) else value for name, value in params.items()}
    for name in ("w_k", "w_v"):
        w = params[name]
        D = w.shape[0]
        out[name] = w.reshape(D, G, r, K).mean(axis=2).reshape(D, G * K)  # (D, H*K) -> (D, G*K)
    for name in ("b_k", "b_v"):
        if params.get(name) is not None:
            out[name] = params[name].reshape(G, r, K).mean(axis=1).reshape(G * K)  # (H*K,) -> (G*K,)
    return out
    ### END SOLUTION


def select_kv_heads(params, n_heads, n_kv_heads, picks):
    """Convert an MHA layer to GQA by keeping ONE head of each group: head g*r + picks[g].

    params:     an MHA layer, as for mean_pool_kv_heads
    n_heads:    H
    n_kv_heads: G, divides H
    picks:      G integers in 0 .. r - 1, r = H // G: which head of group g to keep
    returns     a new dict like mean_pool_kv_heads's: key/value head g is original head
                g*r + picks[g], the SAME head for w_k, w_v, b_k and b_v
    raises      ValueError as mean_pool_kv_heads, and when picks is not G integers in 0 .. r - 1

    TODO:
      1. Check the sizes as in mean_pool_kv_heads, and that picks has G entries, integers each
         in 0 .. r - 1 (else a ValueError naming the numbers).
      2. Copy every entry of params, as in mean_pool_kv_heads.
      3. The kept heads: head g*r + picks[g] for g = 0 .. G-1, an integer array (G,).
      4. For w_k and w_v: view the columns as (D, H, K), take the kept heads on the H axis
         -> (D, G, K), flatten to (D, G*K). For b_k and b_v (when present): (H, K) -> (G, K)
         -> (G*K,). The same kept heads for all four: a head's key and value belong together.
         Make sure the result is a new array, not a view of params.
      5. Return the new dict.
    """
    ### BEGIN SOLUTION
    # Indexing with an integer array (heads) always copies, so the kept columns are new arrays
    # even when G = H. The same heads serve w_k, w_v and the biases: key and value of a kept
    # head belong together (the head's query was trained against that key AND that value).
    H, G = n_heads, n_kv_heads
    if G < 1:
        raise ValueError(f"n_kv_heads={G} must be at least 1")
    if H % G:
        raise ValueError(f"n_heads={H} is not divisible by n_kv_heads={G}")
    K = params["w_q"].shape[1] // H
    for name in ("w_k", "w_v"):
        if params[name].shape[1] != H * K:
            raise ValueError(
                f"{name} has {params[name].shape[1]} columns; an MHA layer with n_heads={H} "
                f"heads of width K={K} has H*K={H * K}"
            )
    r = H // G
    picks = np.asarray(picks)
    if (
        picks.shape != (G,)
        or not np.issubdtype(picks.dtype, np.integer)
        or (picks < 0).any()
        or (picks >= r).any()
    ):
        raise ValueError(f"picks must be n_kv_heads={G} integers in 0 .. {r - 1}, got {picks.tolist()}")
    heads = np.arange(G) * r + picks  # (G,): the head kept for each group
    out = {name: np.copy(value) if isinstance(value, np.ndarray) else value for name, value in params.items()}
    for name in ("w_k", "w_v"):
        w = params[name]
        D = w.shape[0]
        out[name] = w.reshape(D, H, K)[:, heads].reshape(D, G * K)  # (D, H*K) -> (D, G*K)
    for name in ("b_k", "b_v"):
        if params.get(name) is not None:
            out[name] = params[name].reshape(H, K)[heads].reshape(G * K)  # (H*K,) -> (G*K,)
    return out
    ### END SOLUTION


def first_head_kv_heads(params, n_heads, n_kv_heads):
    """The paper's first baseline: keep the first head of each group, heads 0, r, 2r, ...

    params, n_heads, n_kv_heads, returns and raises: as mean_pool_kv_heads.

    TODO:
      1. Return what your select_kv_heads makes of picks = G zeros, as integers (not floats):
         head g*r, the first of each group.
    """
    ### BEGIN SOLUTION
    return select_kv_heads(params, n_heads, n_kv_heads, np.zeros(max(n_kv_heads, 0), dtype=np.int64))
    ### END SOLUTION


def random_head_kv_heads(params, n_heads, n_kv_heads, seed):
    """A random head of each group, reproducible from seed.

    params, n_heads, n_kv_heads, returns and raises: as mean_pool_kv_heads.
    seed:   an int. The picks (the contract the grader checks): exactly
            np.random.default_rng(seed).integers(0, r, size=G), r = H // G, one draw from a
            generator of its own; then key/value head g is original head g*r + picks[g]

    TODO:
      1. Check G as in mean_pool_kv_heads (G >= 1 and G divides H) before drawing: r = H // G
         must exist.
      2. Draw the G picks as specified above: from a generator of its own, made from the seed,
         so that the same seed always keeps the same heads whatever ran before (numpy's global
         random state would depend on that). One draw of G integers in 0 .. r - 1.
      3. Return what your select_kv_heads makes of those picks.
    """
    ### BEGIN SOLUTION
    # A generator of its own, seeded here: the global np.random state would make the answer
    # depend on whatever ran before. One draw of G integers, one per group.
    H, G = n_heads, n_kv_heads
    if G < 1:
        raise ValueError(f"n_kv_heads={G} must be at least 1")
    if H % G:
        raise ValueError(f"n_heads={H} is not divisible by n_kv_heads={G}")
    picks = np.random.default_rng(seed).integers(0, H // G, size=G)  # (G,) in 0 .. r - 1
    return select_kv_heads(params, H, G, picks)
    ### END SOLUTION


def modulo_pool_kv_heads(params, n_heads, n_kv_heads):
    """Given (not an exercise): the WRONG grouping, for comparison. Key/value head g is the mean
    of heads g, g + G, g + 2G, ... (h % G), computed by your mean_pool_kv_heads on params whose
    key/value heads were reordered to put those heads side by side. Lesson 8's attention still
    lets query head h read key/value head h // r, so most query heads read a mean of heads they
    were not trained with."""
    H, G = n_heads, n_kv_heads
    order = np.argsort(np.arange(H) % G, kind="stable")  # G = 2, H = 4: heads 0, 2, 1, 3
    K = params["w_q"].shape[1] // H
    shuffled = dict(params)
    for name in ("w_k", "w_v", "b_k", "b_v"):
        value = params.get(name)
        if value is not None and value.shape[-1] == H * K:
            heads = value.reshape(*value.shape[:-1], H, K)[..., order, :]
            shuffled[name] = heads.reshape(value.shape)
    return mean_pool_kv_heads(shuffled, H, G)


def convert_model(model, n_heads, n_kv_heads, method="mean", seed=0):
    """Convert every layer of an MHA model to n_kv_heads key/value heads.

    model:      tok_emb (V, D), pos_emb (L, D), unembed (D, V), b_unembed (V,), layers: a list of
                MHA parameter dicts (as course.tiny_model.load() returns)
    n_heads:    H, the query heads of every layer
    n_kv_heads: G
    method:     "mean" (mean_pool_kv_heads), "first" (first_head_kv_heads), "random"
                (random_head_kv_heads with seed + i for layer i), "modulo" (modulo_pool_kv_heads)
    seed:       used by "random" only
    returns     a new model dict: the same keys, copies of the embeddings and unembedding, and
                layers the list of converted layers, in order
    raises      ValueError naming the method when it is none of the four

    TODO:
      1. If method is not one of "mean", "first", "random", "modulo", raise a ValueError that
         names it.
      2. Convert layer i with the method's function; for "random" pass seed + i, so that the
         layers do not all keep the same positions of their groups.
      3. Return a new dict: every entry of model except "layers" as a new copy of its array,
         and "layers" the list of converted layers, in order.
    """
    ### BEGIN SOLUTION
    # The embeddings and the unembedding are not touched by the conversion, but they are copied
    # all the same: the result is a model of its own, safe to uptrain in place.
    methods = ("mean", "first", "random", "modulo")
    if method not in methods:
        raise ValueError(f"method={method!r} is not one of {methods}")
    layers = []
    for i, params in enumerate(model["layers"]):
        if method == "mean":
            layers.append(mean_pool_kv_heads(params, n_heads, n_kv_heads))
        elif method == "first":
            layers.append(first_head_kv_heads(params, n_heads, n_kv_heads))
        elif method == "random":
            layers.append(random_head_kv_heads(params, n_heads, n_kv_heads, seed + i))
        else:
            layers.append(modulo_pool_kv_heads(params, n_heads, n_kv_heads))
    new = {name: np.copy(value) for name, value in model.items() if name != "layers"}
    new["layers"] = layers
    return new
    ### END SOLUTION


def gqa_model_forward(model, tokens, n_heads, n_kv_heads):
    """The model's logits with grouped-query attention in every layer (lesson 8).

    model:      as convert_model's; each layer has w_k, w_v (D, G*K)
    tokens:     (B, T) integers in 0 .. V-1, T <= L
    n_heads:    H
    n_kv_heads: G (G = H: the MHA model itself)
    returns     logits (B, T, V)

    The model (the same as course.tiny_model.forward): x = tok_emb[tokens] + pos_emb[:T], then for
    every layer x = x + attention(x), causal self-attention, then logits = x @ unembed + b_unembed.

    TODO:
      1. Embed: for every token its row of tok_emb, (B, T) -> (B, T, D), plus the first T rows
         of pos_emb, (T, D), one per position.
      2. The causal mask of T positions, your causal_mask (lesson 4): (T, T).
      3. For every layer in order: your grouped_query_attention (lesson 8) as self-attention,
         queries, keys and values all from x, with H query heads, G key/value heads and the
         mask; then the residual: x becomes x plus its output, (B, T, D).
      4. Unembed: x @ unembed + b_unembed, (B, T, D) -> (B, T, V).
    """
    ### BEGIN SOLUTION
    # Self-attention: the queries, keys and values all come from x. The residual connection adds
    # each layer's output to its input, so a layer refines x instead of replacing it; with the
    # MHA weights and G = H this is exactly course.tiny_model.forward.
    T = tokens.shape[1]
    x = model["tok_emb"][tokens] + model["pos_emb"][:T]  # (B, T, D)
    mask = causal_mask(T)  # (T, T)
    for params in model["layers"]:
        out, _ = grouped_query_attention(x, x, params, n_heads, n_kv_heads, mask)  # (B, T, D)
        x = x + out
    return x @ model["unembed"] + model["b_unembed"]  # (B, T, D) @ (D, V) -> (B, T, V)
    ### END SOLUTION


def loss_and_accuracy(logits, targets):
    """Given (not an exercise; the same as course.tiny_model.loss_and_accuracy): the mean
    cross-entropy and the accuracy over the scored positions, targets != IGNORE.

    logits (B, T, V), targets (B, T) -> (loss, accuracy), two Python floats."""
    scored = targets != IGNORE
    z = logits[scored]  # (N, V): one row per scored position
    z = z - z.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    picked = logp[np.arange(len(z)), targets[scored]]
    return float(-picked.mean()), float((z.argmax(axis=-1) == targets[scored]).mean())


def conversion_table(
    model, tokens, targets, n_heads, kv_head_counts=(1, 2, 4), methods=("mean", "first"), seed=0
):
    """Measure each conversion: how far the logits move, what the task accuracy becomes, and
    the KV cache it needs.

    model:          an MHA model (as convert_model's)
    tokens:         (B, T) the inputs;  targets: (B, T), IGNORE (-1) where not scored
    n_heads:        H
    kv_head_counts: N values of G, each dividing H
    methods:        M method names for convert_model
    seed:           for the "random" method
    returns a dict:
      "relative_error"  (M, N) float64: ||logits - reference|| / ||reference||, the Frobenius norm
                        over all B*T*V numbers, reference = the MHA model's logits
      "loss"            (M, N) float64: loss_and_accuracy's mean cross-entropy
      "accuracy"        (M, N) float64: loss_and_accuracy's accuracy
      "cache_bytes"     (N,) int64: kv_cache_bytes (lesson 9) of ONE sequence of T tokens in the
                        converted model: all layers, G key/value heads of width K, fp16
    Row i is methods[i], column j is kv_head_counts[j].

    TODO:
      1. The reference: the MHA model's logits through your own code, gqa_model_forward with
         G = H.
      2. For each method i and each G (column j): convert the model (convert_model with the
         method and seed), run gqa_model_forward with G key/value heads, and fill
         relative_error[i, j] (the Frobenius norm of the difference from the reference, over
         all B*T*V numbers, divided by the reference's norm, not the converted model's), and
         loss[i, j], accuracy[i, j] from loss_and_accuracy.
      3. cache_bytes[j]: your kv_cache_bytes (lesson 9) for one sequence of T positions,
         n_layers = the number of layers, G key/value heads of width K = w_q's width // H, and
         the default 2 bytes per value.
      4. Return the dict of the four arrays.
    """
    ### BEGIN SOLUTION
    # Every conversion is measured against the same reference, the MHA model run through the same
    # code with G = H, so the error is the conversion's alone. The norm is over all the logits at
    # once: a single relative number per conversion (0 for an exact conversion, around 1 or more
    # when the logits have little to do with the original ones).
    H = n_heads
    T = tokens.shape[1]
    n_layers = len(model["layers"])
    K = model["layers"][0]["w_q"].shape[1] // H
    reference = gqa_model_forward(model, tokens, H, H)  # (B, T, V)
    shape = (len(methods), len(kv_head_counts))
    relative_error, loss, accuracy = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    for i, method in enumerate(methods):
        for j, G in enumerate(kv_head_counts):
            logits = gqa_model_forward(convert_model(model, H, G, method, seed), tokens, H, G)
            relative_error[i, j] = np.linalg.norm(logits - reference) / np.linalg.norm(reference)
            loss[i, j], accuracy[i, j] = loss_and_accuracy(logits, targets)
    cache_bytes = np.array([kv_cache_bytes(1, T, n_layers, G, K) for G in kv_head_counts], dtype=np.int64)
    return {"relative_error": relative_error, "loss": loss, "accuracy": accuracy, "cache_bytes": cache_bytes}
    ### END SOLUTION


def fine_tune_step(params, n_heads, n_kv_heads, method="mean"):
    """Given (not an exercise): convert params with a method ("mean", "first", "random" with
    seed 0, "modulo") and take one stand-in training step on the result IN PLACE, as an
    optimizer does (w -= lr * grad, here a gradient of ones and lr = 0.5).
    Returns (converted, params): the updated conversion, and params as it is afterwards.

    The grader calls it to see that your conversion returns copies: if the result shared an
    array with params (the same array, or a view of it), this step would change params too,
    the MHA checkpoint you converted from."""
    convert = {
        "mean": mean_pool_kv_heads,
        "first": first_head_kv_heads,
        "random": lambda p, h, g: random_head_kv_heads(p, h, g, 0),
        "modulo": modulo_pool_kv_heads,
    }[method]
    converted = convert(params, n_heads, n_kv_heads)
    for value in converted.values():
        if isinstance(value, np.ndarray):
            value -= 0.5 * np.ones_like(value)  # in place, like an optimizer's update
    return converted, params
