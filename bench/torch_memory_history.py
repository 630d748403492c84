#!/usr/bin/env python3
"""What recording the allocator's history costs: one training step of the torch_step.py MLP
on the emulated device with torch.mtia.record_memory_history off, "state" and "all" (Python
stacks, then Python and C++ stacks), in the same run, and the snapshot's size and time.

    .venv/bin/python bench/torch_memory_history.py [--steps 20] [--rounds 3]

Recording is host work (a stack is gathered at every allocation, and at every free for "all"),
so the timing model is off: the host wall time per step is what it changes. Configurations
run interleaved, round by round, so a change in the machine's load hits them alike; the
ratio is each configuration's median step over the "off" median of the same round. The
snapshot time includes symbolizing the stacks (C++ frames are slow to symbolize).
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("MTIA_EMU_TIMING", "0")

import torch  # noqa: E402
import torch_mtia_emu  # noqa: E402,F401

CONFIGS = [("off", None, "python"), ("state", "state", "python"), ("all", "all", "python"),
           ("all+C++", "all", "all")]


def make(dev):
    torch.manual_seed(0)
    w = 256
    model = torch.nn.Sequential(
        torch.nn.Linear(128, w), torch.nn.ReLU(), torch.nn.Linear(w, w), torch.nn.Tanh(),
        torch.nn.Linear(w, w), torch.nn.SiLU(), torch.nn.LayerNorm(w),
        torch.nn.Linear(w, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(64, 128).to(dev)
    y = torch.randint(0, 10, (64,)).to(dev)
    return model, opt, x, y


def step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.steps < 1 or args.rounds < 1:
        ap.error("--steps and --rounds must be at least 1")
    dev = torch.device("mtia")
    model, opt, x, y = make(dev)
    for _ in range(3):
        step(model, opt, x, y).item()
    print(f"load average {os.getloadavg()[0]:.1f}; {args.steps} steps a configuration, "
          f"{args.rounds} rounds")
    print("| round | config | median step ms | vs off | history entries | snapshot ms |")
    print("|---:|---|---:|---:|---:|---:|")
    for r in range(args.rounds):
        # Each round starts with another configuration, so none always runs first.
        order = CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]
        rows = {}
        for name, enabled, stacks in order:
            torch.mtia.record_memory_history(enabled, stacks, 0)
            walls = []
            for _ in range(args.steps):
                t = time.perf_counter()
                step(model, opt, x, y).item()
                walls.append(time.perf_counter() - t)
            t = time.perf_counter()
            snap = torch.mtia.snapshot()
            snap_ms = (time.perf_counter() - t) * 1e3
            torch.mtia.record_memory_history(None)
            entries = len(snap["device_traces"][0]) if enabled == "all" else 0
            rows[name] = (statistics.median(walls) * 1e3, entries, snap_ms)
        off = rows["off"][0]
        for name, _, _ in CONFIGS:
            med, entries, snap_ms = rows[name]
            print(f"| {r + 1} | {name} | {med:.2f} | {med / off:.2f} | {entries} | "
                  f"{snap_ms:.1f} |")

if __name__ == "__main__":
    main()
