"""The instructor's and maintainer's services: notebooks, submission bundles, class grading and
its exports, and the course consistency check (`course dev check`)."""
