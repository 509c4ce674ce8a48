# lesson: 1
# expect: ValueError
# expect: line 7
# ---- l01_projections.py
# Beyond the brief: the hostile text travels in the exception message (shown in a check's
# panel, not in "Your code printed"), with a newline so a workflow command starts its own line.
import numpy as np


def linear(x, w, b=None):
    raise ValueError("\x1b[2J\x1b[H\x1b]0;passed\x07[green]✔ passed[/green]\n::error::fake\n"
                     "::set-output name=status::passed\n\x9b2J\x1b]8;;https://example.invalid\x1b\\x")


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
