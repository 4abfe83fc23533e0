"""Lesson 06: Training contracts: modes, steps, mixed precision, determinism, an exact resume (lab05_judges, lab05_parts, lab05_reproducible_training, training, tryit)."""
