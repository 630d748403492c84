"""The demo training run: a PyTorch model trained for a few steps on the emulated device,
checked step by step against the same training on the CPU, with its trace.

    .venv/bin/python -m torch_mtia_emu.demo [--model mlp] [--out out/demo]

The default model, mlp, classifies points of a synthetic data set (Gaussian blobs, one per
class, made from a fixed seed): Linear -> ReLU -> Linear -> LayerNorm -> SiLU -> Linear,
cross-entropy loss. --model picks another from the model zoo (torch_mtia_emu.zoo): resnet,
mobilenet, vit, bert, gpt2, transformer, lstm or dlrm, fitting one synthetic batch of its
own. Training is SGD with momentum. Both copies of the model start from the same weights and see the
same batches. Each step prints the loss on the device and on the CPU, the device's simulated
time for the step and the host wall time; the run passes when every step's loss agrees with
the CPU's to --tolerance and no op fell back to the CPU. Exits 1 on failure.

Written into --out: trace.json (open it in ui.perfetto.dev), config.json, stats.json and
summary.json from the device (torch_mtia_emu.write_artifacts), and loss.png, the two loss
curves. scripts/demo then prints the trace's summary and plots it (scripts/plot-trace).
"""
import argparse
import copy
import json
import math
import os
import sys
import time

import torch

import torch_mtia_emu
from torch_mtia_emu import zoo

make_data = zoo.make_blobs
make_model = zoo.make_mlp


def cross_entropy(model, x, y):
    return torch.nn.functional.cross_entropy(model(x), y)


def train_step(model, opt, x, y, loss_fn=cross_entropy) -> torch.Tensor:
    opt.zero_grad()
    loss = loss_fn(model, x, y)
    loss.backward()
    opt.step()
    return loss.detach()


def plot_losses(path: str, device_losses, cpu_losses, preset: str, model: str = "MLP") -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("demo: matplotlib is missing, no loss.png (scripts/install-deps installs it)")
        return False
    steps = range(1, len(device_losses) + 1)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(steps, cpu_losses, "o-", label="CPU (PyTorch)", linewidth=2.5, alpha=0.5)
    ax.plot(steps, device_losses, "x--", label=f"emulated {preset}", linewidth=1.2)
    ax.set_xlabel("training step")
    ax.set_ylabel("training loss")
    ax.set_title(f"{model} training on the emulated device against the CPU")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m torch_mtia_emu.demo",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="out/demo", help="folder for the trace and plots")
    ap.add_argument("--model", default="mlp", choices=list(zoo.MODELS),
                    help="the model to train (default mlp; the others come from "
                         "torch_mtia_emu.zoo; --batch, --features, --hidden and --classes "
                         "shape only the mlp)")
    ap.add_argument("--preset", default="mtia-v2", help="chip preset (mtia-v2, mtia-v1)")
    ap.add_argument("--trace", default="units", choices=["off", "kernels", "units"],
                    help="trace detail: kernels (copies, launches) or units (every PE unit "
                         "operation too)")
    ap.add_argument("--no-timing", action="store_true",
                    help="functional only: simulated times stay 0")
    ap.add_argument("--steps", type=int, default=8, help="training steps (default 8)")
    ap.add_argument("--batch", type=int, default=64, help="points per step (default 64)")
    ap.add_argument("--features", type=int, default=32, help="input features (default 32)")
    ap.add_argument("--hidden", type=int, default=128, help="hidden width (default 128)")
    ap.add_argument("--classes", type=int, default=4, help="classes (default 4)")
    ap.add_argument("--lr", type=float, default=None,
                    help="SGD learning rate (default: the model's, 0.1 for the mlp)")
    ap.add_argument("--seed", type=int, default=0, help="data and weight seed (default 0)")
    ap.add_argument("--tolerance", type=float, default=None,
                    help="largest allowed |device loss - CPU loss| per step (default: the "
                         "model's, 1e-4 for the mlp; relative to the loss where it is above 1, "
                         "and the model's own after the first update)")
    args = ap.parse_args(argv)
    for name in ("steps", "batch", "features", "hidden", "classes"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1, not {getattr(args, name)}")
    if args.classes < 2:
        ap.error("--classes must be at least 2: cross-entropy needs two classes")
    entry = zoo.get(args.model)
    if args.lr is None:
        args.lr = entry.lr
    step_tolerance = args.tolerance if args.tolerance is not None else entry.step_tolerance
    if args.tolerance is None:
        args.tolerance = entry.tolerance
    if not args.lr > 0:
        ap.error(f"--lr must be positive, not {args.lr}")

    torch.set_num_threads(1)  # the CPU reference: steadiest timings beside the emulator
    try:
        torch_mtia_emu.init(preset=args.preset, timing=not args.no_timing, trace=args.trace)
        props = torch.mtia.get_device_properties()
    except (RuntimeError, ValueError) as e:
        print(f"demo: cannot open the emulated device: {e}", file=sys.stderr)
        return 2
    dev = torch.device(torch_mtia_emu.DEVICE_TYPE)

    mlp = args.model == "mlp"
    if mlp:
        points, labels = make_data(args.steps * args.batch, args.features, args.classes,
                                   args.seed)
        cpu_model = make_model(args.features, args.hidden, args.classes, args.seed)
        batches = [(points[s * args.batch:(s + 1) * args.batch],
                    labels[s * args.batch:(s + 1) * args.batch]) for s in range(args.steps)]
        loss_fn = cross_entropy
        what = (f"a {args.features}-{args.hidden}-{args.hidden}-{args.classes} MLP "
                f"(batch {args.batch}")
    else:
        cpu_model = entry.build(args.seed)
        batches = [entry.batch(0)] * args.steps  # one batch, learnt: the loss must go down
        loss_fn = entry.loss
        what = f"{args.model}: {entry.description} ("
    cpu_model.train()
    dev_model = copy.deepcopy(cpu_model).to(dev)
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=args.lr, momentum=0.9)
    dev_opt = torch.optim.SGD(dev_model.parameters(), lr=args.lr, momentum=0.9)
    params = sum(p.numel() for p in cpu_model.parameters())
    print(f"demo: training {what}{', ' if mlp else ''}{params} parameters, {args.steps} steps, "
          f"SGD with momentum) on the emulated {props['name']} ({torch_mtia_emu.DEVICE_TYPE}:0), "
          f"timing {'off' if args.no_timing else 'on'}, trace {args.trace}")
    print(f"{'step':>4} {'device loss':>12} {'CPU loss':>12} {'|diff|':>9} "
          f"{'simulated us':>13} {'device wall ms':>15} {'CPU wall ms':>12}")

    torch_mtia_emu.reset_fallback_counts()
    torch_mtia_emu.reset_kernel_launch_counts()
    device_losses, cpu_losses = [], []
    sim_total_ns = wall_total = cpu_wall_total = 0.0
    worst = 0.0  # the largest loss difference over its allowance
    for step in range(args.steps):
        x, y = batches[step]

        t0 = time.perf_counter()
        cpu_loss = train_step(cpu_model, cpu_opt, x, y, loss_fn).item()
        cpu_wall = time.perf_counter() - t0

        sim0 = torch_mtia_emu.simulated_time_ns()
        t0 = time.perf_counter()
        dev_loss = train_step(dev_model, dev_opt, zoo.to_device(x, dev), y.to(dev),
                              loss_fn).item()  # .item() waits
        wall = time.perf_counter() - t0
        sim_ns = torch_mtia_emu.simulated_time_ns() - sim0

        diff = abs(dev_loss - cpu_loss)
        allowed = (args.tolerance if step == 0 else step_tolerance) * max(1.0, abs(cpu_loss))
        worst = float("inf") if math.isnan(diff) else max(worst, diff / allowed)
        device_losses.append(dev_loss)
        cpu_losses.append(cpu_loss)
        sim_total_ns += sim_ns
        wall_total += wall
        cpu_wall_total += cpu_wall
        print(f"{step + 1:>4} {dev_loss:>12.6f} {cpu_loss:>12.6f} {diff:>9.1e} "
              f"{sim_ns / 1e3:>13.1f} {wall * 1e3:>15.1f} {cpu_wall * 1e3:>12.2f}")

    dev_acc = cpu_acc = None
    if mlp:
        with torch.no_grad():
            dev_acc = (dev_model(points.to(dev)).argmax(1).cpu() == labels).float().mean().item()
            cpu_acc = (cpu_model(points).argmax(1) == labels).float().mean().item()
    launches = torch_mtia_emu.kernel_launch_counts()
    fallbacks = torch_mtia_emu.fallback_counts()
    if mlp:
        print(f"demo: accuracy on the training points after {args.steps} steps: device "
              f"{dev_acc:.3f}, CPU {cpu_acc:.3f}")
    print(f"demo: {sum(launches.values())} kernel launches ({len(launches)} kernels), "
          f"{sim_total_ns / 1e3:.1f} us simulated, {wall_total * 1e3:.1f} ms host wall time "
          f"on the device, {cpu_wall_total * 1e3:.1f} ms on the CPU; CPU fallbacks: "
          f"{', '.join(f'{k} x{v}' for k, v in fallbacks.items()) or 'none'}")

    os.makedirs(args.out, exist_ok=True)
    torch.mtia.synchronize()
    torch_mtia_emu.write_artifacts(args.out)
    with open(os.path.join(args.out, "losses.json"), "w") as f:
        json.dump({"model": args.model, "device": device_losses, "cpu": cpu_losses, "device_accuracy": dev_acc,
                   "cpu_accuracy": cpu_acc, "kernel_launches": launches,
                   "fallbacks": fallbacks, "simulated_us": sim_total_ns / 1e3}, f, indent=1)
    plotted = plot_losses(os.path.join(args.out, "loss.png"), device_losses, cpu_losses,
                          props['name'], "MLP" if mlp else args.model)
    print(f"demo: wrote {args.out}/trace.json (open it in ui.perfetto.dev), config.json, "
          f"stats.json, summary.json, losses.json{', loss.png' if plotted else ''}")

    failures = []
    if not worst <= 1.0:
        failures.append(f"a step's loss differs from the CPU's by {worst:.2f} times its "
                        f"tolerance ({args.tolerance:.0e}, {step_tolerance:.0e} after the first "
                        f"update, relative above a loss of 1)")
    if fallbacks:
        failures.append(f"ops ran on the CPU fallback: {sorted(fallbacks)}")
    if not device_losses[-1] < device_losses[0] and args.steps > 1:
        failures.append("the loss did not go down")
    if failures:
        print("demo: FAIL: " + "; ".join(failures))
        return 1
    print(f"demo: PASS (every step's loss within {worst:.2f} of its tolerance: "
          f"{args.tolerance:.0e}, {step_tolerance:.0e} after the first update)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
