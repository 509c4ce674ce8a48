# lesson: 3
# expect: ended the Python process (exit code 0)
# expect: l02_softmax
# ---- l02_softmax.py
import os

import numpy as np


def softmax(x, axis=-1):
    os._exit(0)  # lesson 3's attention calls this: the process ends with status 0


def logsumexp(x, axis=-1):
    raise NotImplementedError
# ---- l03_attention.py
<solution>
