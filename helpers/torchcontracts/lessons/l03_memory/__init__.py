"""Lesson 03: Memory contracts and a model of the CUDA caching allocator (alloc, alloc_viz, lab03_memory, memory, tryit)."""
