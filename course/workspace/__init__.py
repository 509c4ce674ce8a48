"""The learner's folder and what the commands do there."""
