"""Jupyter notebooks built from the lessons: student, instructor and solution versions."""
