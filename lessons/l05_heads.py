"""Lesson 5: splitting and merging heads.

The idea
--------
The formula of multi-head attention (Vaswani et al. 2017) is

    MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W_O,    head_h = Attention(Q W_Qh, K W_Kh, V W_Vh)

Lesson 1 fused the H per-head weights W_Qh (D, K) into one (D, H*K) matrix, head h owning
columns h*K:(h+1)*K, so one product x @ w_q projects every head at once: (B, T, H*K), all the
heads' queries side by side along the last axis. Lesson 3's attention, though, wants each head as
its own stack of (T, K) matrices, (B, H, T, K): it treats every leading axis as a batch, so all
B*H heads are then attended in one call. split_heads makes that move. After attention,
merge_heads makes the way back: (B, H, T, K) -> (B, T, H*K), which is exactly
Concat(head_1, ..., head_H) along the features, ready for W_O.

One token's row of D = H*K numbers, with H = 2 heads of K = 3:

    [a0 a1 a2 | b0 b1 b2]          head 0 owns the a's, head 1 the b's

Splitting is a reshape, then a transpose:

    (B, T, D) --reshape--> (B, T, H, K) --swap axes 1 and 2--> (B, H, T, K)

Why both steps? A reshape never moves a number: it reads the array in memory order (last axis
fastest) and pours the numbers into the new shape. (B, T, D) -> (B, T, H, K) cuts each row of D
numbers into H consecutive blocks of K: exactly the ownership we want. Only the order of the axes
is then wrong, and np.swapaxes(x, 1, 2) fixes it. A reshape straight to (B, H, T, K) instead cuts
the T*D numbers of each batch element into H chunks of T*K: "head 0" gets the whole rows of the
first tokens, positions and heads get mixed. The shape is right and no error is raised; only the
numbers are wrong. With T = 2 tokens, H = 2 heads of K = 1 (D = 2):

    x[0] = [[a0, b0],       split_heads:                head 0 = [[a0], [a1]]   (column 0)
            [a1, b1]]                                   head 1 = [[b0], [b1]]   (column 1)
                            reshape to (1, 2, 2, 1):    head 0 = [[a0], [b0]]   (token 0's row!)

Another tempting layout, the interleaved split (reshape to (B, T, K, H), then move H forward),
gives head h the columns h, h + H, h + 2H, ...: a valid-looking split, but not the one the weights
were trained with. Lesson 1's fused weights and PyTorch's nn.MultiheadAttention both give each
head one contiguous block of K columns.

Merging is the inverse, steps in reverse order: swap the axes back, (B, H, T, K) -> (B, T, H, K),
then reshape (B, T, H, K) -> (B, T, H*K). Again the transpose must come first: a reshape of
(B, H, T, K) straight to (B, T, H*K) fills each output row with the K numbers of H different
tokens of one head, instead of one token's K numbers from each of the H heads.

Round trip: merge_heads(split_heads(x, H)) == x. A round trip alone proves little, though: a
reshape without a transpose in both functions round-trips too. What pins the layout down is
split_heads(x, H)[:, h] == x[..., h*K:(h+1)*K], and the grader checks exactly that.

The head width is K = D // H, so H must divide D. If it does not, no split is right: raise a
ValueError that names both numbers, e.g. "d_model 10 is not divisible by n_heads 4", rather than
let a reshape fail with "cannot reshape array of size 60 into shape (2,3,4,2)" or, worse, silently
drop columns.

In PyTorch code the same two moves are commonly written x.view(B, T, H, K).transpose(1, 2) to
split and out.transpose(1, 2).reshape(B, T, H * K) to merge (nanoGPT and Hugging Face's Llama
split this way). That is an illustration of the reshape, not the source of nn.MultiheadAttention,
which works sequence first inside: its q is (T, B, D), split with
q.view(T, B * H, K).transpose(0, 1). The layout is the same, though: each head owns one
contiguous block of K features.

Conventions (the same in every lesson)
--------------------------------------
    B batch    T positions    D model width    H heads    K head width (D // H)

- Arrays are batch first: x is (B, T, D); heads are (B, H, T, K). Head h owns columns
  h*K:(h+1)*K of the model width.
- Functions never modify their inputs, and return the dtype of their inputs.

Edit this file, then run `course check 5`.
"""

import numpy as np


def split_heads(x, n_heads):
    """Split the last axis into heads: (B, T, D) -> (B, H, T, K), head h owns columns h*K:(h+1)*K.

    x:       (B, T, D)
    n_heads: H, which must divide D (raise ValueError naming D and H if it does not)
    returns  (B, H, T, K) with K = D // H, same dtype as x, where
             out[:, h] == x[:, :, h*K:(h+1)*K]

    TODO:
      1. Unpack the sizes: B, T, D = x.shape, and H = n_heads.
      2. If D % H != 0, raise ValueError with a message that names both numbers.
      3. K = D // H. Reshape (B, T, D) -> (B, T, H, K): each row of D splits into H blocks of K.
      4. Move the head axis before T by swapping axes 1 and 2: (B, T, H, K) -> (B, H, T, K).
         (A reshape straight to (B, H, T, K) mixes positions and heads: the swap is required.)
    """
    raise NotImplementedError


def merge_heads(x):
    """Merge the heads back into the features: (B, H, T, K) -> (B, T, H*K), the Concat of the formula.

    x:       (B, H, T, K)
    returns  (B, T, H*K), same dtype as x, where out[:, :, h*K:(h+1)*K] == x[:, h]

    TODO:
      1. Unpack the sizes: B, H, T, K = x.shape.
      2. Move the head axis back after T by swapping axes 1 and 2: (B, H, T, K) -> (B, T, H, K).
      3. Reshape (B, T, H, K) -> (B, T, H*K): for each token, the H blocks of K side by side.
         (Reshaping (B, H, T, K) straight to (B, T, H*K) glues the wrong numbers together.)
         After the swap the array is no longer contiguous in memory; reshape copies it, which
         is fine.
    """
    raise NotImplementedError
