"""`course bench`: the learner's code timed beside numpy and PyTorch references."""
