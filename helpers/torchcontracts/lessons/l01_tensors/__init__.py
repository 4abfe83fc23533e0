"""Lesson 01: Tensor contracts: storage, strides, views, dtypes, with a stride explorer (lab01_strides, tryit, viz)."""
