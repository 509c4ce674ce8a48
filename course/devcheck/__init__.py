"""`course dev check`: the course's consistency check for its maintainers."""
