"""The grader (placeholder docstring, rewritten below)."""
