"""One pytest run over a lesson's grading tests, and the report it makes."""
