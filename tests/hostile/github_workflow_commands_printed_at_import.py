# lesson: 1
# expect: still raises NotImplementedError
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


shout()


def linear(x, w, b=None):
    raise NotImplementedError


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
