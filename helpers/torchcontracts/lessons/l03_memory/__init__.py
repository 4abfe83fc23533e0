"""Lesson 03: Memory contracts and a model of the CUDA caching allocator (alloc, alloc_config, alloc_report, alloc_trace, alloc_viz, lab03_memory, memory, tryit)."""
