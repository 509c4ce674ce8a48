"""Lesson 11: which heads matter?

The idea
--------
A trained transformer has many heads, and it is natural to assume that it needs them all. Michel,
Levy and Neubig (2019, "Are Sixteen Heads Really Better than One?") asked what happens when heads
are switched off AFTER training, at test time, with nothing retrained. Their answer: most single
heads can be removed with no significant loss, many layers work as well with one head as with
sixteen, and a few heads cannot be touched. This lesson builds their tools and uses them on the
course's tiny trained model (course.tiny_model): 2 attention-only layers of 4 heads.

Switching a head off: the head mask xi
--------------------------------------
Give every head h a number xi_h and multiply the head's output by it before W_O:

    MultiHead(x) = Concat(xi_1 head_1, ..., xi_H head_H) W_O + b_o

xi_h = 1 is the model as trained, xi_h = 0 removes head h, and any real xi_h in between (or
beyond) scales it. The same thing can be done in three places, because everything after the
attention weights is linear in the head's output:

    head_h = weights_h @ v_h               (B, T, S) @ (B, S, K) -> (B, T, K)
    out    = sum over h of head_h @ W_O[h*K:(h+1)*K, :]  + b_o

1. multiply head h's output (B, T, K) by xi_h;
2. multiply ROWS h*K .. (h+1)*K - 1 of W_O by xi_h: head h reads nothing else of W_O. Not the
   columns (those are output features, shared by every head), not rows h*D (W_O has only H*K
   rows), not the next head's block;
3. multiply head h's attention weights, AFTER the softmax, by xi_h: head_h = (xi_h weights_h) v_h.
   Scaling the scores BEFORE the softmax is something else: a zero score gives uniform weights,
   not zero ones.

b_o belongs to no head: it is added once, whatever the mask, so a model with every head removed
still outputs b_o. Masking AFTER W_O (scaling feature blocks of the output) is not a head mask
either: after W_O every output feature mixes all the heads. This lesson returns the attention
weights as the softmax made them, not multiplied by xi: they show what each head looks at.

The tiny model
--------------
course.tiny_model.load() returns a dict: tok_emb (V, D), pos_emb (L, D), unembed (D, V),
b_unembed (V,) and layers, a list of lesson-6 parameter dicts, one per layer. Its forward pass:

    x = tok_emb[tokens] + pos_emb[:T]                         (B, T) -> (B, T, D)
    for each layer l:  x = x + MultiHead_l(x) under a causal mask, with head mask xi[l]
    logits = x @ unembed + b_unembed                          (B, T, D) -> (B, T, V)

Its task: a random sequence of 24 tokens in which a segment of 4 to 8 tokens is copied later. The
model predicts the next token; it is scored only inside the copy, where the earlier occurrence
tells what comes next (targets holds -1 where a position is not scored). Solving that takes a
layer-0 head that looks at the previous token and a layer-1 head that finds the earlier occurrence
and copies the token after it (an "induction" circuit).

Measuring a head: ablation and importance
-----------------------------------------
Ablation: remove one head (xi_h = 0, every other xi 1) and see how much the loss rises and the
accuracy falls. Exact, but one forward pass per head, and it says nothing about heads removed
together.

Importance (Michel et al., eq. 2): how sensitive is the loss to the head's mask, on average over
the examples x (here: sequences)?

    I_h = E_x | dL(x) / dxi_h |          at xi = 1 (the trained model)

L(x) is the loss of ONE sequence (its mean cross-entropy over the scored positions), the absolute
value is taken per sequence and then averaged: a head that helps some sequences and hurts others
is still important, while |E_x dL/dxi_h| would let the two cancel. Michel et al. get the
derivative from backpropagation; we take it by central finite differences, which need only
forward passes:

    dL(x) / dxi_h  ~  ( L(x; xi_h = 1 + eps) - L(x; xi_h = 1 - eps) ) / (2 eps)

Its error shrinks like eps^2; the one-sided (L(1 + eps) - L(1)) / eps errs like eps: on the
grading model, at eps = 1e-3, thousands of times more. Last, importances of different layers are
not on the same scale, so each layer's row is divided by its l2 norm (as Michel et al. do, after
Molchanov et al. 2017): afterwards every layer's importances have l2 norm 1. Not by the sum, not
by one norm over the whole model.

The two measures need not agree. The derivative looks at xi near 1 (a small nudge), the
ablation jumps to xi = 0; and after the normalisation importances compare heads within a layer
better than across layers. `course show 11 --map` puts both side by side for the tiny model.

Pruning
-------
Greedy pruning removes the heads one at a time, least important first, and records the accuracy
after each removal: N heads give N + 1 accuracies, from the full model to the model with no head
left. Michel et al. found, on a WMT English-French transformer and on BERT fine-tuned for MNLI:

- one head at a time: most heads can be removed individually without a significant change, and
  some removals even improve the score;
- all but one head in a layer: on WMT most single layers can be reduced to one head at a cost of
  under 0.5 BLEU, some even gain; a few layers lose more, the last encoder-decoder attention
  layer most, more than 13 BLEU (Michel et al. 2019, table 2);
- globally, by importance: 20% (WMT) to 40% (BERT) of all heads can be pruned before the score
  drops noticeably; beyond that it falls fast.

What the tiny model can show, and what it cannot: with 8 heads you can see that some heads are
nearly free to remove while removing one of the heads the circuit relies on (a previous-token
head in layer 0, a copy head in layer 1) costs a large part of the accuracy, and you can compare
the importance ranking with the ablation ranking (`course show 11 --map` does, with your own
functions). It cannot show scale (the WMT model has 16 heads in each of 18 attention layers,
BERT base 12 in each of 12), BLEU, or what happens when a pruned model is trained further; the
numbers of a 2-layer model are not evidence about BERT.

Conventions (the same in every lesson)
--------------------------------------
    B batch    T query positions    S key/value positions    D model width    H heads
    K head width (D // H)    V vocabulary    L positions the model knows (max_len)

- Weights are stored (d_in, d_out) and applied as x @ w + b. A layer's params: w_q, w_k, w_v
  (D, H*K), w_o (H*K, D), optional b_q, b_k, b_v (H*K,), b_o (D,). Head h owns columns
  h*K:(h+1)*K of w_q, w_k, w_v and rows h*K:(h+1)*K of w_o.
- head_mask is (H,) for one layer, head_masks is (n_layers, H) for a model; None means all ones.
- The tiny model has N_HEADS = 4 heads per layer (course.tiny_model.config()["n_heads"]): every
  function that needs the number of heads takes n_heads=N_HEADS; pass it for another model.
- targets (B, T) holds the next token where a position is scored and -1 elsewhere; every sequence
  has at least one scored position.
- Masks are boolean, True = may attend. Functions never modify their inputs.

This lesson uses your linear (lesson 1), scaled_dot_product_attention (lesson 3), causal_mask
(lesson 4), split_heads and merge_heads (lesson 5). Finish those first. To try your functions on
the tiny model:

    from course.tiny_model import load, make_task
    model = load()
    tokens, targets, _ = make_task(500, seed=0)
    loss_change, accuracy_change = ablation_importance(model, tokens, targets)
"""

import numpy as np
from l01_projections import linear  # your lesson 1
from l03_attention import scaled_dot_product_attention  # your lesson 3
from l04_masks import causal_mask  # your lesson 4
from l05_heads import merge_heads, split_heads  # your lesson 5

N_HEADS = 4  # heads per layer of the tiny model: course.tiny_model.config()["n_heads"]
IGNORE = -1  # a target that is not scored


def scored_accuracy(logits, targets):
    """Share of the scored positions (targets != -1) whose largest logit is the target.

    logits:  (B, T, V)
    targets: (B, T) ints, -1 where a position is not scored
    returns a float: pooled over every scored position of every sequence
    """
    scored = targets != IGNORE  # (B, T)
    predicted = np.argmax(logits, axis=-1)  # (B, T, V) -> (B, T)
    return float(np.mean(predicted[scored] == targets[scored]))


def masked_multi_head_attention(x_q, x_kv, params, n_heads, head_mask, mask=None):
    """Lesson 6's multi-head attention with a head mask xi: head h's output times head_mask[h],
    before W_O. Returns (out, weights).

    x_q:       (B, T, D)
    x_kv:      (B, S, D)
    params:    dict with w_q, w_k, w_v (D, H*K), w_o (H*K, D), optional b_q, b_k, b_v, b_o
    n_heads:   H
    head_mask: (H,) real numbers xi_h (0 removes head h, 1 keeps it, anything else scales it)
    mask:      booleans broadcastable to (B, T, S) or (T, S), True = may attend; None = everywhere
    returns (out, weights):
      out     (B, T, D)     Concat(xi_1 head_1, ..., xi_H head_H) W_O + b_o
      weights (B, H, T, S)  each head's softmax weights, NOT multiplied by xi

    TODO:
      1. Do what lesson 6's multi_head_attention does up to the heads: project with linear
         (q from x_q, k and v from x_kv, each bias only when params has it), split_heads into
         (B, H, T, K) and (B, H, S, K), give the mask its head axis ((B, T, S) first, then
         (B, 1, T, S)), and run scaled_dot_product_attention: heads (B, H, T, K), weights
         (B, H, T, S).
      2. Make head_mask (H,) an array of the heads' dtype (so float32 stays float32) shaped
         (1, H, 1, 1), so that it lines up with the head axis of (B, H, T, K). Left as (H,),
         broadcasting would line it up with K, the last axis.
      3. Multiply the heads by it: head h's (B, T, K) output times xi_h.
      4. merge_heads: (B, H, T, K) -> (B, T, H*K), then linear with w_o and b_o: (B, T, D).
         b_o is added unscaled: it is no head's.
      5. Return (out, weights): the weights as the softmax made them, not multiplied by xi.
    """
    ### BEGIN SOLUTION
    # Everything up to the heads is lesson 6. The mask xi multiplies each head's output, the
    # (B, T, K) slice heads[:, h], before the Concat and W_O: that is the same as scaling rows
    # h*K:(h+1)*K of W_O, or the head's weights after the softmax (all three are linear in the
    # head's output). head_mask has shape (H,); reshaped to (1, H, 1, 1) it lines up with axis 1
    # of (B, H, T, K). Left as (H,), numpy would line it up with K, the last axis. It is cast to
    # the heads' dtype, so that a float64 mask does not promote float32 activations. b_o is added
    # once by linear, unscaled: no head owns it. The weights are returned unscaled.
    B, T, D = x_q.shape
    _, S, _ = x_kv.shape
    q = linear(x_q, params["w_q"], params.get("b_q"))  # (B, T, D) -> (B, T, H*K)
    k = linear(x_kv, params["w_k"], params.get("b_k"))  # (B, S, D) -> (B, S, H*K)
    v = linear(x_kv, params["w_v"], params.get("b_v"))  # (B, S, D) -> (B, S, H*K)
    q = split_heads(q, n_heads)  # (B, T, H*K) -> (B, H, T, K)
    k = split_heads(k, n_heads)  # (B, S, H*K) -> (B, H, S, K)
    v = split_heads(v, n_heads)  # (B, S, H*K) -> (B, H, S, K)
    if mask is not None:
        mask = np.broadcast_to(mask, (B, T, S))[:, None]  # -> (B, 1, T, S), the same for every head
    heads, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, H, T, K), (B, H, T, S)
    xi = np.asarray(head_mask, dtype=heads.dtype).reshape(1, n_heads, 1, 1)  # (H,) -> (1, H, 1, 1)
    heads = heads * xi  # head h's output times xi_h
    concat = merge_heads(heads)  # (B, H, T, K) -> (B, T, H*K)
    out = linear(concat, params["w_o"], params.get("b_o"))  # (B, T, H*K) -> (B, T, D)
    return out, weights
    ### END SOLUTION


def model_forward(model, tokens, head_masks=None, n_heads=N_HEADS):
    """The tiny model's forward pass with head masks. Returns (logits, weights).

    model:      dict with tok_emb (V, D), pos_emb (L, D), unembed (D, V), b_unembed (V,) and
                layers, a list of n_layers parameter dicts (lesson 6's)
    tokens:     (B, T) ints in 0 .. V-1, T <= L
    head_masks: (n_layers, H) real numbers, row l the head mask of layer l; None = all ones
    n_heads:    H, heads per layer (the tiny model has 4)
    returns (logits, weights):
      logits  (B, T, V)
      weights a list of n_layers arrays (B, H, T, T), layer 0 first

    TODO:
      1. The embeddings: for every token its row of tok_emb, plus the row of pos_emb of its
         position (row t is position t): (B, T) -> (B, T, D).
      2. If head_masks is None, use ones, (n_layers, H): every head kept.
      3. The causal mask of lesson 4 for T positions: (T, T), query i sees keys 0 .. i, the
         same for every layer.
      4. For each layer l, in order: your masked_multi_head_attention as self-attention
         (queries, keys and values all from x) with row l of head_masks and the causal mask;
         then x becomes x plus the layer's output (the residual: the layer ADDS to x, it does
         not replace it). Keep every layer's weights in a list.
      5. The unembedding: x times unembed plus b_unembed (your linear does it):
         (B, T, D) -> (B, T, V).
      6. Return (logits, the list of weights).
    """
    ### BEGIN SOLUTION
    # Token embedding plus position embedding, then every layer adds its attention output to
    # the residual stream x (x = x + out, not x = out: the next layer and the unembedding read the
    # sum of everything written so far), then the unembedding. Layer l gets row l of the head
    # masks. The causal mask is the same (T, T) for every layer.
    B, T = tokens.shape
    n_layers = len(model["layers"])
    if head_masks is None:
        head_masks = np.ones((n_layers, n_heads))
    x = model["tok_emb"][tokens] + model["pos_emb"][:T]  # (B, T) -> (B, T, D)
    mask = causal_mask(T)  # (T, T): query i sees keys 0 .. i
    all_weights = []
    for layer, params in enumerate(model["layers"]):
        out, weights = masked_multi_head_attention(x, x, params, n_heads, head_masks[layer], mask)
        x = x + out  # the residual connection: (B, T, D)
        all_weights.append(weights)  # (B, H, T, T)
    logits = linear(x, model["unembed"], model["b_unembed"])  # (B, T, D) -> (B, T, V)
    return logits, all_weights
    ### END SOLUTION


def sequence_losses(logits, targets):
    """Each sequence's loss: the mean cross-entropy over its scored positions.

    logits:  (B, T, V)
    targets: (B, T) ints, the next token where scored, -1 elsewhere
    returns (B,): for sequence b, the mean over the scored t of -log softmax(logits[b, t])[target]

    TODO:
      1. A stable log-softmax over the vocabulary (the last axis): with m each row's maximum,
         log_probs = z - m - log(sum over the vocabulary of exp(z - m)), (B, T, V). Never
         exponentiate the raw logits: exp(1000) is inf.
      2. Which positions are scored: targets != -1, (B, T) booleans. A target of -1 is not a
         token: as an index it would pick the LAST entry of the vocabulary. Replace it (by 0,
         say) before indexing, and count only the scored positions.
      3. Each position's log-probability of its own target: (B, T, V) -> (B, T), one entry of
         the vocabulary axis per position.
      4. Per sequence: minus the sum over its scored positions divided by their number, (B,).
         Not the mean over all T positions, not one mean pooled over the whole batch.
    """
    ### BEGIN SOLUTION
    # Log-softmax in the stable form z - m - log(sum(exp(z - m))): the largest entry becomes
    # exp(0) = 1, so nothing overflows. Unscored positions hold -1, which as an index would pick
    # the last token, so they get index 0 and are then left out of both the sum and the count.
    # Each sequence is averaged over its own scored positions: sequences with more scored
    # positions do not weigh more.
    m = np.max(logits, axis=-1, keepdims=True)  # (B, T, 1)
    log_probs = logits - m - np.log(np.sum(np.exp(logits - m), axis=-1, keepdims=True))  # (B, T, V)
    scored = targets != IGNORE  # (B, T)
    index = np.where(scored, targets, 0)[..., None]  # (B, T, 1), -1 replaced by 0
    picked = np.take_along_axis(log_probs, index, axis=-1)[..., 0]  # (B, T, V) -> (B, T)
    total = np.sum(np.where(scored, -picked, 0.0), axis=-1)  # (B,)
    return total / np.sum(scored, axis=-1)
    ### END SOLUTION


def ablation_importance(model, tokens, targets, n_heads=N_HEADS):
    """What removing each head alone costs. Returns (loss_change, accuracy_change).

    model, tokens, targets: as for model_forward and sequence_losses
    n_heads: H
    returns two arrays (n_layers, H):
      loss_change[l, h]     = loss with head (l, h) removed  - loss of the full model
      accuracy_change[l, h] = accuracy with head (l, h) removed - accuracy of the full model
    where loss = the mean over the sequences of sequence_losses, and accuracy = scored_accuracy
    (pooled over every scored position). An important head has a large positive loss change and
    a negative accuracy change.

    TODO:
      1. The full model: its logits from your model_forward with no head masks; its loss (the
         mean over the sequences of sequence_losses) and its scored_accuracy.
      2. For every layer l and head h: head masks of ones (n_layers, H) with a single 0 at
         [l, h] (that head removed alone, every other kept); the loss and accuracy of that
         forward pass, minus the full model's.
      3. Return (loss_change, accuracy_change), both (n_layers, H), row l for layer l. Removed
         minus full: a head the model needs has a positive loss change.
    """
    ### BEGIN SOLUTION
    # One forward pass per head, with that head's mask entry 0 and every other 1: a head removed
    # alone. The change is "removed minus full", so a head the model needs has a positive loss
    # change and a negative accuracy change.
    n_layers = len(model["layers"])
    logits, _ = model_forward(model, tokens, None, n_heads)
    loss = np.mean(sequence_losses(logits, targets))
    accuracy = scored_accuracy(logits, targets)
    loss_change = np.zeros((n_layers, n_heads))
    accuracy_change = np.zeros((n_layers, n_heads))
    for layer in range(n_layers):
        for head in range(n_heads):
            masks = np.ones((n_layers, n_heads))
            masks[layer, head] = 0.0  # head (layer, head) removed, every other kept
            logits, _ = model_forward(model, tokens, masks, n_heads)
            loss_change[layer, head] = np.mean(sequence_losses(logits, targets)) - loss
            accuracy_change[layer, head] = scored_accuracy(logits, targets) - accuracy
    return loss_change, accuracy_change
    ### END SOLUTION


def head_importance(model, tokens, targets, eps=1e-3, n_heads=N_HEADS):
    """Michel et al.'s head importance I_h = E_x |dL(x)/dxi_h|, normalised per layer.

    model, tokens, targets: as for model_forward and sequence_losses
    eps:     the finite-difference step
    n_heads: H
    returns (n_layers, H) float64: each layer's row has l2 norm 1 (a row of zeros stays zeros)

    TODO:
      1. For every layer l and head h: two head masks of ones (n_layers, H), one with
         1 + eps at [l, h], one with 1 - eps there.
      2. Their per-sequence losses, sequence_losses of each forward pass: two (B,) arrays.
      3. The derivative of each sequence's loss by central differences:
         (L_plus - L_minus) / (2 eps), (B,). Not (L_plus - L_full) / eps: one-sided, it errs
         by about eps / 2 times the curvature.
      4. I[l, h] = the mean over the sequences of the ABSOLUTE derivatives: abs first, then
         the mean (the mean first would let a head that helps some sequences and hurts others
         cancel out).
      5. Normalise each layer: divide row l by its l2 norm, sqrt(sum over h of I[l, h]^2).
         Not by the sum, not by one norm over the whole model. A row whose norm is 0 stays 0
         (no NaN).
    """
    ### BEGIN SOLUTION
    # Central differences: the curvature terms of L(1 + eps) and L(1 - eps) cancel, leaving an
    # error of order eps^2 instead of eps. The derivative is taken per sequence (L(x) is one
    # sequence's loss), its absolute value per sequence, and only then the mean over the batch:
    # E|dL| counts a head that helps one sequence and hurts another, |E dL| would let them
    # cancel. Each layer's row is divided by its own l2 norm, so layers become comparable; a
    # layer whose every derivative is 0 stays 0 instead of 0/0.
    n_layers = len(model["layers"])
    importance = np.zeros((n_layers, n_heads))
    for layer in range(n_layers):
        for head in range(n_heads):
            up = np.ones((n_layers, n_heads))
            down = np.ones((n_layers, n_heads))
            up[layer, head] = 1.0 + eps
            down[layer, head] = 1.0 - eps
            loss_up = sequence_losses(model_forward(model, tokens, up, n_heads)[0], targets)  # (B,)
            loss_down = sequence_losses(model_forward(model, tokens, down, n_heads)[0], targets)
            derivative = (loss_up - loss_down) / (2 * eps)  # (B,): dL(x)/dxi per sequence
            importance[layer, head] = np.mean(np.abs(derivative))  # E_x |dL(x)/dxi|
    norm = np.sqrt(np.sum(importance**2, axis=1, keepdims=True))  # (n_layers, 1)
    return np.divide(importance, norm, out=np.zeros_like(importance), where=norm > 0)
    ### END SOLUTION


def pruning_curve(model, tokens, targets, importance):
    """Greedy pruning, least important head first. Returns (order, accuracies).

    model, tokens, targets: as for model_forward and sequence_losses
    importance: (n_layers, H) one score per head (head_importance's, or an ablation cost);
                its shape gives n_layers and H
    returns (order, accuracies):
      order      (N, 2) ints, N = n_layers * H: the (layer, head) removed at step 1, 2, ..., N,
                 in ascending importance; equal scores: lower layer first, then lower head
      accuracies (N + 1,) floats: scored_accuracy with the first k heads of order removed, for
                 k = 0 (the full model) .. N (every head removed)

    TODO:
      1. N = n_layers * H heads, read from importance's shape. Order them by ascending
         importance (the least important goes first), ties lower layer first, then lower head.
         Flattening the scores row by row numbers head (layer, head) layer * H + head, so a sort
         that keeps equal scores in their original order (a stable sort) gives those ties.
      2. Turn each flat index i back into its (layer, head): the quotient and the remainder of
         i by H -> order, (N, 2) ints.
      3. Start from head masks of ones (n_layers, H). Record the full model's accuracy, then for
         each (layer, head) of order, in turn: set that mask entry to 0 (heads removed earlier
         stay removed) and record the scored_accuracy of your model_forward with those masks.
      4. Return (order, accuracies), accuracies (N + 1,): the full model first, the model with
         no head left last.
    """
    ### BEGIN SOLUTION
    # Ascending: the least important head goes first. argsort(kind="stable") keeps equal scores
    # in index order, and row-major flattening numbers head (layer, head) layer * H + head, so
    # ties go lower layer first, then lower head. The masks accumulate: step k removes one more
    # head, the earlier ones stay removed. accuracies[0] is the full model.
    importance = np.asarray(importance, dtype=np.float64)
    n_layers, n_heads = importance.shape
    flat = np.argsort(importance.reshape(-1), kind="stable")  # (N,) ascending, ties in index order
    order = np.stack(np.divmod(flat, n_heads), axis=1).astype(np.int64)  # (N,) -> (N, 2)
    masks = np.ones((n_layers, n_heads))
    accuracies = [scored_accuracy(model_forward(model, tokens, masks, n_heads)[0], targets)]
    for layer, head in order:
        masks[layer, head] = 0.0  # one more head removed
        accuracies.append(scored_accuracy(model_forward(model, tokens, masks, n_heads)[0], targets))
    return order, np.array(accuracies)
    ### END SOLUTION
