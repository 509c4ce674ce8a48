"""``python -m course`` is the ``course`` command."""

from course.cli import main

main()
