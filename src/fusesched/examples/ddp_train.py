"""A tiny PyTorch DistributedDataParallel training run (CPU, gloo), one process per rank.

fusesched sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK for every task, so the
default ``env://`` initialisation just works. Every rank prints the same parameter checksum
(DDP keeps the replicas identical) and the all-reduced sum 1 + 2 + … + WORLD_SIZE.
"""

import os
import sys

import torch
import torch.distributed as dist


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimiser = torch.optim.SGD(ddp.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(rank)  # each rank sees its own shard
    loss = torch.tensor(0.0)
    for _ in range(steps):
        x = torch.randn(64, 16, generator=data)
        y = x.sum(dim=1, keepdim=True)
        loss = ((ddp(x) - y) ** 2).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    node = os.environ.get("FUSESCHED_NODE", "?")
    # one write per line: under PYTHONUNBUFFERED print writes the text and its newline apart,
    # and the ranks of a node share one log
    sys.stdout.write(
        f"rank {rank}/{world} on {node}: loss {loss.item():.4f} "
        f"allreduce {total.item():.0f} checksum {checksum:.8f}\n"
    )
    sys.stdout.flush()
    dist.barrier()  # nobody tears the group down while a peer still talks to it
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # Skip C++ static destructors: gloo's background threads can still be joinable when they
    # run, and the process then aborts ("terminate called without an active exception", exit
    # -6) after the work is done — seen here about one run in five on 2 busy cores.
    os._exit(code)
