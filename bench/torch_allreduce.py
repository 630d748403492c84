#!/usr/bin/env python3
"""All-reduce across ranks on emulated MTIA devices (the "mtia_emu" c10d backend) against the
same all-reduce of CPU tensors with gloo, in the same run.

    .venv/bin/python bench/torch_allreduce.py [--sizes-mib 1 16 64] [--world 2] [--iters 5]

Starts `--world` processes (one emulated device each) that rendezvous like torchrun. For each
size, a float32 tensor of that many MiB is all-reduced (sum) on the devices and, beside it, a
CPU tensor of the same size with a gloo group over the same ranks. Reported per size (rank
0's medians after a warm-up): host wall time of each and their ratio, the simulated device
time of the device all-reduce (the device's clock across it: the link transfers of each ring
step and the reductions' kernel launches), and beside it the alpha-beta model of a ring
all-reduce, 2(n-1)(alpha + (S/n)/beta) with alpha and beta the preset's link latency and
bandwidth, plus its n-1 reductions (one device add of S/n bytes, timed alone on the device, n-1
times), and the simulated time over that sum.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time


def worker(cfg):
    import torch
    import torch.distributed as dist
    import torch_mtia_emu

    torch.set_num_threads(1)
    dist.init_process_group("mtia_emu")
    gloo = dist.new_group(backend="gloo")
    rank = dist.get_rank()
    config = json.loads(torch_mtia_emu.config_json())
    alpha_ns = config["link_latency_ns"]["value"]
    beta_bytes_per_ns = config["link_bandwidth_GBps"]["value"]
    rows = []
    for mib in cfg["sizes_mib"]:
        n = mib * (1 << 20) // 4
        cpu = torch.full((n,), float(rank + 1))
        dev = cpu.to("mtia")
        walls_dev, walls_cpu, sims = [], [], []
        for i in range(cfg["warmup"] + cfg["iters"]):
            dist.barrier(group=gloo)
            torch.mtia.synchronize()
            sim0 = torch_mtia_emu.simulated_time_ns()
            t0 = time.perf_counter()
            dist.all_reduce(dev)
            torch.mtia.synchronize()
            t1 = time.perf_counter()
            sim1 = torch_mtia_emu.simulated_time_ns()
            dist.barrier(group=gloo)
            t2 = time.perf_counter()
            dist.all_reduce(cpu, group=gloo)
            t3 = time.perf_counter()
            if i >= cfg["warmup"]:
                walls_dev.append(t1 - t0)
                walls_cpu.append(t3 - t2)
                sims.append(sim1 - sim0)
        # Every element is now sum(1..world) * world^(rounds - 1): check one, on the CPU.
        expect = float(sum(range(1, cfg["world"] + 1)))
        rounds = cfg["warmup"] + cfg["iters"]
        want = expect * cfg["world"] ** (rounds - 1)
        got = dev[-1].item()
        if abs(got - want) > 1e-3 * abs(want) or abs(cpu[-1].item() - want) > 1e-3 * abs(want):
            raise SystemExit(f"{mib} MiB: wrong result {got} (gloo {cpu[-1].item()}), "
                             f"expected {want}")
        world = cfg["world"]
        model_ns = 2 * (world - 1) * (alpha_ns + mib * (1 << 20) / world / beta_bytes_per_ns)
        # One ring step's reduction alone: a device add of a chunk into another.
        a = torch.ones(n // world, device="mtia")
        b = torch.ones(n // world, device="mtia")
        torch.mtia.synchronize()
        red0 = torch_mtia_emu.simulated_time_ns()
        a.add_(b)
        torch.mtia.synchronize()
        reductions_ns = (torch_mtia_emu.simulated_time_ns() - red0) * (world - 1)
        del a, b
        rows.append(dict(mib=mib, wall_dev_s=statistics.median(walls_dev),
                         wall_gloo_s=statistics.median(walls_cpu),
                         sim_ns=statistics.median(sims), model_ns=model_ns,
                         reductions_ns=reductions_ns))
    if rank == 0:
        print("RESULT " + json.dumps(rows))
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--world", type=int, default=2, help="ranks (processes)")
    parser.add_argument("--iters", type=int, default=5, help="timed all-reduces per size")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--preset", default="mtia-v2")
    parser.add_argument("--no-timing", action="store_true", help="functional device model")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    if args.world < 2:
        parser.error("--world must be at least 2")

    cfg = dict(sizes_mib=args.sizes_mib, world=args.world, iters=args.iters,
               warmup=args.warmup)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(args.world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.world), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), MTIA_EMU_PRESET=args.preset,
                   MTIA_EMU_TIMING="0" if args.no_timing else "1", MTIA_EMU_FALLBACK="error",
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(cfg)],
                                      env=env, stdout=subprocess.PIPE, text=True))
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        sys.exit(f"a rank failed: exit codes {[p.returncode for p in procs]}")
    rows = json.loads(outs[0].split("RESULT ", 1)[1].splitlines()[0])

    timing = "off" if args.no_timing else "on"
    print(f"all_reduce(sum) of float32, {args.world} ranks, preset {args.preset}, timing "
          f"{timing}, median of {args.iters}")
    print(f"{'size':>8} {'mtia_emu wall':>14} {'gloo cpu wall':>14} {'ratio':>7} "
          f"{'simulated':>12} {'alpha-beta':>12} {'reductions':>12} {'sim/(a-b+red)':>14}")
    for r in rows:
        model, red = r["model_ns"], r["reductions_ns"]
        ratio = r["sim_ns"] / (model + red) if model + red else 0.0
        print(f"{r['mib']:>5} MiB {r['wall_dev_s'] * 1e3:>11.1f} ms {r['wall_gloo_s'] * 1e3:>11.1f} ms "
              f"{r['wall_dev_s'] / r['wall_gloo_s']:>6.1f}x {r['sim_ns'] / 1e3:>9.1f} us "
              f"{model / 1e3:>9.1f} us {red / 1e3:>9.1f} us {ratio:>13.3f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(world=args.world, preset=args.preset, timing=timing, rows=rows), f,
                      indent=1)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(json.loads(sys.argv[2]))
    else:
        main()
