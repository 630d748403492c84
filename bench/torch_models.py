#!/usr/bin/env python3
"""One training step of each model-zoo model (torch_mtia_emu.zoo) on the emulated device
against the same step on the CPU, in the same run, with the timing model on and off.

    .venv/bin/python bench/torch_models.py [--models resnet,bert] [--preset mtia-v2]

A step is forward, backward and an SGD update with momentum on the model's own synthetic batch.
Each configuration (timing on, timing off) runs in its own interpreter, one emulated device per
process, and times the CPU step there too, so each ratio compares two timings taken side by
side. Reported per model: host wall time of a device step and of a CPU step (medians after
warm-up), their ratio (the target is 3x or less with timing on), kernel launches per step, the
simulated device time of a step (0 with timing off) and the ops that fell back to the CPU
(none expected).
"""
import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import copy, json, statistics, sys, time
import torch
import torch_mtia_emu
from torch_mtia_emu import zoo

cfg = json.loads(sys.argv[1])
torch.set_num_threads(cfg["threads"])
dev = torch.device("mtia")
torch_mtia_emu.init(preset=cfg["preset"], timing=cfg["timing"])


def step(model, opt, entry, x, y):
    opt.zero_grad()
    loss = entry.loss(model, x, y)
    loss.backward()
    opt.step()
    return loss


def measure(entry, model, x, y, on_device):
    opt = torch.optim.SGD(model.parameters(), lr=entry.lr, momentum=0.9)
    for _ in range(cfg["warmup"]):
        step(model, opt, entry, x, y).item()
    walls, sims = [], []
    for _ in range(cfg["steps"]):
        if on_device:
            start = torch.mtia.Event(enable_timing=True)
            end = torch.mtia.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        step(model, opt, entry, x, y).item()  # .item() waits for the step to finish
        walls.append(time.perf_counter() - t0)
        if on_device:
            end.record()
            end.synchronize()
            sims.append(start.elapsed_time(end))
    launches = 0
    if on_device:
        torch_mtia_emu.reset_kernel_launch_counts()
        step(model, opt, entry, x, y).item()
        launches = sum(torch_mtia_emu.kernel_launch_counts().values())
    return statistics.median(walls), (statistics.median(sims) if sims else 0.0), launches


rows = {}
for name in cfg["models"]:
    entry = zoo.get(name)
    cpu_model = entry.build(0)
    cpu_model.train()
    dev_model = copy.deepcopy(cpu_model).to(dev)
    x, y = entry.batch(0)
    torch_mtia_emu.reset_fallback_counts()
    dev_s, sim_ms, launches = measure(entry, dev_model, zoo.to_device(x, dev), y.to(dev), True)
    cpu_s, _, _ = measure(entry, cpu_model, x, y, False)
    rows[name] = {"device_ms": 1e3 * dev_s, "cpu_ms": 1e3 * cpu_s, "simulated_us": 1e3 * sim_ms,
                  "launches": launches, "fallbacks": torch_mtia_emu.fallback_counts()}
print(json.dumps(rows))
"""


def run(cfg: dict) -> dict:
    env = dict(os.environ)
    env.pop("MTIA_EMU_FALLBACK", None)
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cfg)], env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"torch_models: the {cfg} run failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    from torch_mtia_emu import zoo  # the names; each child opens its own device

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(m for m in zoo.MODELS if m != "mlp"),
                    help="comma-separated zoo models (default: all but the mlp)")
    ap.add_argument("--preset", default="mtia-v2", help="chip preset (default mtia-v2)")
    ap.add_argument("--steps", type=int, default=5, help="measured steps (default 5)")
    ap.add_argument("--warmup", type=int, default=2, help="warm-up steps (default 2)")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads for the CPU step (1: steadiest on a loaded machine)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m]
    for m in models:
        zoo.get(m)  # a clear error for an unknown name before any child starts
    results = {}
    for timing in (True, False):
        cfg = dict(preset=args.preset, timing=timing, models=models, steps=args.steps,
                   warmup=args.warmup, threads=args.threads)
        results[timing] = run(cfg)
    print(f"One SGD training step (forward, backward, update) per model on {args.preset}, "
          f"median of {args.steps} steps after {args.warmup} warm-up, CPU with "
          f"{args.threads} thread(s)")
    print("| model | launches/step | simulated us/step | CPU ms | device ms, timing on |"
          " on / CPU | device ms, timing off | off / CPU | CPU fallbacks |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for m in models:
        on, off = results[True][m], results[False][m]
        cpu = min(on["cpu_ms"], off["cpu_ms"])
        fb = ", ".join(f"{k} x{v}" for k, v in {**on["fallbacks"], **off["fallbacks"]}.items())
        print(f"| {m} | {on['launches']} | {on['simulated_us']:.1f} | {cpu:.2f} | "
              f"{on['device_ms']:.1f} | {on['device_ms'] / cpu:.1f} | {off['device_ms']:.1f} | "
              f"{off['device_ms'] / cpu:.1f} | {fb or 'none'} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"on": results[True], "off": results[False]}, f, indent=2)


if __name__ == "__main__":
    main()
