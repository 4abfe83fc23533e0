"""Lesson 09: Distributed training on real process groups: torchrun, collectives, DDP, FSDP2, timeouts (dist_procs, dist_tools, lab07_ddp, lab07_judges, rank_runner, tryit)."""
