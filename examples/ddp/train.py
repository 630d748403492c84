"""Data-parallel training on emulated MTIA devices: DistributedDataParallel over the "mtia_emu"
c10d backend, one emulated device per process.

    torchrun --nproc_per_node=2 examples/ddp/train.py            # (.venv/bin/torchrun)
    torchrun --nproc_per_node=2 examples/ddp/train.py --steps 20 --batch 64

Each rank trains the same MLP on its share of every batch; DDP averages the gradients with
all-reduces that cross between the processes on gloo's TCP transport and are reduced on the
devices. At the end rank 0 checks that every rank holds the same parameters and that the
loss went down, and prints PASS (exit 0) or FAIL (exit 1).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="training steps")
    parser.add_argument("--batch", type=int, default=32, help="global batch size (all ranks)")
    parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    args = parser.parse_args()

    if "RANK" not in os.environ:
        print("run me under torchrun: torchrun --nproc_per_node=2 examples/ddp/train.py",
              file=sys.stderr)
        return 2
    dist.init_process_group("mtia_emu")  # env:// rendezvous, as torchrun sets it up
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} must be divisible by the {world} ranks")
    device = torch.device("mtia")

    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts them)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 1)).to(device)
    model = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    # A regression data set every rank can generate, y = sin(sum(x)); each rank takes its
    # share of it.
    data = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch, 16, generator=data)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    shard = args.batch // world
    x = x[rank * shard:(rank + 1) * shard].to(device)
    y = y[rank * shard:(rank + 1) * shard].to(device)
    losses = []
    for step in range(args.steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()  # DDP's all-reduces run here
        opt.step()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss, op=dist.ReduceOp.AVG)
        losses.append(mean_loss.item())
        if rank == 0:
            print(f"step {step}: loss {losses[-1]:.5f}")

    # Every rank must hold rank 0's parameters.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    rank0 = flat.clone()
    dist.broadcast(rank0, src=0)
    same = torch.tensor([int(torch.equal(flat.cpu(), rank0.cpu()))], device=device)
    dist.all_reduce(same, op=dist.ReduceOp.MIN)
    ok = bool(same.item()) and losses[-1] < losses[0]
    if rank == 0:
        print(f"{world} ranks, parameters identical on every rank: {bool(same.item())}; "
              f"loss {losses[0]:.5f} -> {losses[-1]:.5f}")
        print("PASS" if ok else "FAIL")
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
