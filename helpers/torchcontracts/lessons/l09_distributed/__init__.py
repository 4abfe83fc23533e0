"""Lesson 09: Distributed training on real process groups: torchrun, collectives, DDP, FSDP2, timeouts (dist_tools, lab07_ddp, rank_runner, tryit)."""
