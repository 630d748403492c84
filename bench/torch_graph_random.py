#!/usr/bin/env python3
"""Dropout eager against dropout replayed from a torch.mtia graph, in the same run.

    .venv/bin/python bench/torch_graph_random.py [--reps 10] [--preset mtia-v2] [--size N]...

Eager dropout draws its mask on the host (the CPU generator) and copies it to the device; in a
graph the device draws it (the `philox` kernel, then the mask and the scaling on device
kernels; docs/tensor-layer.md, "Random numbers in graphs"). Per size, median over the
repetitions: host wall time (the op or the replay and a synchronize) and simulated device time
(timing events around it), and the ratio eager / replay.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch_mtia_emu


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10, help="measured repetitions (default 10)")
    ap.add_argument("--preset", default="mtia-v2", help="chip preset (default mtia-v2)")
    ap.add_argument("--size", type=int, action="append",
                    help="elements, repeatable (default 16384 and 1048576)")
    args = ap.parse_args()
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    sizes = args.size or [1 << 14, 1 << 20]
    if any(n < 1 for n in sizes):
        ap.error("--size must be at least 1")
    torch_mtia_emu.init(preset=args.preset, timing=True)
    dev = torch.device("mtia")
    start, end = torch.mtia.Event(enable_timing=True), torch.mtia.Event(enable_timing=True)

    def measure(fn):
        wall, sim = [], []
        for _ in range(args.reps):
            torch.mtia.synchronize()
            t = time.perf_counter()
            start.record()
            fn()
            end.record()
            torch.mtia.synchronize()
            wall.append((time.perf_counter() - t) * 1e6)
            sim.append(start.elapsed_time(end) * 1e3)
        return statistics.median(wall), statistics.median(sim)

    print(f"preset {args.preset}, load average {os.getloadavg()[0]:.1f}; median of {args.reps}")
    print("| elements | eager host us | replay host us | host eager / replay | eager simulated us "
          "| replay simulated us |\n|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        x = torch.randn(n).to(dev)
        side = torch.mtia.Stream()
        with torch.mtia.stream(side):
            torch.nn.functional.dropout(x, 0.5)  # warm-up: kernels loaded, constants made
        torch.mtia.synchronize()
        g = torch.mtia.MTIAGraph()
        with torch.mtia.graph(g, stream=side):
            y = torch.nn.functional.dropout(x, 0.5)
        ew, es = measure(lambda: torch.nn.functional.dropout(x, 0.5))
        rw, rs = measure(g.replay)
        kept = (y.cpu() != 0).double().mean().item()
        if abs(kept - 0.5) > 0.05 + 5 / n ** 0.5:
            print(f"replayed dropout kept {kept:.3f} of the elements, not about half")
            return 1
        print(f"| {n} | {ew:.0f} | {rw:.0f} | {ew / rw:.2f} | {es:.1f} | {rs:.1f} |")
        g.reset()
    return 0


if __name__ == "__main__":
    sys.exit(main())
