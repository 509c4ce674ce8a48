"""Lesson 6: multi-head attention.

The idea
--------
One attention head mixes the values with ONE set of weights per query: a single softmax can
look at the previous word or at the subject of the sentence, hardly at both. Multi-head
attention runs H small attentions side by side, each with its own projections, so that each
head can learn its own notion of "relevant", and lets a last matrix combine what they found
(Vaswani et al. 2017, section 3.2.2):

    MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W_O
    head_i             = Attention(Q W_Qi, K W_Ki, V W_Vi)

The diagram, one head at a time: head i projects the queries with its own W_Qi (D, K) and the
keys and values with W_Ki and W_Vi, attends with its own softmax, and returns (T, K). The H
results are put side by side, (T, H*K), and W_O (H*K, D) maps them back to the model width.
Every head works in a small K = D // H dimensional space, so H heads cost about as much as one
head of width D.

The course stores the H per-head matrices fused (lesson 1): w_q is (D, H*K) and head i owns its
columns i*K:(i+1)*K, so W_Qi = w_q[:, i*K:(i+1)*K]; the same holds for w_k, w_v and for the
biases. That makes the loop over heads unnecessary:

    x_q (B, T, D) --linear(w_q, b_q)--> (B, T, H*K) --split_heads--> q (B, H, T, K)
    x_kv (B, S, D) --linear(w_k, b_k)--> (B, S, H*K) --split_heads--> k (B, H, S, K)
    x_kv (B, S, D) --linear(w_v, b_v)--> (B, S, H*K) --split_heads--> v (B, H, S, K)
    scaled_dot_product_attention(q, k, v, mask)  -> heads (B, H, T, K), weights (B, H, T, S)
    merge_heads(heads) (B, T, H*K) --linear(w_o, b_o)--> out (B, T, D)

One product projects every head at once, lesson 3's attention treats the head axis as one more
batch axis, and lesson 5's merge_heads is the Concat. Both versions compute the same numbers;
this lesson writes both and checks that they agree.

Queries and keys may come from different sequences: in self-attention x_kv is x_q (S = T), in
cross-attention (a decoder reading an encoder) x_kv has its own length S. The weights are
(B, H, T, S): one attention map per head, T queries by S keys. Each head attends with scores
scaled by 1/sqrt(K), K the HEAD width: the dot products are taken in K dimensions, not D.

Masks
-----
The caller gives one mask for all heads, broadcastable to (B, T, S) (one per batch element, or
(B, 1, S) for padding) or to (T, S) (the same for every batch element), True = may attend. The
scores are (B, H, T, S), so the mask needs a head axis: broadcast it to (B, T, S), then
mask[:, None] is (B, 1, T, S) and serves every head. Left without it, a (B, T, S) mask lines up
its batch axis with the heads (numpy aligns shapes from the right): an error when B != H, and,
worse, silently wrong numbers when B == H. Broadcasting to (B, T, S) first matters too: on a
(T, S) mask, mask[:, None] would give (T, 1, S) and line T up with the heads.

PyTorch
-------
torch.nn.MultiheadAttention(embed_dim=D, num_heads=H, batch_first=True) computes exactly this
function with its state_dict():

    in_proj_weight  (3D, D)   W_Q, W_K and W_V stacked along the first axis, in that order
    in_proj_bias    (3D,)     b_q, b_k, b_v, the same way
    out_proj.weight (D, D)    W_O
    out_proj.bias   (D,)      b_o
    (bias=False: no bias keys at all)

PyTorch stores a weight (d_out, d_in) and applies it as x @ W.T; the course stores (d_in, d_out)
and applies x @ w. So w_q = in_proj_weight[0:D].T, w_k = in_proj_weight[D:2D].T, w_v =
in_proj_weight[2D:3D].T and w_o = out_proj.weight.T. PyTorch splits heads the same way the course
does (head i owns features i*K:(i+1)*K of each projection) and scales by 1/sqrt(K) too, so
nothing else moves. The same computation in PyTorch, for a course mask of shape (T, S):

    mha = torch.nn.MultiheadAttention(D, H, batch_first=True)
    out, weights = mha(x_q, x_kv, x_kv, attn_mask=~mask,
                       need_weights=True, average_attn_weights=False)

Two traps hide in that call. nn.MultiheadAttention's boolean attn_mask means True = NOT allowed,
the opposite of the course (and of F.scaled_dot_product_attention): hence ~mask. And by default
(average_attn_weights=True) it returns the weights AVERAGED over the heads, (B, T, S); this
lesson returns one map per head, (B, H, T, S). (With kdim or vdim different from D, PyTorch keeps
separate q_proj_weight, k_proj_weight and v_proj_weight instead of in_proj_weight; this lesson
uses kdim = vdim = D.)

Conventions (the same in every lesson)
--------------------------------------
    B batch    T query positions    S key/value positions    D model width    H heads
    K head width (D // H)

- Arrays are batch first: x_q is (B, T, D), x_kv is (B, S, D).
- Weights are stored (d_in, d_out) and applied as x @ w + b. params is a dict: w_q, w_k, w_v
  (D, H*K), w_o (H*K, D), optional b_q, b_k, b_v (H*K,) and b_o (D,); a bias that is absent or
  None is not added. Head i owns columns i*K:(i+1)*K.
- Masks are boolean, True = may attend. A query that may attend no key gets all-zero weights and
  an all-zero attention output (its out is then just b_o), never NaN.
- The scale is 1/sqrt(K). Functions never modify their inputs, and return the dtype of their
  inputs (float32 stays float32).

This lesson uses your linear (lesson 1), scaled_dot_product_attention (lesson 3), split_heads and
merge_heads (lesson 5): finish those first.
"""

import numpy as np
from l01_projections import linear  # your linear from lesson 1
from l03_attention import scaled_dot_product_attention  # your attention from lesson 3
from l05_heads import merge_heads, split_heads  # your head reshapes from lesson 5


def multi_head_attention(x_q, x_kv, params, n_heads, mask=None):
    """Multi-head attention, all heads at once. Returns (out, weights).

    x_q:     (B, T, D)   the sequence the queries come from
    x_kv:    (B, S, D)   the sequence the keys and values come from (x_q itself for self-attention)
    params:  dict with w_q, w_k, w_v (D, H*K), w_o (H*K, D), optional b_q, b_k, b_v (H*K,), b_o (D,)
    n_heads: H
    mask:    booleans broadcastable to (B, T, S) or (T, S), True = may attend; None = everywhere
    returns (out, weights):
      out     (B, T, D)     Concat(head_1, ..., head_H) W_O + b_o
      weights (B, H, T, S)  one attention map per head (not averaged over the heads)

    TODO:
      1. Unpack the sizes: B, T, D = x_q.shape and S = x_kv.shape[1].
      2. Project with your linear: q from x_q with w_q, b_q; k and v from x_kv (not x_q!) with
         w_k, b_k and w_v, b_v. A bias missing from params is passed on as None, and
         linear(x, w, None) adds nothing. Each result is (B, T or S, H*K).
      3. split_heads(..., n_heads) each of q, k, v: (B, T, H*K) -> (B, H, T, K).
      4. If a mask is given, give it the head axis. First broadcast it to the full (B, T, S),
         which every allowed form ((T, S), (B, 1, S), (B, T, S)) reaches; then insert an axis
         of size 1 after B: (B, T, S) -> (B, 1, T, S), which broadcasts over the heads.
         (Inserting that axis without broadcasting first turns a (T, S) mask into (T, 1, S),
         which lines T up with the heads.)
      5. heads, weights = scaled_dot_product_attention(q, k, v, mask): (B, H, T, K) and
         (B, H, T, S). Keep its default scale: 1/sqrt(K), K the head width, is right.
      6. merge_heads(heads): (B, H, T, K) -> (B, T, H*K), the Concat.
      7. out = linear(concat, w_o, b_o): (B, T, H*K) -> (B, T, D). Return (out, weights), the
         weights per head, not averaged.
    """
    ### BEGIN SOLUTION
    # The queries are projected from x_q, the keys and values from x_kv: with T != S only that
    # order gives scores of shape (T, S). `params.get` returns None for a missing bias, and
    # linear then adds nothing. split_heads turns the H*K projected features into H heads of K
    # (head h = columns h*K:(h+1)*K, the layout of the fused weights). Lesson 3's attention
    # treats (B, H) as batch axes and uses its default scale 1/sqrt(K) with K = q.shape[-1], the
    # head width. The mask is broadcast to (B, T, S) first, whatever form it came in, then gets
    # its head axis, so that its batch axis stays the batch axis. merge_heads puts the heads side
    # by side again: the Concat of the formula. Only then does w_o mix the heads.
    B, T, D = x_q.shape
    _, S, _ = x_kv.shape
    q = linear(x_q, params["w_q"], params.get("b_q"))  # (B, T, D) -> (B, T, H*K)
    k = linear(x_kv, params["w_k"], params.get("b_k"))  # (B, S, D) -> (B, S, H*K)
    v = linear(x_kv, params["w_v"], params.get("b_v"))  # (B, S, D) -> (B, S, H*K)
    q = split_heads(q, n_heads)  # (B, T, H*K) -> (B, H, T, K)
    k = split_heads(k, n_heads)  # (B, S, H*K) -> (B, H, S, K)
    v = split_heads(v, n_heads)  # (B, S, H*K) -> (B, H, S, K)
    if mask is not None:
        mask = np.broadcast_to(mask, (B, T, S))  # (T, S), (B, 1, S), ... -> (B, T, S)
        mask = mask[:, None]  # (B, T, S) -> (B, 1, T, S): the same mask for every head
    heads, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, H, T, K), (B, H, T, S)
    concat = merge_heads(heads)  # (B, H, T, K) -> (B, T, H*K)
    out = linear(concat, params["w_o"], params.get("b_o"))  # (B, T, H*K) -> (B, T, D)
    return out, weights
    ### END SOLUTION


def multi_head_attention_loop(x_q, x_kv, params, n_heads, mask=None):
    """Multi-head attention as in the diagram: one head at a time, then Concat and W_O.

    Same arguments as multi_head_attention; returns out (B, T, D) only.
    Head i uses W_Qi = w_q[:, i*K:(i+1)*K] (and the same columns of w_k, w_v and of the biases).

    TODO:
      1. The head width: K = params["w_q"].shape[1] // n_heads.
      2. For each head i, cols = slice(i*K, (i+1)*K), a contiguous block (not i::H):
         q_i = linear(x_q, w_q[:, cols], b_q[cols]) (B, T, K), and k_i, v_i from x_kv with the
         same columns of w_k, w_v (B, S, K). A bias that is None stays None.
      3. head_i, _ = scaled_dot_product_attention(q_i, k_i, v_i, mask): (B, T, K). On these 3-D
         arrays the mask fits as it is. Collect the heads in a list, in order.
      4. Put the H heads side by side along the last axis, in head order: H arrays (B, T, K)
         -> (B, T, H*K), the Concat.
      5. Return linear(concat, w_o, b_o): (B, T, D). W_O sees all heads at once.
    """
    ### BEGIN SOLUTION
    # Each head is a full attention of its own: project with its (D, K) slices, attend on 3-D
    # (B, T, K) arrays, where a mask broadcastable to (B, T, S) or (T, S) fits the (B, T, S)
    # scores as it is. Head i's slice is the contiguous block i*K:(i+1)*K, not every H-th column
    # (i::H): the fused matrix puts each head's K columns side by side. The H outputs are
    # concatenated along the features, in head order, and only that concatenation goes through
    # W_O: W_O is one (H*K, D) matrix that mixes all the heads, not H separate ones.
    B, T, D = x_q.shape
    HK = params["w_q"].shape[1]
    K = HK // n_heads
    b_q, b_k, b_v = params.get("b_q"), params.get("b_k"), params.get("b_v")  # None if absent
    heads = []
    for i in range(n_heads):
        cols = slice(i * K, (i + 1) * K)  # head i's block of columns
        q_i = linear(x_q, params["w_q"][:, cols], None if b_q is None else b_q[cols])  # (B, T, K)
        k_i = linear(x_kv, params["w_k"][:, cols], None if b_k is None else b_k[cols])  # (B, S, K)
        v_i = linear(x_kv, params["w_v"][:, cols], None if b_v is None else b_v[cols])  # (B, S, K)
        head_i, _ = scaled_dot_product_attention(q_i, k_i, v_i, mask)  # (B, T, K)
        heads.append(head_i)
    concat = np.concatenate(heads, axis=-1)  # H arrays (B, T, K) -> (B, T, H*K)
    return linear(concat, params["w_o"], params.get("b_o"))  # (B, T, H*K) -> (B, T, D)
    ### END SOLUTION


def params_from_torch(state, n_heads):
    """Course parameters from a torch.nn.MultiheadAttention state_dict (as numpy arrays).

    state:   dict with in_proj_weight (3D, D), out_proj.weight (D, D) and, unless the module
             was built with bias=False, in_proj_bias (3D,) and out_proj.bias (D,)
    n_heads: H (D must be divisible by it)
    returns  dict with w_q, w_k, w_v (D, D), w_o (D, D) stored (d_in, d_out), and b_q, b_k,
             b_v, b_o (D,) when the state has biases (no b_* entries otherwise)

    TODO:
      1. D = state["in_proj_weight"].shape[1].
      2. Split in_proj_weight into its three (D, D) blocks, in the order Q, K, V: rows 0:D,
         D:2D, 2D:3D.
      3. Transpose each block (PyTorch stores (d_out, d_in), the course (d_in, d_out)), and
         out_proj.weight too. Heads need no reordering: PyTorch's head i owns outputs
         i*K:(i+1)*K too.
      4. If the state has in_proj_bias, split it the same way into b_q, b_k, b_v (biases are
         not transposed); if it has out_proj.bias, that is b_o. Without them, add no b_* keys.
      5. Return new arrays, copies rather than views of the state's arrays: never change or
         share the caller's state.
    """
    ### BEGIN SOLUTION
    # in_proj_weight stacks three (D, D) blocks, rows 0:D for the queries, D:2D for the keys and
    # 2D:3D for the values, each stored (d_out, d_in): transposing a block gives the course's
    # (d_in, d_out) weight. The bias splits the same way and needs no transpose. PyTorch gives
    # head i the outputs i*K:(i+1)*K of each projection, which after the transpose are the
    # columns i*K:(i+1)*K: the course's layout, so n_heads only has to divide D. np.array(...)
    # copies, so the caller's state is never shared or changed.
    w_in = state["in_proj_weight"]  # (3D, D), stored (d_out, d_in)
    D = w_in.shape[1]
    if D % n_heads:
        raise ValueError(f"the model width {D} is not divisible by n_heads={n_heads}")
    w_q, w_k, w_v = w_in[:D], w_in[D : 2 * D], w_in[2 * D :]  # (3D, D) -> 3 x (D, D): Q, K, V
    params = {
        "w_q": np.array(w_q.T),  # (d_out, d_in) -> (d_in, d_out)
        "w_k": np.array(w_k.T),
        "w_v": np.array(w_v.T),
        "w_o": np.array(state["out_proj.weight"].T),  # (D, D) -> (D, D), transposed
    }
    if state.get("in_proj_bias") is not None:
        b_in = state["in_proj_bias"]  # (3D,)
        params["b_q"], params["b_k"], params["b_v"] = (
            np.array(b_in[:D]),
            np.array(b_in[D : 2 * D]),
            np.array(b_in[2 * D :]),
        )
    if state.get("out_proj.bias") is not None:
        params["b_o"] = np.array(state["out_proj.bias"])  # (D,)
    return params
    ### END SOLUTION


def fine_tune_step(state, n_heads):
    """Given (not an exercise): convert state with your params_from_torch and take one
    stand-in training step on the result IN PLACE, as an optimizer does (w -= lr * grad, here
    a gradient of ones and lr = 0.5). Returns (params, state): the updated course parameters,
    and the PyTorch state as it is afterwards.

    The grader calls it to see that params_from_torch returns copies: if a course array shared
    memory with the state (a transpose or a slice of it is a view), this step would change the
    PyTorch model's weights too."""
    params = params_from_torch(state, n_heads)
    for value in params.values():
        if isinstance(value, np.ndarray):
            value -= 0.5 * np.ones_like(value)  # in place, like an optimizer's update
    return params, state
