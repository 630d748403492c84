#!/usr/bin/env python3
"""torch.compile against eager mode on the emulated device: one training step of each
model-zoo model (torch_mtia_emu.zoo), both ways, in the same run.

    .venv/bin/python bench/torch_compile.py [--models resnet,bert] [--steps 3]

A step is the model's loss (forward), backward and an SGD update with momentum; compiled, the
loss function and the optimizer step are each torch.compile'd (Inductor, the default backend).
Each model runs in its own interpreter with the timing model on and a fresh Inductor cache;
then a second interpreter compiles the same model again over the warm caches. Reported per
model:

    launches   kernel launches per step (library and generated kernels)
    host ms    host wall time per step (median after warm-up)
    sim us     simulated device time per step
    cold s     the first compiled step, compiling everything (empty caches)
    warm s     the first compiled step in a new process with the caches filled
    import s   importing Dynamo and Inductor in that process (once per process; not in the
               compile times)
    gen        launches per compiled step that are generated kernels

and the ratios compiled / eager. Targets (docs/performance.md): launches at most 1/2 of
eager's, simulated time at most 0.7x in geometric mean and never above 1.0x, host time at most
eager's, a warm compile under 2 s.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import copy, json, statistics, sys, time
import torch
import torch_mtia_emu
from torch_mtia_emu import zoo

cfg = json.loads(sys.argv[1])
torch.set_num_threads(1)
# Importing Dynamo and Inductor is a once-per-process cost, not a compile: outside the timing.
t0 = time.perf_counter()
import torch._dynamo, torch._inductor.compile_fx  # noqa: E401
import_s = time.perf_counter() - t0
# Dynamo breaks the graph at nn.LSTM unless asked not to (on every device): without this the
# LSTM's recurrence runs eagerly inside a "compiled" step.
torch._dynamo.config.allow_rnn = True
entry = zoo.get(cfg["model"])
x, y = entry.batch(0)
dev = torch.device("mtia")
x, y = zoo.to_device(x, dev), y.to(dev)


def run(compiled):
    model = entry.build(0).to(dev)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=entry.lr, momentum=0.9)
    loss_fn = lambda m, a, b: entry.loss(m, a, b)
    opt_step = opt.step
    if compiled:
        loss_fn = torch.compile(loss_fn)
        opt_step = torch.compile(opt.step)

    def step():
        opt.zero_grad()
        loss = loss_fn(model, x, y)
        loss.backward()
        opt_step()
        return loss.item()

    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    step()
    walls, sims = [], []
    for _ in range(cfg["steps"]):
        torch_mtia_emu.reset_kernel_launch_counts()
        launches0 = torch_mtia_emu.compile_stats()["launches"]
        start = torch.mtia.Event(enable_timing=True)
        end = torch.mtia.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        step()
        walls.append(time.perf_counter() - t0)
        end.record()
        end.synchronize()
        sims.append(start.elapsed_time(end) * 1000.0)
        launches = sum(torch_mtia_emu.kernel_launch_counts().values())
        gen = torch_mtia_emu.compile_stats()["launches"] - launches0
    return {"first_s": first, "host_ms": 1000 * statistics.median(walls),
            "sim_us": statistics.median(sims), "launches": launches, "gen": gen}


out = {}
if not cfg["warm_only"]:
    out["eager"] = run(False)
out["compiled"] = run(True)
out["stats"] = torch_mtia_emu.compile_stats()
out["import_s"] = import_s
print("RESULT " + json.dumps(out), flush=True)
"""


def child(model, steps, env, warm_only=False):
    cfg = json.dumps({"model": model, "steps": steps, "warm_only": warm_only})
    r = subprocess.run([sys.executable, "-c", CHILD, cfg], env=env, capture_output=True,
                       text=True)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if r.returncode != 0 or line is None:
        raise RuntimeError(f"{model}: exit {r.returncode}\n{r.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def main(argv=None):
    from torch_mtia_emu import zoo  # noqa: deferred, so --help is fast
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(zoo.MODELS), help="comma-separated zoo names")
    ap.add_argument("--steps", type=int, default=3, help="timed steps (median)")
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    for m in models:
        zoo.get(m)  # a clear error for an unknown name
    print(f"{'model':12} {'launches e/c':>13} {'gen':>4} {'host ms e/c':>15} {'ratio':>6} "
          f"{'sim us e/c':>17} {'ratio':>6} {'cold s':>7} {'warm s':>7} {'import s':>8}")
    sim_ratios = []
    for m in models:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, MTIA_EMU_TIMING="1", TORCHINDUCTOR_CACHE_DIR=cache,
                       MTIA_EMU_KERNEL_CACHE=os.path.join(cache, "mtia"),
                       MTIA_EMU_FALLBACK="silent")
            r = child(m, args.steps, env)
            warm = child(m, 1, env)
        e, c = r["eager"], r["compiled"]
        sim_ratio = c["sim_us"] / e["sim_us"] if e["sim_us"] else float("nan")
        sim_ratios.append(sim_ratio)
        print(f"{m:12} {e['launches']:>6}/{c['launches']:<6} {c['gen']:>4} "
              f"{e['host_ms']:>7.1f}/{c['host_ms']:<7.1f} {c['host_ms'] / e['host_ms']:>6.2f} "
              f"{e['sim_us']:>8.1f}/{c['sim_us']:<8.1f} {sim_ratio:>6.2f} "
              f"{c['first_s']:>7.1f} {warm['compiled']['first_s']:>7.1f} "
              f"{warm['import_s']:>8.1f}", flush=True)
    good = [s for s in sim_ratios if s == s and s > 0]
    if good:
        geo = math.exp(sum(math.log(s) for s in good) / len(good))
        print(f"simulated time compiled/eager, geometric mean: {geo:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
