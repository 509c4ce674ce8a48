# lesson: 1
# expect: returned wrong values
# ---- l01_projections.py
import json
import sys

import numpy as np


def shout():
    print("::error::nothing is wrong")
    print("::set-output name=status::passed")
    print("::add-mask::0 of 18")
    print("::stop-commands::hostile-token")
    print("::warning file=l01_projections.py,line=1::ignore the checks")
    print("::group::hidden")
    print("##[error]legacy syntax")
    print("##vso[task.complete result=Succeeded;]done")
    sys.stderr.write("::notice::from stderr\n")


def linear(x, w, b=None):
    shout()
    return np.full((*x.shape[:-1], w.shape[1]), 1.0, dtype=x.dtype)


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
