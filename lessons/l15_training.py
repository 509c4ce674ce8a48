"""Lesson 15: training the tiny model in numpy.

The idea
--------
Lessons 10 to 12 studied a tiny transformer that PyTorch trained (course.tiny_model): its heads'
roles, their importance, and what converting it to grouped-query attention costs. Lesson 14 gave
you the backward pass of attention. This lesson puts the two together and trains that model with
your own code: a loss, the gradient of the loss with respect to every weight of the model, an
optimizer step, and the loop that repeats them. Then you measure two claims yourself, with the
experiments of `course experiment 15`. Ainslie et al. (2023) found that a multi-head model
converted to grouped-query attention gets close to its old quality again when training goes on
for about 5% of its original training ("uptraining"). Voita et al. (2019) found that in a
trained model a few heads have clear, specialised roles (one attends to the previous token, for
instance) and do most of the work; you watch such roles appear while your code trains the model.

Training is a loop of four steps, each one function of this lesson:

    tokens, targets = a new batch of the copy task                     (B, T) each
    loss, grads = model_gradients(model, tokens, targets, H)         forward, loss, backward
    model, state = adamw_step(model, grads, state, lr)               one optimizer step
    repeat with the next batch                                       (train)

The loss: cross-entropy over the scored positions
-------------------------------------------------
The model reads tokens (B, T) and returns logits (B, T, V): one score per vocabulary entry at
every position, position t predicting token t + 1. The copy task scores only some predictions:
those of the 2nd and later tokens of the copied segment, which the segment's earlier occurrence
tells. At every other position the target is -1 (IGNORE), which is not a token and must never be
used as an index. With N the number of scored positions in the whole batch, the loss is the mean
over them of minus the log-probability of the target:

    log_softmax(z)[v] = z[v] - log(sum over u of exp(z[u]))
    loss = -(1/N) * sum over scored (b, t) of log_softmax(logits[b, t])[targets[b, t]]

Computed in this log-softmax form, after subtracting each row's maximum, it stays finite however
large the logits are (as long as their differences fit in a float): every exp is at most 1 and
the sum at least 1. log(softmax(z)) would instead take the log of an exp that underflowed to 0
and give -inf. Its gradient with respect to the logits is short (the softmax minus the one-hot
target, per scored position, divided by N):

    grad_logits[b, t] = (softmax(logits[b, t]) - onehot(targets[b, t])) / N     scored (b, t)
    grad_logits[b, t] = 0                                                       unscored (b, t)

Divide by N, the scored count, not by B*T: the loss is a mean over N terms. It is what PyTorch's
F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-1) computes. When
nothing is scored (N = 0) the mean is of nothing: the loss is NaN (as PyTorch's) and the
gradient zero.

The gradient of the whole model
-------------------------------
The forward pass of the tiny model (course.tiny_model.forward, and lesson 12's gqa_model_forward):

    x_0 = tok_emb[tokens] + pos_emb[0 .. T-1]                    (B, T, D)
    x_{l+1} = x_l + attention_l(x_l)                             (B, T, D), causal self-attention
    logits = x_n @ unembed + b_unembed                           (B, T, V)

for the layers l = 0 .. n-1 (n = n_layers). Backward, from the loss down: grad_logits from
cross_entropy, then

    unembed:   x_n^T @ grad_logits over every (b, t)             (D, B*T) @ (B*T, V) -> (D, V)
    b_unembed: grad_logits summed over b and t                   (V,)
    x_n:       grad_logits @ unembed^T                           (B, T, V) @ (V, D) -> (B, T, D)

Each layer l, from the last to the first, passes the gradient of its output x_{l+1} down to its
input x_l. x_l reaches x_{l+1} by two paths, the residual (x_l itself) and the attention, and its
gradient is the sum of the two:

    grad x_l = grad x_{l+1}  +  (what attention's backward gives for x_l)

Forget the residual path and the gradient of every layer below is wrong. Attention reads x_l
three times, for the queries, the keys and the values, so its part is the sum of three
gradients: grad_q @ w_q^T + grad_k @ w_k^T + grad_v @ w_v^T (lesson 14's grad_x_q + grad_x_kv
with x_q = x_kv = x_l). At the bottom, grad x_0 goes to the embeddings:

    pos_emb:   row t gets grad x_0[:, t] summed over b; rows T .. L-1 get 0 (not used)
    tok_emb:   row v gets the sum of grad x_0[b, t] over every (b, t) with tokens[b, t] == v

A token that appears twice gets both gradients added. `grad[tokens] += g` does not do that: it
is grad[tokens] = grad[tokens] + g, which reads every row once and then writes them one by one,
so a repeated index keeps one of its sums, not the total. np.add.at(grad, tokens, g) adds every
one ("unbuffered").

One layer, kept for its backward pass
-------------------------------------
Lesson 14's backward functions start by running the forward pass again, to get the attention
weights back. In training every forward pass is followed by its backward pass, so that would be a
second forward pass per layer per step. layer_forward runs lesson 8's grouped-query attention step
by step and keeps what the backward pass reads (a "cache", per layer):

    x (B, T, D), q (B, H, T, K), k and v repeated to the H query heads (B, H, T, K),
    weights (B, H, T, T), concat: the heads merged (B, T, H*K)

and layer_backward turns the gradient of the layer's output into the gradients of its input and
of its eight parameters, from that cache, without recomputing anything. It is the trade PyTorch's
autograd makes too: memory (here about 5 MB per layer for a batch of 64) for time. A key/value
head that served r = H // G query heads was copied r times (repeat_kv), and the backward of a
copy is a sum: its gradient is the sum of the r copies' gradients.

AdamW: Adam with decoupled weight decay
---------------------------------------
Plain gradient descent, p -= lr * grad, moves every weight by its own gradient's size. Adam
(Kingma and Ba, 2015) keeps two running means per weight, of the gradient and of its square, and
moves each weight by at most about lr, whatever its gradient's scale. At step t = 1, 2, ... (t
counts the updates, starting at 1):

    m = b1 * m + (1 - b1) * grad                                 a mean of the gradient
    v = b2 * v + (1 - b2) * grad**2                              a mean of its square
    m_hat = m / (1 - b1**t)        v_hat = v / (1 - b2**t)       bias correction
    p = p - lr * m_hat / (sqrt(v_hat) + eps)

m and v start at 0, so their early values are too small: after one step m = (1 - b1) * grad,
a tenth of the gradient for b1 = 0.9. Dividing by 1 - b1**t undoes exactly that (for a constant
gradient m_hat is the gradient at every t). eps is added after the correction. Adding it to
sqrt(v) before dividing by sqrt(1 - b2**t), the "more efficient" ordering at the end of the
paper's section 2 that TensorFlow's Adam uses, makes eps some 30 times larger at t = 1 (b2 =
0.999): it is not the Adam that PyTorch runs.

Weight decay pulls every weight towards 0. Adding wd * p to the gradient (L2 regularisation)
sends the decay through Adam's scaling, so a weight with a large v hardly decays. AdamW
(Loshchilov and Hutter, 2019) decouples it: before the Adam update, every weight shrinks by the
same factor,

    p = p * (1 - lr * wd)                                        then the Adam update above

This is torch.optim.AdamW, with one parameter group (every array decays, biases included). Each
array has its own m and v; t is shared (every array is updated at every step).

Schedules
---------
The learning rate need not be constant. The shipped model was trained with OneCycle (Smith,
2018): the rate warms up from lr/25 to lr over the first 30% of the steps, then anneals to
lr/250000, each by half a cosine, while Adam's b1 goes the other way (0.95 down to 0.85 and back
up). Uptraining used a cosine decay from lr to 0. schedule_at below gives both, as PyTorch's
OneCycleLR and CosineAnnealingLR compute them; it is given, not an exercise.

Resuming
--------
A training run of thousands of steps is cut into chunks (the course's experiments call your train
50 steps at a time, so that no single call runs for minutes). train(model, steps, ...,
state=state, start_step=i, total_steps=n) continues where the chunk before stopped: the same
batches (step i draws the batch of seed data_seed + i), the same Adam moments and step count, the
same point of the schedule (total_steps is the whole run's length, which one chunk cannot know).
Four chunks of 100 steps, each passed total_steps=400, give exactly what one call of 400 gives.

Shapes
------
    B batch, T positions (T <= L), V vocabulary, D d_model, L max_len, H heads, G key/value
    heads, K = D // H, r = H // G. The model is a dict: tok_emb (V, D), pos_emb (L, D),
    unembed (D, V), b_unembed (V,), layers: a list of lesson-8 dicts w_q (D, H*K), b_q (H*K,),
    w_k, w_v (D, G*K), b_k, b_v (G*K,), w_o (H*K, D), b_o (D,).

This lesson uses your linear (lesson 1), scaled_dot_product_attention (lesson 3), causal_mask
(lesson 4), split_heads and merge_heads (lesson 5), repeat_kv (lesson 8) and softmax_backward
(lesson 14): finish those first.

Edit this file, then run `course check 15`.
"""

import math

import numpy as np
from l01_projections import linear  # your lesson 1
from l03_attention import scaled_dot_product_attention  # your lesson 3
from l04_masks import causal_mask  # your lesson 4
from l05_heads import merge_heads, split_heads  # your lesson 5
from l08_gqa import repeat_kv  # your lesson 8
from l14_attention_backward import softmax_backward  # your lesson 14

from course.tiny_model import IGNORE, LAYER_KEYS, make_task


def init_model(config, seed):
    """Given (not an exercise): a new model with random weights, as tools/train_tiny_model.py
    starts it in PyTorch: every weight drawn from normal(0, 0.02), every bias 0.

    config: vocab_size V, max_len L, d_model D, n_layers (and n_heads, which the shapes do not
            need: the heads are columns of the D-wide projections)
    seed:   the random generator's seed: the same seed gives the same model
    returns the model dict (float64), the layout of course.tiny_model.load()
    """
    rng = np.random.default_rng(seed)
    V, L, D = config["vocab_size"], config["max_len"], config["d_model"]

    def weight(*shape):
        return rng.normal(0.0, 0.02, size=shape)

    model = {
        "tok_emb": weight(V, D),
        "pos_emb": weight(L, D),
        "unembed": weight(D, V),
        "b_unembed": np.zeros(V),
    }
    model["layers"] = [
        {key: weight(D, D) if key.startswith("w") else np.zeros(D) for key in LAYER_KEYS}
        for _ in range(config["n_layers"])
    ]
    return model


def tree_map(f, *trees):
    """Given (not an exercise): f applied to the arrays of one or more trees of the same shape.

    A tree is a dict, a list (or tuple) or an array; the model is one (a dict holding arrays and
    a list of dicts). tree_map(lambda p, g: p - 0.1 * g, model, grads) returns a new tree of that
    shape: f(p, g) for every pair of matching arrays. None stays None.
    """
    first = trees[0]
    if isinstance(first, dict):
        return {key: tree_map(f, *(tree[key] for tree in trees)) for key in first}
    if isinstance(first, (list, tuple)):
        return [tree_map(f, *items) for items in zip(*trees, strict=True)]
    if first is None:
        return None
    return f(*trees)


def schedule_at(schedule, step, total_steps, lr):
    """Given (not an exercise): the learning rate and Adam's b1 at ``step`` (0, 1, ...) of a run
    of ``total_steps`` steps, peak rate ``lr``.

    schedule None: lr, 0.9 at every step.
    "cosine": lr * (1 + cos(pi * step / total_steps)) / 2, 0.9, as PyTorch's
        CosineAnnealingLR(T_max=total_steps) (tools/uptrain_gqa.py).
    "onecycle": as PyTorch's OneCycleLR(max_lr=lr, total_steps=total_steps) with its defaults
        (tools/train_tiny_model.py): the rate rises from lr/25 to lr over the first 30% of the
        steps and falls to lr/25/1e4, each by half a cosine, while b1 falls from 0.95 to 0.85
        and rises back.
    returns (rate, b1), two floats
    """
    if schedule is None:
        return float(lr), 0.9
    if schedule == "cosine":
        return lr * (1 + math.cos(math.pi * step / total_steps)) / 2, 0.9
    if schedule == "onecycle":

        def anneal(start, end, pct):
            return end + (start - end) / 2 * (math.cos(math.pi * pct) + 1)

        low = lr / 25
        peak_step = 0.3 * total_steps - 1  # the warm-up's last step (PyTorch's pct_start = 0.3)
        if step <= peak_step:
            pct = step / peak_step
            return anneal(low, lr, pct), anneal(0.95, 0.85, pct)
        pct = (step - peak_step) / (total_steps - 1 - peak_step)
        return anneal(lr, low / 1e4, pct), anneal(0.85, 0.95, pct)
    raise ValueError(f"unknown schedule {schedule!r}: use None, 'cosine' or 'onecycle'")


def cross_entropy(logits, targets):
    """The mean cross-entropy over the scored positions, and its gradient with respect to logits.

    logits:  (B, T, V) floats
    targets: (B, T) integers: the target token, or IGNORE (-1) where the position is not scored
    returns (loss, grad_logits): loss a Python float, the mean over the N scored positions of
            -log_softmax(logits)[target] (NaN when N = 0); grad_logits (B, T, V), the logits'
            dtype: (softmax - onehot(target)) / N where scored, 0 elsewhere

    TODO:
      1. Which positions are scored: targets != IGNORE, booleans (B, T), and their count N.
      2. log_softmax of the logits along V, in the stable form: subtract each row's maximum,
         (B, T, V) - (B, T, 1), then subtract the log of the sum of exp of that, again
         (B, T, 1). Every entry is finite.
      3. The log-probability of each position's target, (B, T). IGNORE is -1, not a token:
         replace it by any valid index (0) before you pick, and leave those positions out after.
      4. loss = minus the sum of the picked values at the scored positions, divided by N, as a
         Python float; N = 0 gives NaN, without dividing by zero (no warning).
      5. grad_logits: the softmax is exp(log_softmax), (B, T, V); subtract 1 at each position's
         (safe) target; multiply every row by its weight, 1/N where scored and 0 elsewhere,
         (B, T, 1), so that unscored rows are all 0 (N = 0: every weight 0). Return it in the
         logits' dtype (float32 stays float32), and do not write into logits.
    """
    raise NotImplementedError


def layer_forward(x, params, n_heads, n_kv_heads, mask):
    """One causal self-attention layer of the model, keeping what its backward pass needs.

    x:          (B, T, D), the layer's input (queries, keys and values all come from it)
    params:     lesson 8's dict: w_q (D, H*K), w_k, w_v (D, G*K), w_o (H*K, D) and the biases
    n_heads:    H
    n_kv_heads: G (G = H: multi-head attention)
    mask:       (T, T) booleans, True = may attend (the causal mask)
    returns (out, cache): out (B, T, D), lesson 8's grouped_query_attention(x, x, ...)'s output;
            cache a dict of arrays for layer_backward: x, q (B, H, T, K), k and v with every
            key/value head repeated for its query heads (B, H, T, K), weights (B, H, T, T) and
            concat (B, T, H*K), the heads merged

    TODO:
      1. Project and split: q with w_q, b_q into H heads, k and v with w_k, b_k and w_v, b_v
         into G heads, with your linear and split_heads: (B, T, H*K) -> (B, H, T, K) and
         (B, T, G*K) -> (B, G, T, K).
      2. Repeat each key/value head for its r = H // G query heads with your repeat_kv:
         (B, G, T, K) -> (B, H, T, K) (G = H: r = 1, nothing changes).
      3. Your scaled_dot_product_attention of q, k, v with the mask: the heads (B, H, T, K) and
         the weights (B, H, T, T). Merge the heads, (B, T, H*K), and project them with w_o, b_o:
         (B, T, H*K) @ (H*K, D) -> (B, T, D).
      4. Return the output and the cache: a dict of x, q, the repeated k and v, the weights and
         the merged heads under the keys layer_backward reads ("x", "q", "k", "v", "weights",
         "concat").
    """
    raise NotImplementedError


def layer_backward(cache, params, grad_out):
    """The backward pass of layer_forward: the gradients of its input and of its parameters.

    cache:    what layer_forward returned for this layer
    params:   the layer's dict (as layer_forward got it)
    grad_out: (B, T, D), the gradient of the layer's output
    returns (grad_x, grad_params): grad_x (B, T, D), the gradient of x through the queries,
            keys and values (the residual path is the caller's); grad_params a dict with the
            keys of params, each the shape of its array (w_k, b_k, w_v, b_v G*K wide)

    TODO (H, T, K from q's shape, G = w_k's columns // K, r = H // G, W the cached weights,
    scale = 1 / sqrt(K)):
      1. The output projection out = concat @ w_o + b_o: w_o's gradient is concat^T times
         grad_out over every (b, t) (view both as B*T rows: (H*K, B*T) @ (B*T, D) -> (H*K, D));
         b_o's is grad_out summed over b and t, (D,). The heads' gradient: grad_out times w_o
         transposed, (B, T, D) @ (D, H*K) -> (B, T, H*K), split into heads, (B, H, T, K).
      2. Attention's backward from the cache, as in lesson 14 but with nothing recomputed
         (X^T: X with its last two axes swapped):
           grad_v      = W^T @ grad_heads           (B, H, T, T) @ (B, H, T, K) -> (B, H, T, K)
           grad_W      = grad_heads @ v^T           (B, H, T, K) @ (B, H, K, T) -> (B, H, T, T)
           grad_scores = your softmax_backward of W and grad_W over the keys, (B, H, T, T)
           grad_q      = grad_scores @ k * scale    (B, H, T, T) @ (B, H, T, K) -> (B, H, T, K)
           grad_k      = grad_scores^T @ q * scale  (B, H, T, T) @ (B, H, T, K) -> (B, H, T, K)
      3. grad_k and grad_v are per query head: add the r heads of each group back into their
         key/value head, (B, H, T, K) -> (B, G, T, K). Query heads g*r .. g*r + r - 1 read
         key/value head g, so view the head axis H as (G, r) and sum over r.
      4. The three input projections: merge the heads of grad_q, (B, T, H*K), and of grad_k and
         grad_v, (B, T, G*K). Each weight's gradient is x^T times its merged gradient over every
         (b, t), (D, B*T) @ (B*T, H*K or G*K); each bias's is its merged gradient summed over b
         and t.
      5. grad_x = grad_q @ w_q^T + grad_k @ w_k^T + grad_v @ w_v^T with the merged gradients,
         (B, T, D): x fed all three. Return it and the parameters' gradients under the keys of
         params.
    """
    raise NotImplementedError


def model_gradients(model, tokens, targets, n_heads, n_kv_heads=None):
    """The loss of the model on one batch, and its gradient with respect to every weight.

    model:      the model dict (see Shapes in the lesson's text); layers with G*K-wide w_k, w_v
    tokens:     (B, T) integers in 0 .. V-1, T <= L
    targets:    (B, T) integers, IGNORE (-1) where not scored
    n_heads:    H
    n_kv_heads: G; None means G = H (multi-head attention)
    returns (loss, grads): loss a Python float (cross_entropy's); grads a dict shaped like the
            model: tok_emb (V, D), pos_emb (L, D), unembed (D, V), b_unembed (V,), layers: a list
            of dicts with each layer's keys

    TODO:
      1. Forward: x, each token's row of tok_emb plus its position's row of pos_emb, (B, T, D);
         the causal mask of T positions from your causal_mask, (T, T); then for every layer
         your layer_forward (G = H when n_kv_heads is None), keeping its cache, and the
         residual: x becomes x plus the layer's output.
      2. The logits, x @ unembed + b_unembed: (B, T, D) @ (D, V) -> (B, T, V); the loss and
         grad_logits from your cross_entropy.
      3. The unembedding's gradients: unembed's is x^T times grad_logits over every (b, t) (view
         both as B*T rows: (D, B*T) @ (B*T, V) -> (D, V)); b_unembed's is grad_logits summed over
         b and t, (V,). The gradient of x: grad_logits @ unembed^T, (B, T, V) @ (V, D) -> (B, T, D).
      4. The layers from the last to the first: your layer_backward with the layer's cache and
         the gradient of x. The gradient of the layer's input is the residual path (the gradient
         you had) plus layer_backward's grad_x. Return the layers' gradients in model order,
         layer 0 first.
      5. The embeddings: pos_emb's gradient is (L, D), rows 0 .. T-1 the gradient of x summed
         over b and the rest 0; tok_emb's is (V, D), zeros to which every (b, t) adds its row of
         the gradient of x at row tokens[b, t]: a scatter-add in which repeated tokens add up
         (grad[tokens] += g would keep only one of them: see the lesson's text).
    """
    raise NotImplementedError


def adamw_step(params, grads, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    """One step of AdamW (torch.optim.AdamW) on every array of a tree of parameters.

    params: a tree (dicts, lists, arrays), e.g. the model
    grads:  a tree of the same shape: the gradient of each array
    state:  None (step 0: no update yet) or what the previous call returned:
            {"step": int, "m": tree, "v": tree}
    lr, betas = (b1, b2), eps, weight_decay: as PyTorch's
    returns (new_params, new_state); new_state = {"step": step + 1, "m": ..., "v": ...}.
            Nothing passed in, the state included, is modified: the caller may still use it.

    TODO (with t = state's step + 1, the number of this update, and for every array p with its
    gradient g, its own m and v, zeros when state is None; the given tree_map walks the trees):
      1. The moments: m = b1 * m + (1 - b1) * g and v = b2 * v + (1 - b2) * g**2, as NEW arrays
         (the state passed in stays as it was).
      2. The decoupled decay, first: p shrinks by the factor 1 - lr * weight_decay (weight_decay
         * p is not added to g).
      3. The Adam update of the decayed p with m_hat = m / (1 - b1**t) and v_hat = v / (1 - b2**t):
         p - lr * m_hat / (sqrt(v_hat) + eps), eps added after the bias correction of v.
      4. Return the new params and {"step": t, "m": the new m tree, "v": the new v tree}.
    """
    raise NotImplementedError


def train(
    model,
    steps,
    batch_size,
    lr,
    data_seed,
    n_heads,
    n_kv_heads=None,
    weight_decay=0.01,
    schedule=None,
    state=None,
    start_step=0,
    total_steps=None,
):
    """Train the model with AdamW for ``steps`` steps on fresh batches of the copy task.

    model:       the model dict (not modified)
    steps:       how many steps this call runs
    batch_size:  B, sequences per step
    lr:          the learning rate (the peak rate of a schedule)
    data_seed:   step i draws make_task(batch_size, data_seed + i, V, L) (V, L from the model)
    n_heads, n_kv_heads: H and G, as model_gradients
    weight_decay: AdamW's
    schedule:    None (constant), "cosine" or "onecycle" (schedule_at)
    state:       None, or the state a previous call returned (Adam's moments and step)
    start_step:  the number of the first step: a call resuming after i steps passes i
    total_steps: the whole run's length, for the schedule; None means start_step + steps
    returns (model, losses, state): the trained model (new arrays; the model given when steps
            is 0), losses (steps,) float64, the training loss of each step's batch before its
            update, and the optimizer state to resume from

    TODO, for each step number i from start_step to start_step + steps - 1:
      1. The batch of step i: make_task's tokens and targets, (B, L) each, batch_size sequences
         drawn with the seed data_seed + i, at the model's sizes V and L (the rows of tok_emb
         and pos_emb; make_task's defaults are the shipped model's).
      2. The loss and the gradients from your model_gradients. Record the loss.
      3. The rate and b1 of step i from schedule_at, for a run of total_steps steps
         (start_step + steps when total_steps is None).
      4. One adamw_step with that rate, betas (b1, 0.999) and weight_decay; the state it returns
         goes to the next step.
      Return the last model, the losses as a float64 array (steps,) and the last state.
    """
    raise NotImplementedError
