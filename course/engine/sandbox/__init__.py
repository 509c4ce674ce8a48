"""Where learner code runs and what confines it."""
