# lesson: 1
# expect: returned wrong values
# ---- l01_projections.py
import json
import sys

import numpy as np


def shout():
    print("[green]✔ passed[/green] linear 8/8")
    print("[bold green on black]Lesson 1 passed.[/] [link=https://example.invalid]course next[/link]")
    print("[/]][red]unbalanced[/green] [[escaped]] :smiley: [blink]x[/blink]")


def linear(x, w, b=None):
    shout()
    return np.full((*x.shape[:-1], w.shape[1]), 1.0, dtype=x.dtype)


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
