"""Lesson 02: The autograd engine, proved on live graphs (graph, lab02_autograd, lab02_judges, lab02_parts, tryit)."""
