"""Lesson 10: The claims ledger: every verdict of the course in one table (tryit)."""
