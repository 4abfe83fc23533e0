"""Lesson 00: Start here: your machine's contract (tryit)."""
