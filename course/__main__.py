"""``python -m course`` is the ``course`` command.

``python -m`` puts the current folder first on sys.path. Run from a workspace, that would let a
learner's numpy.py or pytest.py replace the real ones inside the grader, so the folder is taken
off the path before anything else is imported.
"""

import os
import sys

_here = os.getcwd()
sys.path[:] = [p for p in sys.path if p not in ("", ".", _here)]

from course.cli import main  # noqa: E402

main()
