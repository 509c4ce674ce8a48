"""The grading engine: runs a lesson's tests against a learner's folder and returns data.

Never imports rich or typer. Submodules are imported where they are used so that the worker
(which imports ``course.engine.wire.messages``) and the CLI start fast.
"""
