#!/usr/bin/env python3
"""The demo's training step (torch_mtia_emu.demo: the MLP, cross-entropy, SGD with momentum)
eager against its replay as a torch.mtia graph, in the same run on the same device.

    .venv/bin/python bench/torch_graph.py [--steps 20] [--preset mtia-v2] [--no-timing]

Two copies of the model start from the same weights; one trains eagerly, the other was
captured once (after warm-up steps on a side stream, as PyTorch recommends) and replays with
each batch copied into its static input tensors. Per step, median after the warm-up: host wall
time (the step and a synchronize) and simulated device time (timing events around the step),
and the ratio eager / replay. The two copies' losses must agree exactly; the run fails if not.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch_mtia_emu
from torch_mtia_emu import demo, zoo


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20, help="measured steps (default 20)")
    ap.add_argument("--preset", default="mtia-v2", help="chip preset (default mtia-v2)")
    ap.add_argument("--no-timing", action="store_true", help="functional only: no sim time")
    args = ap.parse_args()
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    torch_mtia_emu.init(preset=args.preset, timing=not args.no_timing)
    dev = torch.device("mtia")
    warmup, batch, features, hidden, classes = 3, 64, 32, 128, 4
    total = warmup + args.steps
    points, labels = zoo.make_blobs(total * batch, features, classes, 0)
    batches = [(points[i * batch:(i + 1) * batch], labels[i * batch:(i + 1) * batch])
               for i in range(total)]

    def make():
        model = zoo.make_mlp(features, hidden, classes, 0).to(dev)
        return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    eager_model, eager_opt = make()
    graph_model, graph_opt = make()
    static_x = torch.zeros(batch, features, device=dev)
    static_y = torch.zeros(batch, dtype=torch.long, device=dev)
    side = torch.mtia.Stream()
    side.wait_stream(torch.mtia.current_stream())
    with torch.mtia.stream(side):
        for x, y in batches[:warmup]:
            static_x.copy_(x.to(dev))
            static_y.copy_(y.to(dev))
            demo.train_step(graph_model, graph_opt, static_x, static_y)
            demo.train_step(eager_model, eager_opt, x.to(dev), y.to(dev))
    torch.mtia.current_stream().wait_stream(side)
    torch.mtia.synchronize()
    g = torch.mtia.MTIAGraph()
    graph_opt.zero_grad(set_to_none=True)
    with torch.mtia.graph(g, stream=side):
        static_loss = demo.train_step(graph_model, graph_opt, static_x, static_y)

    start, end = torch.mtia.Event(enable_timing=True), torch.mtia.Event(enable_timing=True)
    rows = {"eager": ([], []), "graph replay": ([], [])}
    mismatches = 0
    for x, y in batches[warmup:]:
        xd, yd = x.to(dev), y.to(dev)
        torch.mtia.synchronize()
        t = time.perf_counter()
        start.record()
        eager_loss = demo.train_step(eager_model, eager_opt, xd, yd)
        end.record()
        torch.mtia.synchronize()
        rows["eager"][0].append((time.perf_counter() - t) * 1e6)
        rows["eager"][1].append(start.elapsed_time(end) * 1e3)

        t = time.perf_counter()
        start.record()
        static_x.copy_(xd)
        static_y.copy_(yd)
        g.replay()
        end.record()
        torch.mtia.synchronize()
        rows["graph replay"][0].append((time.perf_counter() - t) * 1e6)
        rows["graph replay"][1].append(start.elapsed_time(end) * 1e3)
        mismatches += int(static_loss.item() != eager_loss.item())

    med = {k: (statistics.median(w), statistics.median(s)) for k, (w, s) in rows.items()}
    print(f"preset {args.preset}, timing {'off' if args.no_timing else 'on'}, load average "
          f"{os.getloadavg()[0]:.1f}; median of {args.steps} steps (replay includes copying the "
          "batch into the static inputs)")
    print("| step | host wall us | simulated us |\n|---|---:|---:|")
    for k, (w, s) in med.items():
        print(f"| {k} | {w:.0f} | {s:.1f} |")
    (ew, es), (rw, rs) = med["eager"], med["graph replay"]
    print(f"| eager / replay | {ew / rw:.2f} | {es / rs if rs else float('nan'):.2f} |")
    print(f"losses equal in {args.steps - mismatches} of {args.steps} steps; fallbacks: "
          f"{torch_mtia_emu.fallback_counts() or 'none'}")
    g.reset()
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
