"""Lesson 04: Asynchronous execution, honest timing and the roofline (lab04_timing, roofline, tryit, workloads)."""
