"""The instructor's services: notebooks built from the lessons, and grading a class (submission
bundles, the gradebook, its exports and similarity flags)."""
