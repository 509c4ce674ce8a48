"""The warm grader: a server that keeps the grading imports loaded, and its client."""
