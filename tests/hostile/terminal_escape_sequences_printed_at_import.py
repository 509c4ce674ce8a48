# lesson: 1
# expect: still raises NotImplementedError
# ---- l01_projections.py
import json
import sys

import numpy as np


def shout():
    sys.stdout.write("\x1b[2J\x1b[H")  # clear the screen, cursor home
    sys.stdout.write("\x1b[10A\x1b[2K\x1b[1;32m✔ passed\x1b[0m 18/18\n")  # up 10 lines, erase, green
    sys.stdout.write("\x1b]8;;https://example.invalid\x1b\\click me\x1b]8;;\x1b\\\n")  # OSC 8 link
    sys.stdout.write("\x1b]0;all checks passed\x07")  # window title
    sys.stdout.write("\x1bc\x1b[?1049h\x1b[?25l")  # reset, alternate screen, hide the cursor
    sys.stdout.write("\x9b2J\x9dtitle\x9c\r\x08\x08\x08")  # 8-bit C1 CSI/OSC, carriage return, backspaces
    sys.stdout.write("\x1bP+q544e\x1b\\")  # DCS: asks the terminal to answer (a query)
    sys.stdout.flush()


shout()


def linear(x, w, b=None):
    raise NotImplementedError


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
