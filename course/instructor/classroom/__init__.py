"""Grading a class: submission bundles, the gradebook, its exports and similarity flags."""
