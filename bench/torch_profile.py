#!/usr/bin/env python3
"""What torch.profiler costs on the emulated device: the host time of a training step while a
profile records, against the same step unprofiled, in the same run.

    .venv/bin/python bench/torch_profile.py [--steps 10] [--rounds 5] [--no-timing]

The step is the demo's (torch_mtia_emu.demo.train_step on its MLP, 32-128-128-4, batch 64):
forward, backward and an SGD step with momentum, ended by reading the loss (so the device's
work is inside the step). Each round times --steps steps unprofiled, then --steps steps inside
torch.profiler.profile with ProfilerActivity.CPU only, then with CPU and MTIA (the device's
activities); starting and stopping a profile and its post-processing are outside the timed
steps and reported on their own. Printed: the median step host time of each mode and the
ratios to the unprofiled step.
"""
import argparse
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

import torch_mtia_emu
from torch_mtia_emu import demo, zoo


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10, help="steps per mode and round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (modes interleaved)")
    ap.add_argument("--no-timing", action="store_true", help="functional device (no timing)")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.rounds < 1:
        ap.error("--steps and --rounds must be at least 1")

    torch.set_num_threads(1)
    torch_mtia_emu.init(timing=not args.no_timing)
    dev = torch.device("mtia")
    points, labels = zoo.make_blobs(64, 32, 4, 0)
    model = zoo.make_mlp(32, 128, 4, 0).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = points.to(dev), labels.to(dev)

    def timed_steps(n):
        walls = []
        for _ in range(n):
            t0 = time.perf_counter()
            demo.train_step(model, opt, x, y).item()
            walls.append(time.perf_counter() - t0)
        return walls

    timed_steps(3)  # warm-up: momentum buffers, kernel caches
    modes = {"unprofiled": None, "CPU": [ProfilerActivity.CPU],
             "CPU+MTIA": [ProfilerActivity.CPU, ProfilerActivity.MTIA]}
    walls = {m: [] for m in modes}
    overhead = {m: [] for m in modes if modes[m]}
    device_events = 0
    for _ in range(args.rounds):
        for mode, activities in modes.items():
            if activities is None:
                walls[mode] += timed_steps(args.steps)
                continue
            t0 = time.perf_counter()
            p = profile(activities=activities)
            p.start()
            t1 = time.perf_counter()
            walls[mode] += timed_steps(args.steps)
            t2 = time.perf_counter()
            p.stop()
            events = p.events()
            t3 = time.perf_counter()
            overhead[mode].append((t1 - t0) + (t3 - t2))
            if mode == "CPU+MTIA":
                device_events = sum(1 for e in events
                                    if e.device_type == torch.autograd.DeviceType.MTIA)

    base = statistics.median(walls["unprofiled"])
    print(f"training step of the demo MLP, {args.rounds} rounds x {args.steps} steps per mode, "
          f"timing {'off' if args.no_timing else 'on'}")
    print(f"{'mode':<12} {'step host ms':>12} {'ratio':>7} {'start+stop+events ms':>22}")
    for mode in modes:
        med = statistics.median(walls[mode])
        extra = f"{statistics.median(overhead[mode]) * 1e3:22.1f}" if mode in overhead else ""
        print(f"{mode:<12} {med * 1e3:12.3f} {med / base:7.2f}x {extra}")
    print(f"device activities in the last CPU+MTIA profile: {device_events} "
          f"({device_events / args.steps:.0f} per step)")
    ratio = statistics.median(walls["CPU+MTIA"]) / base
    print(f"profiled (CPU+MTIA) / unprofiled step host time: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
