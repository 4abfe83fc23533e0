"""Lesson 07: Compile and profile: what torch.compile really does, and when it pays (compile_tools, tryit)."""
