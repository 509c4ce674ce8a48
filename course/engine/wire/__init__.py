"""The bytes between grader and worker: messages, tagged values, checks of what arrives."""
