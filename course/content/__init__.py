"""The course's data (catalog, glossary, misconceptions, the grading manifest) and their readers."""
