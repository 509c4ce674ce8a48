"""Lesson 14: backpropagation through attention.

The idea
--------
Training a model, or asking how much its loss depends on one head (lesson 11), needs the gradient
of a scalar loss L with respect to every array that made it. Backpropagation gets all of them in
one backward pass: run the forward pass, then walk it in reverse, and at every step turn the
gradient of the step's output into the gradients of its inputs (the chain rule). This lesson
writes the backward pass of lesson 3's attention, lesson 6's multi-head attention and lesson 8's
grouped-query attention by hand, derives every step with its shapes, checks each one against
central differences and, in the project's own tests, against PyTorch's autograd. Then it takes
Michel et al.'s head importance as one exact derivative, where lesson 11 needed two forward passes
per head.

Gradients have shapes
---------------------
Everything here is a gradient of one scalar L. Write dX, or grad_X, for the array of partial
derivatives dL/dX[i, j, ...]: it has exactly the shape of X. A backward function takes the
gradient of the output, grad_out, the shape of out, and returns the gradients of the inputs.
Nothing needs to know what L is: for any grad_out, the gradients are those of

    L = sum(grad_out * out)                  (a scalar; its gradient with respect to out is grad_out)

and that is also how to test one: pick a random grad_out, and L is a scalar function of the inputs.

Each step of the forward pass is a matrix product, an elementwise operation, a reshape or a sum,
and each has its backward rule. For Y = A @ B, A (T, K), B (K, S),
Y (T, S), Y[t, s] = sum over k of A[t, k] B[k, s], so

    dA = dY @ B^T     (T, S) @ (S, K) -> (T, K)         dB = A^T @ dY     (K, T) @ (T, S) -> (K, S)

The shapes nearly dictate these: dA must be (T, K), and the only product of dY (T, S) with B
(K, S) that gives (T, K) is dY @ B^T. When a shape comes out wrong, a transpose is missing; but
when two sizes are equal (T == S), a missing transpose fits too, which is why the derivations
below are also written out with indices. A reshape (split_heads, merge_heads) moves numbers
without changing them; its backward moves the gradients back: the gradient of merge_heads(x) goes
back through split_heads, and the other way round.

Checking a gradient: central differences
----------------------------------------
A derivative is a limit, and a small finite step approximates it. The central difference

    dL/dx[i]  ~  ( L(x + eps e_i) - L(x - eps e_i) ) / (2 eps)         e_i: 1 at i, 0 elsewhere

errs by about eps^2 (the one-sided (L(x + eps e_i) - L(x)) / eps errs by about eps), and
rounding adds about 1e-16 * |L| / eps: in float64, eps = 1e-6 leaves some 1e-10. It needs two
forward passes per entry of x, far too slow for training and just right for checking a backward
pass on small arrays. numerical_gradient(f, x) below does it, for any function f that returns a
scalar. To check your attention_backward's grad_q, say:

    out, _ = scaled_dot_product_attention(q, k, v, mask)
    g = rng.normal(size=out.shape)                                   # any grad_out
    f = lambda q_: np.sum(g * scaled_dot_product_attention(q_, k, v, mask)[0])
    numerical_gradient(f, q)        # should match attention_backward(q, k, v, g, mask)[0]

The largest difference should be about 1e-8 of the gradient's largest entry or less. Use float64
arrays of a few entries per axis (every size different, so that a swapped axis shows), and check
every input, not only the first.

The softmax backward: a Jacobian-vector product
-----------------------------------------------
Along one row, the weights are W = softmax(z), z the S scores: W_s = exp(z_s) / sum_j exp(z_j).
Its derivative is an (S, S) Jacobian:

    dW_s / dz_j = W_s (delta_sj - W_j)          (delta_sj = 1 if s == j, else 0)

The backward pass never needs the Jacobian itself, only its product with the gradient dW of the
weights (the chain rule: dz_j = sum over s of dW_s dW_s/dz_j):

    dz_j = sum over s of dW_s W_s (delta_sj - W_j) = W_j dW_j - W_j sum_s dW_s W_s
         = W_j (dW_j - sum_s dW_s W_s)

    dz = W * (dW - sum(dW * W, over the row, keepdims))        (..., T, S): the weights' shape

One dot product per row, then an elementwise product: O(S) numbers per row where the Jacobian
would take S * S (for (B, H, T, S) weights, B * H * T * S * S). The sum is kept with its axis of
size 1 so that it broadcasts over the row, whichever axis the softmax ran along. Two facts to see
in it: adding a constant c to every dW_s changes nothing (sum_s W_s = 1 takes it back out), so the
scores' gradient sums to zero along each row; and a row of all-zero weights (a fully masked query)
gets an all-zero gradient.

Attention backward, step by step
--------------------------------
The forward pass of lesson 3, with its shapes (any leading axes ... ride along):

    scores  = q @ k^T * scale      (..., T, K) @ (..., K, S) -> (..., T, S)
    scores  = -inf where masked
    W       = softmax(scores)      (..., T, S), over the keys S
    out     = W @ v                (..., T, S) @ (..., S, Kv) -> (..., T, Kv)

Backward, from the last line up, with dO = grad_out (..., T, Kv):

    dv      = W^T @ dO             (..., S, T) @ (..., T, Kv) -> (..., S, Kv)
    dW      = dO @ v^T             (..., T, Kv) @ (..., Kv, S) -> (..., T, S)
    dscores = softmax backward     (..., T, S)   W * (dW - sum(dW * W, -1, keepdims))
    dq      = dscores @ k * scale  (..., T, S) @ (..., S, K) -> (..., T, K)
    dk      = dscores^T @ q * scale  (..., S, T) @ (..., T, K) -> (..., S, K)

Why dk comes from dscores TRANSPOSED. Key s enters the scores of every query t, through
scores[t, s] = scale * sum over k of q[t, k] k[s, k]. Its gradient gathers all of them:

    dk[s, k] = sum over t of dscores[t, s] * scale * q[t, k] = scale * (dscores^T @ q)[s, k]

The sum runs over the queries t, the FIRST axis of dscores: hence the transpose. Without it,
dscores @ q is (T, S) @ (T, K): an error when T != S, and when T == S the right shape holding the
wrong numbers (row s would mix query s's scores with every key). dq is the other way round,
dq[t, k] = scale * sum over s of dscores[t, s] k[s, k], a sum over the keys, no transpose.

Where the scale goes. It multiplies the scores, and the scores are the only place q and k appear,
so both dq and dk carry it; dv does not (v never meets the scale). scale=None means 1/sqrt(K),
K = q.shape[-1]: a number fixed by a shape, not a variable with a gradient of its own.

Masks
-----
A masked score is the constant -inf: its weight is exactly 0 whatever q and k are, so nothing
flows back through it. The formulas see to that by themselves: W = 0 at a masked position makes
dscores = W * (...) = 0 there, so that query-key pair adds nothing to dq or dk, and W^T @ dO gives
v nothing from it either. A query whose keys are all masked has an all-zero row of weights and an
all-zero output, a constant: its row of dscores is zero and its dO contributes to nothing. So
recompute the weights with lesson 3's attention, which gives such a row zeros, and never with a
-1e9 fill (the row becomes uniform and every key gets gradient from a query that may see none).
(PyTorch's torch.softmax of an all -inf row is NaN, and so is its gradient: lesson 2's softmax
does not share that problem.)

A broadcast input's gradient is a sum
-------------------------------------
Lesson 3 accepts q (B, T, K) with k and v (S, K) or (1, S, K): one set of keys serves every
batch element, as if copied B times. Each copy gets its own gradient, and the input, which every
copy reads, gets their sum: that is the chain rule for a variable used several times. The
products above give dk of the broadcast shape (B, S, K); reduce it back to k's shape, as autograd
does:

    1. sum over the leading axes broadcasting ADDED:      (B, S, K) -> (S, K) for k (S, K)
    2. sum, keeping the axis, over every axis that is 1 in the input and larger in the gradient
       (broadcasting STRETCHED it):                        (B, S, K) -> (1, S, K) for k (1, S, K)

Not a mean (each copy contributes in full), not just the first copy. The mask can broadcast the
leading axes too (q (T, K), k (S, K), mask (B, T, S) gives (B, T, S) weights): the same rule then
sums dq, dk and dv back over B.

Multi-head attention: every projection and bias
-----------------------------------------------
Lesson 6's forward pass, with params keys w_q, w_k, w_v (D, H*K), w_o (H*K, D), optional b_q,
b_k, b_v (H*K,), b_o (D,):

    q = split_heads(x_q @ w_q + b_q)           (B, T, D) -> (B, T, H*K) -> (B, H, T, K)
    k = split_heads(x_kv @ w_k + b_k)          (B, S, D) -> (B, H, S, K);  v the same with w_v, b_v
    heads, W = attention(q, k, v, mask)        (B, H, T, K); the mask given its head axis (B, 1, T, S)
    concat = merge_heads(heads)                (B, T, H*K)
    out = concat @ w_o + b_o                   (B, T, D)

Backward, from the bottom up. For a linear layer y = x @ w + b with x (B, N, d_in), the weight
w (d_in, d_out) is used at every one of the B * N positions, so its gradient sums them all, and so
does the bias's:

    dx = dy @ w^T                              (B, N, d_out) @ (d_out, d_in) -> (B, N, d_in)
    dw = sum over b, n of x[b, n]^T dy[b, n]   = X^T @ dY with X = x as (B*N, d_in), dY = dy as
                                                 (B*N, d_out): (d_in, B*N) @ (B*N, d_out)
    db = sum over b and n of dy[b, n]          (B, N, d_out) -> (d_out,)

Applied to the output projection: d w_o and d b_o from concat and grad_out, dconcat = grad_out @
w_o^T (B, T, H*K); split_heads(dconcat) is dheads (B, H, T, K); your attention_backward on the
heads gives dq, dk, dv (B, H, ., K) (the mask broadcasts over the head axis, nothing to sum);
merge_heads brings them back to (B, T or S, H*K); then the three projections, each a linear
layer. x_kv feeds both the keys and the values: its gradient is the sum of the two paths,
dk @ w_k^T + dv @ w_v^T. In self-attention x_q IS x_kv, and its gradient is the sum of both
returned input gradients: the caller adds them.

Is every bias gradient non-zero? b_k is not: it adds the same vector c to every key, which adds
q_t . c to every score of row t, and the softmax ignores a constant added to a row. Its gradient
is exactly zero in theory, and comes out at rounding level (say 1e-17) in practice. That is why a
comparison needs an absolute floor as well as a relative tolerance.

Grouped-query attention: a shared head's gradient is a sum
----------------------------------------------------------
In lesson 8, query head i reads key/value head g(i) = i // r, r = H // G: each key/value head is
copied to its r query heads (repeat_kv). The copies are used separately, so each gets its own
gradient, and key/value head g's gradient is the sum over its r query heads, i = g*r .. g*r + r-1.
Grouped as lesson 8 grouped them: by i // r, never by i % G (the heads 0, 1, 2, 0, 1, 2 of
np.tile).

The copies can equally be made in the weights. Copying key/value head g's columns of w_k (and of
w_v, b_k, b_v) to the positions of its r query heads gives multi-head parameters, (D, H*K), whose
multi-head attention IS the grouped-query attention: so run your multi_head_attention_backward on
them, and sum each group's r column blocks of the gradient back into one:

    w_k (D, G*K)  --copy head g to heads g*r .. g*r+r-1-->  (D, H*K)      the forward
    d w_k (D, H*K) as (D, G, r, K)  --sum over r-->  (D, G, K) = (D, G*K)  the backward

The input gradients need no change: the multi-head backward already sums every path through x_kv.
(Copying the heads instead, as lesson 8's repeat_kv does, gives the same sums one step later: the
gradient of the repeated keys (B, H, S, K), viewed as (B, G, r, S, K), summed over r.)

Michel et al.'s importance, exactly: head_mask_gradient
-------------------------------------------------------
Lesson 11 multiplied head h's output by xi_h before W_O,

    out = sum over h of xi_h heads_h @ w_o[h*K:(h+1)*K] + b_o          heads_h (B, T, K)

and took I_h = E_x |dL(x)/dxi_h| at xi = 1 by central differences. out is linear in xi_h, and its
derivative is head h's contribution, heads_h @ w_o[h*K:(h+1)*K] (B, T, D). With grad_out[b] the
gradient of sequence b's loss with respect to its out[b] (for a later layer's loss, the gradient
backpropagated down to this layer's output):

    dL_b / dxi_h = sum over t, d of grad_out[b, t, d] (heads_h @ w_o[h*K:(h+1)*K])[b, t, d]
                 = sum over t, k of heads[b, h, t, k] * dheads[b, h, t, k]

with dheads = split_heads(grad_out @ w_o^T) (B, H, T, K), as in the multi-head backward: one
number per sequence and head, (B, H). Per sequence, summed over t and k only, never over the
batch: Michel et al. take the absolute value of each sequence's derivative before the mean, and
the derivative of the batch's summed or mean loss lets a head that helps some sequences and hurts
others cancel out. b_o belongs to no head and adds nothing. (It is also lesson 11's other view:
xi_h scales rows h*K:(h+1)*K of w_o, so dL_b/dxi_h is the sum of w_o times sequence b's d w_o
over those rows.)

`course show 14 --map` computes, for every head of the tiny model, the exact importance from your
head_mask_gradient (the rest of the model backpropagated by a trusted reference), beside lesson
11's finite-difference estimate.

Conventions (the same in every lesson)
--------------------------------------
    B batch    T query positions    S key/value positions    D model width    H query heads
    G key/value heads    r = H // G    K head width (D // H)    Kv value width

- A gradient grad_X (or dX) has X's shape. grad_out is the gradient of the loss with respect to
  out; the loss depends on out only: the returned weights carry no gradient.
- Weights are stored (d_in, d_out) and applied as x @ w + b; params keys as in lessons 6 and 8.
  grad_params has the keys of params, and an entry that is None gets None.
- Masks are boolean, True = may attend, broadcastable to (..., T, S) (lesson 3) or to (B, T, S)
  or (T, S) (lessons 6 and 8). Masks and the scale get no gradient.
- Gradients are float64 unless the inputs are float32 (then float32; mixed inputs follow
  np.result_type); head_mask_gradient returns float64. Functions never modify their inputs.

This lesson uses your linear (lesson 1), scaled_dot_product_attention (lesson 3), split_heads and
merge_heads (lesson 5) and kv_head_for_query_head (lesson 8): finish those first. To check a
gradient against your forward pass, import it the same way, e.g.
`from l06_multi_head import multi_head_attention`.
"""

import math

import numpy as np
from l01_projections import linear  # your lesson 1
from l03_attention import scaled_dot_product_attention  # your lesson 3
from l05_heads import merge_heads, split_heads  # your lesson 5
from l08_gqa import kv_head_for_query_head  # your lesson 8


def numerical_gradient(f, x, eps=1e-6):
    """Given (not an exercise): the central-difference gradient of a scalar function f at x.

    f:   a function of one array of x's shape, returning a number (e.g. np.sum(g * out))
    x:   an array, any shape
    eps: the step; 1e-6 suits float64 (for float32 nothing this fine works: check in float64)
    returns a float64 array of x's shape: entry i is (f(x + eps e_i) - f(x - eps e_i)) / (2 eps)

    Two calls of f per entry of x: use it on small arrays. x is never modified (f gets copies).
    """
    x = np.array(x, dtype=np.float64)  # a float64 copy
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[index] = eps
        grad[index] = (float(f(x + step)) - float(f(x - step))) / (2 * eps)
    return grad


def softmax_backward(weights, grad_weights, axis=-1):
    """The scores' gradient from the softmax's output and its gradient, without the Jacobian.

    weights:      softmax(scores) along `axis`, any shape, e.g. (..., T, S); rows of zeros allowed
    grad_weights: dL/dweights, the same shape
    axis:         the axis the softmax ran along (default -1, the keys S)
    returns dL/dscores, the same shape: weights * (grad_weights - sum(grad_weights * weights))
            with the sum taken along `axis`; an all-zero row of weights gives an all-zero row

    TODO:
      1. For every row (every slice along `axis`), the dot product of grad_weights with weights:
         multiply them elementwise and sum along `axis`, KEEPING that axis with size 1, e.g.
         (..., T, S) -> (..., T, 1), so that it lines up with its own row. Without keepdims a
         (T, S) input gives (T,), which lines up with the last axis of the rows instead.
      2. Subtract that dot product from grad_weights: the same shape as the input.
      3. Multiply by weights, elementwise, and return it. Never build the (S, S) Jacobian, and do
         not write into the inputs.
    """
    ### BEGIN SOLUTION
    # The Jacobian of the softmax is diag(W) - W W^T per row; its product with dW is
    # W * dW - W * (W . dW): an elementwise product and one dot product per row, O(S) work where
    # the Jacobian would take S*S numbers. keepdims keeps the summed axis with size 1, so the dot
    # product broadcasts back over its own row whatever `axis` is. A row of zero weights gives
    # zeros. Every step makes a new array in the inputs' dtype (float32 stays float32).
    dot = np.sum(grad_weights * weights, axis=axis, keepdims=True)  # (..., T, 1): one per row
    return weights * (grad_weights - dot)  # (..., T, S)
    ### END SOLUTION


def attention_backward(q, k, v, grad_out, mask=None, scale=None):
    """The gradients of lesson 3's attention output with respect to q, k and v.

    q:        (..., T, K)
    k:        (..., S, K)
    v:        (..., S, Kv)   (the leading axes of q, k, v and the mask broadcast together)
    grad_out: dL/dout, out's shape (..., T, Kv), the leading axes broadcast
    mask:     booleans broadcastable to (..., T, S), True = may attend; None = everywhere
    scale:    as in lesson 3: None means 1 / sqrt(K), K = q.shape[-1]
    returns (grad_q, grad_k, grad_v), each the shape of its input (q, k, v), summed over the axes
            broadcasting added or stretched; masked pairs give no gradient and a fully masked
            query gives none at all

    TODO:
      1. The scale: 1 / sqrt(K) with K = q.shape[-1] when scale is None, else the scale given,
         as a Python float (as in lesson 3).
      2. The forward pass again for the weights: your scaled_dot_product_attention(q, k, v,
         mask, scale) gives them, (..., T, S), zero where masked and zero for a fully masked row.
      3. grad_v: the weights with their last two axes swapped, times grad_out:
         (..., S, T) @ (..., T, Kv) -> (..., S, Kv).
      4. grad_weights: grad_out times v with its last two axes swapped:
         (..., T, Kv) @ (..., Kv, S) -> (..., T, S).
      5. grad_scores: your softmax_backward of the weights and grad_weights over the keys (the
         last axis): (..., T, S).
      6. grad_q: grad_scores times k, times the scale: (..., T, S) @ (..., S, K) -> (..., T, K).
      7. grad_k: grad_scores with its last two axes swapped, times q, times the scale:
         (..., S, T) @ (..., T, K) -> (..., S, K). Key s gathers from every query t: the sum runs
         over T, the first axis of grad_scores, hence the transpose.
      8. Reduce each gradient to its input's shape, as autograd does: sum over the leading axes
         the gradient has and the input has not (broadcasting added them); then, keeping the
         axes, sum over every axis where the input has size 1 and the gradient more (broadcasting
         stretched it). Return (grad_q, grad_k, grad_v).
    """
    ### BEGIN SOLUTION
    # The forward pass is rebuilt with lesson 3's attention: its weights are exactly 0 at masked
    # positions and for a fully masked query, and the backward formulas then give those positions
    # no gradient by themselves (dscores = W * (...) is 0 wherever W is). v only meets the
    # weights, so grad_v = W^T dO carries no scale; q and k meet through the scaled scores, so
    # both grad_q and grad_k carry the scale. grad_k sums over the queries t, the first axis of
    # grad_scores: hence the transpose. Every product broadcasts its leading axes, so a k shared
    # by the batch gets a gradient per batch element: summing them back to k's shape is the
    # chain rule for an array used several times (autograd's rule for broadcasting).
    K = q.shape[-1]
    scale = 1.0 / math.sqrt(K) if scale is None else float(scale)
    _, weights = scaled_dot_product_attention(q, k, v, mask, scale)  # (..., T, S)
    grad_v = np.swapaxes(weights, -1, -2) @ grad_out  # (..., S, T) @ (..., T, Kv) -> (..., S, Kv)
    grad_weights = grad_out @ np.swapaxes(v, -1, -2)  # (..., T, Kv) @ (..., Kv, S) -> (..., T, S)
    grad_scores = softmax_backward(weights, grad_weights, axis=-1)  # (..., T, S)
    grad_q = grad_scores @ k * scale  # (..., T, S) @ (..., S, K) -> (..., T, K)
    grad_k = np.swapaxes(grad_scores, -1, -2) @ q * scale  # (..., S, T) @ (..., T, K) -> (..., S, K)
    grads = []
    for x, grad in ((q, grad_q), (k, grad_k), (v, grad_v)):
        added = tuple(range(grad.ndim - x.ndim))  # leading axes broadcasting added
        grad = np.sum(grad, axis=added)  # now x.ndim axes
        stretched = tuple(i for i, n in enumerate(x.shape) if n == 1 and grad.shape[i] != 1)
        grad = np.sum(grad, axis=stretched, keepdims=True)  # size-1 axes broadcasting stretched
        grads.append(grad)
    return tuple(grads)
    ### END SOLUTION


def multi_head_attention_backward(x_q, x_kv, params, n_heads, grad_out, mask=None):
    """The gradients of lesson 6's multi-head attention output: inputs, weights and biases.

    x_q:      (B, T, D)
    x_kv:     (B, S, D)
    params:   dict with w_q, w_k, w_v (D, H*K), w_o (H*K, D), optional b_q, b_k, b_v (H*K,), b_o (D,)
    n_heads:  H
    grad_out: dL/dout (B, T, D)
    mask:     booleans broadcastable to (B, T, S) or (T, S), True = may attend; None = everywhere
    returns (grad_x_q (B, T, D), grad_x_kv (B, S, D), grad_params): grad_params a dict with the
            keys of params, each gradient the shape of its parameter; an entry of params that is
            None gets None. (For self-attention the caller adds grad_x_q and grad_x_kv.)

    TODO:
      1. The forward pass again, as lesson 6 does it, keeping what the backward pass needs: q, k,
         v projected with your linear (a bias only when params has it) and split into heads,
         (B, H, T, K) and (B, H, S, K); the mask broadcast to (B, T, S) and given its head axis,
         (B, 1, T, S); the heads from your scaled_dot_product_attention, (B, H, T, K); concat =
         merge_heads(heads), (B, T, H*K).
      2. The output projection, out = concat @ w_o + b_o: grad of w_o is concat^T times
         grad_out summed over every (b, t), (H*K, B*T) @ (B*T, D) -> (H*K, D) (view both as
         B*T rows); grad of b_o is grad_out summed over B and T, (D,); grad_concat is grad_out
         times w_o transposed, (B, T, D) @ (D, H*K) -> (B, T, H*K).
      3. Split grad_concat into heads, (B, H, T, K), and run your attention_backward on q, k, v
         with it and the head-axis mask: grad_q (B, H, T, K), grad_k and grad_v (B, H, S, K).
      4. merge_heads each: (B, T, H*K) for q, (B, S, H*K) for k and v.
      5. The three projections, each as in step 2: grad of w_q is x_q^T times grad_q over every
         (b, t), (D, H*K); of b_q grad_q summed over B and T, (H*K,); the same for w_k, b_k and
         w_v, b_v with x_kv over every (b, s).
      6. The inputs: grad_x_q = grad_q @ w_q^T, (B, T, D); x_kv feeds the keys AND the values, so
         grad_x_kv is the sum of both paths, grad_k @ w_k^T + grad_v @ w_v^T, (B, S, D).
      7. grad_params: for every key of params, its gradient, or None where params holds None.
         Return (grad_x_q, grad_x_kv, grad_params).
    """
    ### BEGIN SOLUTION
    # Lesson 6's forward pass, then every step in reverse. A weight is used at every position,
    # so its gradient sums the outer products x[b, t]^T dy[b, t] over all of them: one matrix
    # product of the (B*T, d_in) and (B*T, d_out) views. A bias is added at every position, so
    # its gradient is dy summed over B and T. split_heads undoes merge_heads on the gradients
    # and back. x_kv is read by the keys and by the values: its gradient adds the two paths.
    B, T, D = x_q.shape
    _, S, _ = x_kv.shape
    q = split_heads(linear(x_q, params["w_q"], params.get("b_q")), n_heads)  # (B, H, T, K)
    k = split_heads(linear(x_kv, params["w_k"], params.get("b_k")), n_heads)  # (B, H, S, K)
    v = split_heads(linear(x_kv, params["w_v"], params.get("b_v")), n_heads)  # (B, H, S, K)
    if mask is not None:
        mask = np.broadcast_to(mask, (B, T, S))[:, None]  # (B, 1, T, S): every head alike
    heads, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, H, T, K)
    concat = merge_heads(heads)  # (B, H, T, K) -> (B, T, H*K)
    grads = {}
    grads["w_o"] = concat.reshape(B * T, -1).T @ grad_out.reshape(B * T, -1)  # (H*K, D)
    grads["b_o"] = grad_out.sum(axis=(0, 1))  # (B, T, D) -> (D,)
    grad_concat = grad_out @ params["w_o"].T  # (B, T, D) @ (D, H*K) -> (B, T, H*K)
    grad_heads = split_heads(grad_concat, n_heads)  # (B, T, H*K) -> (B, H, T, K)
    grad_q, grad_k, grad_v = attention_backward(q, k, v, grad_heads, mask)  # (B, H, T or S, K)
    grad_q = merge_heads(grad_q)  # (B, H, T, K) -> (B, T, H*K)
    grad_k = merge_heads(grad_k)  # (B, H, S, K) -> (B, S, H*K)
    grad_v = merge_heads(grad_v)  # (B, H, S, K) -> (B, S, H*K)
    grads["w_q"] = x_q.reshape(B * T, D).T @ grad_q.reshape(B * T, -1)  # (D, B*T) @ (B*T, H*K)
    grads["w_k"] = x_kv.reshape(B * S, D).T @ grad_k.reshape(B * S, -1)  # (D, B*S) @ (B*S, H*K)
    grads["w_v"] = x_kv.reshape(B * S, D).T @ grad_v.reshape(B * S, -1)  # (D, H*K)
    grads["b_q"] = grad_q.sum(axis=(0, 1))  # (B, T, H*K) -> (H*K,)
    grads["b_k"] = grad_k.sum(axis=(0, 1))  # (B, S, H*K) -> (H*K,): zero up to rounding
    grads["b_v"] = grad_v.sum(axis=(0, 1))  # (B, S, H*K) -> (H*K,)
    grad_x_q = grad_q @ params["w_q"].T  # (B, T, H*K) @ (H*K, D) -> (B, T, D)
    grad_x_kv = grad_k @ params["w_k"].T + grad_v @ params["w_v"].T  # both paths: (B, S, D)
    grad_params = {name: None if params[name] is None else grads[name] for name in params}
    return grad_x_q, grad_x_kv, grad_params
    ### END SOLUTION


def grouped_query_attention_backward(x_q, x_kv, params, n_heads, n_kv_heads, grad_out, mask=None):
    """The gradients of lesson 8's grouped-query attention output: inputs, weights and biases.

    x_q:        (B, T, D)
    x_kv:       (B, S, D)
    params:     dict with w_q (D, H*K), w_k and w_v (D, G*K), w_o (H*K, D), optional b_q (H*K,),
                b_k and b_v (G*K,), b_o (D,)
    n_heads:    H
    n_kv_heads: G, must divide H (raise ValueError naming both when it does not)
    grad_out:   dL/dout (B, T, D)
    mask:       booleans broadcastable to (B, T, S) or (T, S), True = may attend; None = everywhere
    returns (grad_x_q (B, T, D), grad_x_kv (B, S, D), grad_params), as multi_head_attention_backward;
            grad of w_k and w_v (D, G*K), of b_k and b_v (G*K,): key/value head g's gradient is the
            sum of its r = H // G query heads' gradients

    TODO:
      1. Which key/value head each query head reads: your kv_head_for_query_head(H, G) from
         lesson 8, (H,), query head i -> i // r (it raises the ValueError when G does not divide
         H). The head width K is the last axis of w_k divided by G.
      2. Multi-head parameters: a copy of params in which w_k, w_v, b_k and b_v (those present
         and not None) have key/value head g's K columns copied to the place of every query head
         that reads it: view the last axis G*K as (G, K), pick the heads of step 1 along G, and
         view (H, K) as H*K again: (D, G*K) -> (D, H*K), (G*K,) -> (H*K,). w_q, b_q, w_o, b_o
         stay as they are.
      3. Your multi_head_attention_backward with those parameters and H heads: it returns the
         input gradients as they are, and gradients of the copied weights, (D, H*K) and (H*K,).
      4. Sum each copied gradient back over its group: view its last axis H*K as (G, r, K)
         (query head i = g*r + j sits in group g = i // r), sum over r, and view (G, K) as G*K:
         (D, H*K) -> (D, G*K), (H*K,) -> (G*K,). Not (r, G, K): that groups by i % G.
      5. Return (grad_x_q, grad_x_kv, grad_params), grad_params with the keys of params.
    """
    ### BEGIN SOLUTION
    # Copying key/value head g's columns of w_k and w_v (and b_k, b_v) to the r query heads that
    # read it turns grouped-query attention into multi-head attention with the same output, so
    # lesson 6's backward gives every gradient, the copied weights' per copy. A weight used r
    # times gets the sum of the r gradients: the query heads of group g are g*r .. g*r + r-1 (the
    # i // r of lesson 8), so viewing H*K as (G, r, K) and summing over r gathers exactly them.
    # The input gradients need no change: the multi-head backward already adds every path.
    H, G = n_heads, n_kv_heads
    groups = kv_head_for_query_head(H, G)  # (H,): query head i reads key/value head i // r
    r = H // G
    copied = dict(params)
    for name in ("w_k", "w_v", "b_k", "b_v"):
        w = params.get(name)
        if w is not None:
            lead, K = w.shape[:-1], w.shape[-1] // G
            copied[name] = w.reshape(lead + (G, K))[..., groups, :].reshape(lead + (H * K,))  # G*K -> H*K
    grad_x_q, grad_x_kv, grads = multi_head_attention_backward(x_q, x_kv, copied, H, grad_out, mask)
    for name in ("w_k", "w_v", "b_k", "b_v"):
        g = grads.get(name)
        if g is not None:
            lead, K = g.shape[:-1], g.shape[-1] // H
            grads[name] = g.reshape(lead + (G, r, K)).sum(axis=-2).reshape(lead + (G * K,))  # H*K -> G*K
    return grad_x_q, grad_x_kv, grads
    ### END SOLUTION


def head_mask_gradient(x_q, x_kv, params, n_heads, grad_out, mask=None):
    """Michel et al.'s dL/dxi_h per sequence, exactly: xi_h multiplies head h's output before W_O.

    x_q:      (B, T, D)
    x_kv:     (B, S, D)
    params:   lesson 6's dict: w_q, w_k, w_v (D, H*K), w_o (H*K, D), optional biases
    n_heads:  H
    grad_out: (B, T, D), row b the gradient of sequence b's loss with respect to out[b]
    mask:     booleans broadcastable to (B, T, S) or (T, S), True = may attend; None = everywhere
    returns (B, H) float64: entry (b, h) is d(sum(grad_out[b] * out[b])) / d(xi_h) at xi = 1,
            out as lesson 11's masked_multi_head_attention computes it. The mean over b of its
            absolute value is Michel et al.'s importance of head h.

    TODO:
      1. Head h's output at xi = 1, as lesson 6 computes it: q, k, v projected with your linear
         and split into heads, the mask broadcast to (B, T, S) and given its head axis
         (B, 1, T, S), then your scaled_dot_product_attention: heads (B, H, T, K).
      2. The gradient of the heads: grad_out times w_o transposed, (B, T, D) @ (D, H*K) ->
         (B, T, H*K), split into heads: (B, H, T, K). b_o belongs to no head: it plays no part.
      3. out is linear in xi_h, with derivative head h's contribution: d/dxi_h is the heads
         times their gradient, elementwise, summed over T and K, (B, H, T, K) -> (B, H). Per
         sequence: do NOT sum or average over B.
      4. Return it as float64.
    """
    ### BEGIN SOLUTION
    # out = sum over h of xi_h heads_h @ w_o[h*K:(h+1)*K] + b_o is linear in xi_h, so its
    # derivative is head h's contribution; against grad_out that is the dot product of heads_h
    # with dheads_h = (grad_out @ w_o^T)[..., h*K:(h+1)*K], summed over t and k and kept per
    # sequence b (Michel et al. take |.| per example before the mean). b_o is no head's.
    B, T, D = x_q.shape
    _, S, _ = x_kv.shape
    q = split_heads(linear(x_q, params["w_q"], params.get("b_q")), n_heads)  # queries (B, H, T, K)
    k = split_heads(linear(x_kv, params["w_k"], params.get("b_k")), n_heads)  # keys (B, H, S, K)
    v = split_heads(linear(x_kv, params["w_v"], params.get("b_v")), n_heads)  # values (B, H, S, K)
    if mask is not None:
        mask = np.broadcast_to(mask, (B, T, S))[:, None]  # (T, S) or (B, T, S) -> (B, 1, T, S)
    heads, _ = scaled_dot_product_attention(q, k, v, mask)  # head h's output at xi = 1, (B, H, T, K)
    grad_heads = split_heads(grad_out @ params["w_o"].T, n_heads)  # (B, T, H*K) -> (B, H, T, K)
    return np.sum(heads * grad_heads, axis=(2, 3)).astype(np.float64)  # (B, H): one per sequence
    ### END SOLUTION
