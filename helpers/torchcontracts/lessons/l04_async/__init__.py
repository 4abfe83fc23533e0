"""Lesson 04: Asynchronous execution, honest timing and the roofline (lab04_intensity, lab04_judges, lab04_timing, roofline, tryit, workloads)."""
