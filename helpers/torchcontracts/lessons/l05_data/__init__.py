"""Lesson 05: Data pipeline contracts: workers, seeding, start methods, throughput (data_pipeline, throughput, tryit)."""
