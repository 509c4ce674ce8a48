# lesson: 6
# expect: took longer than 2 s
# expect: l05_heads
# ---- l05_heads.py
import numpy as np

while True:  # lesson 6 imports this file: the import never finishes
    pass


def split_heads(x, n_heads):
    raise NotImplementedError


def merge_heads(x):
    raise NotImplementedError
# ---- l06_multi_head.py
<solution>
