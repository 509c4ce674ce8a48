# lesson: 1
# expect: did not return within 1 s
# ---- l01_projections.py
def linear(x, w, b=None):
    while True:
        pass


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
