"""The grader's proxy of a learner's module: calls, replies, measured calls and errors."""
