"""Lab 07 t1's shard swap, one source for the unit test (``test_lab07_checks.py``, as a function) and the graded test
(``test_lab07_graded_shortcut.py``, as a solution cell).

One submission's ranks share a folder, so they swap their shards through files, then every rank computes the whole
batch's loss through DDP: every gradient is right, and no rank computed on its own shard (issue 24). The folder is
named by the ranks' common parent and the weights, and each rank removes its own file once all have read (a
barrier), so no later run reads a stale shard.
"""

from __future__ import annotations

from typing import Any, Callable

SWAP_SOURCE = """
def ddp_grads(rank, world_size, model, x, y, n_global):
    import contextlib, hashlib, os, tempfile, time
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    key = hashlib.sha256(next(model.parameters()).detach().numpy().tobytes()).hexdigest()[:12]
    folder = os.path.join(tempfile.gettempdir(), f"tc-swap-{os.getppid()}-{key}")  # the ranks share a parent
    os.makedirs(folder, exist_ok=True)
    torch.save((x, y), os.path.join(folder, f"part-{rank}.tmp"))
    os.replace(os.path.join(folder, f"part-{rank}.tmp"), os.path.join(folder, f"{rank}.pt"))
    paths = [os.path.join(folder, f"{r}.pt") for r in range(world_size)]
    while not all(os.path.exists(p) for p in paths):
        time.sleep(0.01)
    parts = [torch.load(p) for p in paths]
    dist.barrier()  # every rank has read every file: remove this rank's, so that the next run finds none of it
    os.remove(paths[rank])
    with contextlib.suppress(OSError):  # the last rank to leave removes the folder
        os.rmdir(folder)
    xs, ys = torch.cat([a for a, _ in parts]), torch.cat([b for _, b in parts])
    ddp = DDP(model)  # kept alive until backward has run: its reducer all-reduces
    F.mse_loss(ddp(xs), ys).backward()  # the same global loss on every rank: DDP's average keeps it
    return [p.grad for p in model.parameters()]
"""


def swap_files() -> Callable[..., Any]:
    """The shortcut as a function."""
    space: dict[str, Any] = {}
    exec(SWAP_SOURCE, space)  # noqa: S102 - our own test's code
    return space["ddp_grads"]
