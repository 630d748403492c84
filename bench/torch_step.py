#!/usr/bin/env python3
"""One training step of a small PyTorch model on the emulated device against the same step on
the CPU, in the same run, with the timing model on and off.

    .venv/bin/python bench/torch_step.py [--preset mtia-v2] [--steps 20]
        [--sanitize memcheck,racecheck,initcheck,synccheck]

The model is an MLP (4 Linear layers with ReLU/Tanh/SiLU, a LayerNorm, cross-entropy loss) and
an SGD step with momentum: forward, backward and optimizer step. Each configuration runs in its
own interpreter (one emulated device per process) and times the CPU step there too, so every
ratio compares two timings taken side by side. Reported per step: host wall time (median after
warm-up), device/CPU ratio, simulated device time (events around the step; 0 with timing off),
and the ops that fell back to the CPU (none expected). With --sanitize, each preset also runs
with timing on under those sanitizer checks ($MTIA_EMU_SANITIZE), and the table gives its wall
time over the same step without them; the configurations' runs are interleaved, so the two
are taken under the same load.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CHILD = r"""
import json, os, statistics, sys, time
import torch
import torch_mtia_emu

cfg = json.loads(sys.argv[1])
torch.set_num_threads(cfg["threads"])
dev = torch.device("mtia")


def make(device):
    torch.manual_seed(0)
    w = cfg["width"]
    model = torch.nn.Sequential(
        torch.nn.Linear(cfg["inputs"], w), torch.nn.ReLU(),
        torch.nn.Linear(w, w), torch.nn.Tanh(),
        torch.nn.Linear(w, w), torch.nn.SiLU(),
        torch.nn.LayerNorm(w),
        torch.nn.Linear(w, cfg["classes"])).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(cfg["batch"], cfg["inputs"], generator=g).to(device)
    y = torch.randint(0, cfg["classes"], (cfg["batch"],), generator=g).to(device)
    return model, opt, x, y


def step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def measure(device):
    model, opt, x, y = make(device)
    for _ in range(cfg["warmup"]):
        step(model, opt, x, y).item()
    walls, sims, losses = [], [], []
    for _ in range(cfg["steps"]):
        if device == dev:
            start = torch.mtia.Event(enable_timing=True)
            end = torch.mtia.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        loss = step(model, opt, x, y).item()  # .item() waits for the step to finish
        walls.append(time.perf_counter() - t0)
        losses.append(loss)
        if device == dev:
            end.record()
            end.synchronize()
            sims.append(start.elapsed_time(end))
    return walls, sims, losses, model, opt, x, y


torch_mtia_emu.init(preset=cfg["preset"], timing=cfg["timing"])
torch_mtia_emu.reset_fallback_counts()
dev_walls, sims, dev_losses, model, opt, x, y = measure(dev)
torch_mtia_emu.reset_kernel_launch_counts()
step(model, opt, x, y).item()  # one more warm step, counted
launches = sum(torch_mtia_emu.kernel_launch_counts().values())
fallbacks = torch_mtia_emu.fallback_counts()
cpu_walls, _, cpu_losses, *_ = measure("cpu")
print(json.dumps({
    "device_ms": 1e3 * statistics.median(dev_walls),
    "cpu_ms": 1e3 * statistics.median(cpu_walls),
    "simulated_us": 1e3 * statistics.median(sims),
    "max_loss_diff": max(abs(a - b) for a, b in zip(dev_losses, cpu_losses)),
    "fallbacks": fallbacks,
    "launches": launches,
}))
"""


def run(cfg: dict) -> dict:
    env = dict(os.environ)
    env.pop("MTIA_EMU_FALLBACK", None)
    env["MTIA_EMU_SANITIZE"] = cfg["sanitize"]
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cfg)], env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"torch_step: the {cfg} run failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", action="append", help="chip preset(s); default mtia-v2")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--inputs", type=int, default=128)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads for the CPU step (1: steadiest on a loaded machine)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per configuration; the best (lowest) medians are reported")
    ap.add_argument("--sanitize", metavar="CHECKS",
                    help="also run with timing on under these sanitizer checks "
                         "(a comma-separated list, as $MTIA_EMU_SANITIZE takes)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    configs = []
    for preset in args.preset or ["mtia-v2"]:
        modes = [(True, "off"), (False, "off")] + ([(True, args.sanitize)] if args.sanitize else [])
        for timing, sanitize in modes:
            configs.append(dict(preset=preset, timing=timing, sanitize=sanitize, batch=args.batch,
                                width=args.width, inputs=args.inputs, classes=args.classes,
                                steps=args.steps, warmup=args.warmup, threads=args.threads))
    runs = [[] for _ in configs]
    for _ in range(args.repeat):
        for i, cfg in enumerate(configs):
            runs[i].append(run(cfg))
    rows = []
    for cfg, results in zip(configs, runs):
        r = min(results, key=lambda x: x["device_ms"])
        r["cpu_ms"] = min(x["cpu_ms"] for x in results)
        r.update(preset=cfg["preset"], timing=cfg["timing"], sanitize=cfg["sanitize"])
        rows.append(r)
    plain = {r["preset"]: r["device_ms"] for r in rows if r["timing"] and r["sanitize"] == "off"}
    print(f"MLP {args.inputs}-{args.width}-{args.width}-{args.width}-{args.classes}, batch "
          f"{args.batch}, SGD step (forward + backward + update), median of {args.steps} steps, "
          f"best of {args.repeat} runs; kernel launches per step: {rows[0]['launches']}")
    print("| preset | timing | sanitizer | device wall ms | CPU ms | device / CPU |"
          " x unsanitized | simulated us | max loss diff | CPU fallbacks |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        fb = ", ".join(f"{k} x{v}" for k, v in r["fallbacks"].items()) or "none"
        vs = f"{r['device_ms'] / plain[r['preset']]:.2f}" if r["timing"] else "-"
        print(f"| {r['preset']} | {'on' if r['timing'] else 'off'} | {r['sanitize']} | "
              f"{r['device_ms']:.1f} | {r['cpu_ms']:.2f} | {r['device_ms'] / r['cpu_ms']:.1f} | "
              f"{vs} | {r['simulated_us']:.1f} | {r['max_loss_diff']:.1e} | {fb} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
