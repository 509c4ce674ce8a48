"""The code inside the confined worker process."""
