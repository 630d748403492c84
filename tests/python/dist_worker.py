"""One rank of a multi-process test of the "mtia_emu" c10d backend (test_distributed.py).

Run as `python dist_worker.py SCENARIO` with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in
the environment (as torchrun sets them). Each rank opens its own emulated device. A scenario
checks what it runs against an independent reference (the same collective with gloo on CPU
tensors, or DDP against one CPU process on the whole batch) and exits non-zero with the reason
on stderr when something differs.
"""

import faulthandler
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch_mtia_emu

DEV = torch.device("mtia")
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])

# Every dtype the device reduces (the kernel library's elementwise dtypes) that gloo also
# reduces, so each has a reference.
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64]


def rank_input(shape, dtype, rank, salt=0):
    """Rank `rank`'s deterministic input: small values, so products stay in range, and the
    integer dtypes exact."""
    g = torch.Generator().manual_seed(1000 * salt + 17 * rank + 1)
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g) * 2 + 0.5).to(dtype)
    return torch.randint(-3, 4, shape, generator=g).to(dtype)


def to_device(cpu, contiguous):
    """A device copy of `cpu`; a non-contiguous view with the same values when asked."""
    if contiguous:
        return cpu.to(DEV)
    # Stored transposed and read back through .t(): same values, strides (1, rows).
    return cpu.t().contiguous().to(DEV).t()


def check(name, got, want):
    got = got.cpu()
    if got.dtype.is_floating_point:
        tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[got.dtype]
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, msg=lambda m: f"{name}: {m}")
    else:
        if not torch.equal(got, want):
            raise AssertionError(f"{name}: {got} != {want}")


def collectives():
    gloo = dist.new_group(backend="gloo")
    torch_mtia_emu.reset_fallback_counts()
    shape = (5, 3)
    cases = 0
    for salt, dtype in enumerate(DTYPES):
        for contiguous in (True, False):
            tag = f"{dtype} {'contiguous' if contiguous else 'strided'}"
            x = rank_input(shape, dtype, RANK, salt)

            ops = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
            if dtype.is_floating_point:
                ops.append(dist.ReduceOp.AVG)
            for op in ops:
                d = to_device(x, contiguous)
                dist.all_reduce(d, op=op)
                ref = x.clone()
                gloo_op = dist.ReduceOp.SUM if op == dist.ReduceOp.AVG else op
                dist.all_reduce(ref, op=gloo_op, group=gloo)
                if op == dist.ReduceOp.AVG:
                    ref = ref / WORLD
                check(f"all_reduce {op} {tag}", d, ref)
                cases += 1

            for root in range(WORLD):
                d = to_device(x, contiguous)
                dist.broadcast(d, src=root)
                ref = x.clone()
                dist.broadcast(ref, src=root, group=gloo)
                check(f"broadcast root {root} {tag}", d, ref)

            root = WORLD - 1
            d = to_device(x, contiguous)
            dist.reduce(d, dst=root, op=dist.ReduceOp.MAX)
            ref = x.clone()
            dist.reduce(ref, dst=root, op=dist.ReduceOp.MAX, group=gloo)
            if RANK == root:
                check(f"reduce {tag}", d, ref)
            d = to_device(x, contiguous)
            dist.reduce(d, dst=0, op=dist.ReduceOp.SUM)
            ref = x.clone()
            dist.reduce(ref, dst=0, op=dist.ReduceOp.SUM, group=gloo)
            if RANK == 0:
                check(f"reduce sum {tag}", d, ref)

            outs = [to_device(torch.zeros(shape, dtype=dtype), contiguous) for _ in range(WORLD)]
            dist.all_gather(outs, to_device(x, contiguous))
            refs = [torch.zeros(shape, dtype=dtype) for _ in range(WORLD)]
            dist.all_gather(refs, x, group=gloo)
            for i in range(WORLD):
                check(f"all_gather [{i}] {tag}", outs[i], refs[i])

            out = torch.zeros((WORLD * 5, 3), dtype=dtype, device=DEV)
            dist.all_gather_into_tensor(out, to_device(x, contiguous))
            check(f"all_gather_into_tensor {tag}", out, torch.cat(refs))

            outs = ([to_device(torch.zeros(shape, dtype=dtype), contiguous)
                     for _ in range(WORLD)] if RANK == 0 else None)
            dist.gather(to_device(x, contiguous), outs, dst=0)
            if RANK == 0:
                for i in range(WORLD):
                    check(f"gather [{i}] {tag}", outs[i], refs[i])

            chunks = [rank_input(shape, dtype, RANK * WORLD + i, salt + 50)
                      for i in range(WORLD)]
            d = to_device(torch.zeros(shape, dtype=dtype), contiguous)
            dist.scatter(d, [to_device(c, contiguous) for c in chunks] if RANK == 1 else None,
                         src=1)
            ref = torch.zeros(shape, dtype=dtype)
            dist.scatter(ref, chunks if RANK == 1 else None, src=1, group=gloo)
            check(f"scatter {tag}", d, ref)

            for op in (dist.ReduceOp.SUM, dist.ReduceOp.MIN):
                d = to_device(torch.zeros(shape, dtype=dtype), contiguous)
                dist.reduce_scatter(d, [to_device(c, contiguous) for c in chunks], op=op)
                ref = torch.zeros(shape, dtype=dtype)
                # gloo has no reduce_scatter: all_reduce every chunk and keep this rank's.
                full = torch.stack(chunks)
                dist.all_reduce(full, op=op, group=gloo)
                ref = full[RANK]
                check(f"reduce_scatter {op} {tag}", d, ref)
                out = torch.zeros(shape, dtype=dtype, device=DEV)
                dist.reduce_scatter_tensor(out, torch.cat(chunks).to(DEV), op=op)
                check(f"reduce_scatter_tensor {op} {tag}", out, ref)

            outs = [to_device(torch.zeros(shape, dtype=dtype), contiguous) for _ in range(WORLD)]
            dist.all_to_all(outs, [to_device(c, contiguous) for c in chunks])
            refs = [torch.zeros(shape, dtype=dtype) for _ in range(WORLD)]
            dist.all_to_all(refs, [c.clone() for c in chunks], group=gloo)
            for i in range(WORLD):
                check(f"all_to_all [{i}] {tag}", outs[i], refs[i])
            # Uneven splits: rank r sends i+1 rows to rank i.
            in_splits = [i + 1 for i in range(WORLD)]
            out_splits = [RANK + 1] * WORLD
            src = rank_input((sum(in_splits), 3), dtype, RANK, salt + 90)
            out = torch.zeros((sum(out_splits), 3), dtype=dtype, device=DEV)
            dist.all_to_all_single(out, src.to(DEV), out_splits, in_splits)
            ref = torch.zeros((sum(out_splits), 3), dtype=dtype)
            dist.all_to_all_single(ref, src, out_splits, in_splits, group=gloo)
            check(f"all_to_all_single {tag}", out, ref)

            # send/recv around the ring.
            nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
            d = to_device(torch.zeros(shape, dtype=dtype), contiguous)
            if RANK % 2 == 0:
                dist.send(to_device(x, contiguous), nxt)
                dist.recv(d, prv)
            else:
                dist.recv(d, prv)
                dist.send(to_device(x, contiguous), nxt)
            check(f"send/recv {tag}", d, rank_input(shape, dtype, prv, salt))

    # The collectives' own point-to-point messages have tags of their own.
    expect_error("send with a reserved tag", ValueError, "collectives' own",
                 lambda: dist.send(torch.ones(1, device=DEV), dst=(RANK + 1) % WORLD, tag=1 << 30))

    # The coalesced forms DDP uses.
    ts = [to_device(rank_input((4, 3), torch.float32, RANK, 7), True),
          to_device(rank_input((3, 2), torch.float32, RANK, 8), False)]
    dist.all_reduce_coalesced(ts)
    for i, t in enumerate(ts):
        ref = rank_input(t.shape, torch.float32, RANK, 7 + i)
        dist.all_reduce(ref, group=gloo)
        check(f"all_reduce_coalesced [{i}]", t, ref)
    pg = dist.group.WORLD
    ts = [to_device(rank_input((6,), torch.float32, RANK, 9), True),
          to_device(rank_input((2, 2), torch.float32, RANK, 10), True)]
    dist._broadcast_coalesced(pg, ts, 64, 0)
    for i, t in enumerate(ts):
        check(f"_broadcast_coalesced [{i}]", t, rank_input(t.shape, torch.float32, 0, 9 + i))

    # The bitwise reductions, and an async Work that is complete when waited for.
    d = to_device(torch.tensor([1 << RANK, 7], dtype=torch.int32), True)
    work = dist.all_reduce(d, op=dist.ReduceOp.BOR, async_op=True)
    work.wait()
    check("all_reduce BOR", d, torch.tensor([(1 << WORLD) - 1, 7], dtype=torch.int32))
    dist.barrier()

    # Bad arguments: clear errors.
    expect_error("all_reduce AVG int", ValueError, "AVG needs a floating-point",
                 lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32, device=DEV),
                                         op=dist.ReduceOp.AVG))
    expect_error("broadcast bad root", ValueError, "not in this group",
                 lambda: dist.broadcast(torch.ones(2, device=DEV), group_src=WORLD + 3))

    # CPU tensors on this group go to gloo.
    c = torch.full((3,), float(RANK + 1))
    dist.all_reduce(c)
    check("cpu all_reduce", c, torch.full((3,), float(WORLD * (WORLD + 1) // 2)))

    assert_no_fallback()
    print(f"rank {RANK}: {cases} all_reduce cases and the other collectives match gloo")


def assert_no_fallback():
    """Everything ran on device kernels: reductions, and no c10d op reached the CPU fallback."""
    counts = torch_mtia_emu.fallback_counts()
    if counts:
        raise AssertionError(f"ops fell back to the CPU: {counts}")


def expect_error(name, kind, text, fn):
    try:
        fn()
    except kind as e:
        if text not in str(e):
            raise AssertionError(f"{name}: message {str(e)!r} lacks {text!r}")
        return
    raise AssertionError(f"{name}: no {kind.__name__} raised")


def make_model(unused=False):
    torch.manual_seed(0)
    layers = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    if not unused:
        return layers

    class WithUnused(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = layers
            self.unused = torch.nn.Linear(8, 4)  # gets no gradient

        def forward(self, x):
            return self.body(x)
    return WithUnused()


def ddp():
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch_mtia_emu.reset_fallback_counts()
    batch, steps, lr = 12, 3, 0.1
    g = torch.Generator().manual_seed(123)
    xs = [torch.randn(batch, 8, generator=g) for _ in range(steps)]
    ys = [torch.randn(batch, 4, generator=g) for _ in range(steps)]
    shard = batch // WORLD

    def local(t):
        return t[RANK * shard:(RANK + 1) * shard]

    variants = [
        dict(gradient_as_bucket_view=False),
        dict(gradient_as_bucket_view=True, bucket_cap_mb=0.0005),  # several buckets
        dict(unused=True, find_unused_parameters=True),
        dict(no_sync=True),
    ]
    for v in variants:
        v = dict(v)
        unused = v.pop("unused", False)
        no_sync = v.pop("no_sync", False)
        reference = make_model(unused)
        model = DDP(make_model(unused).to(DEV), **v)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=lr)
        for step in range(steps):
            x, y = xs[step], ys[step]
            opt.zero_grad()
            if no_sync:
                # Two micro-batches; gradients are averaged across ranks at the second.
                half = shard // 2
                xl, yl = local(x), local(y)
                with model.no_sync():
                    torch.nn.functional.mse_loss(model(xl[:half].to(DEV)),
                                                 yl[:half].to(DEV)).backward()
                torch.nn.functional.mse_loss(model(xl[half:].to(DEV)),
                                             yl[half:].to(DEV)).backward()
            else:
                torch.nn.functional.mse_loss(model(local(x).to(DEV)), local(y).to(DEV)).backward()
            opt.step()
            # The reference: one CPU process on the whole batch, the same loss.
            ref_opt.zero_grad()
            if no_sync:
                loss = 0
                for r in range(WORLD):
                    xr, yr = x[r * shard:(r + 1) * shard], y[r * shard:(r + 1) * shard]
                    half = shard // 2
                    loss = loss + torch.nn.functional.mse_loss(reference(xr[:half]), yr[:half])
                    loss = loss + torch.nn.functional.mse_loss(reference(xr[half:]), yr[half:])
                (loss / WORLD).backward()
            else:
                torch.nn.functional.mse_loss(reference(x), y).backward()
            ref_opt.step()
        for (name, p), q in zip(model.module.named_parameters(), reference.parameters()):
            torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-5,
                                       msg=lambda m: f"DDP {v} {name}: {m}")
    assert_no_fallback()
    print(f"rank {RANK}: DDP matches one CPU process in {len(variants)} variants")


def fsdp():
    """FSDP2's fully_shard over the backend (all-gathers and reduce-scatters) against one CPU
    process training on the whole batch."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    torch_mtia_emu.reset_fallback_counts()
    batch, steps, lr = 12, 3, 0.1
    g = torch.Generator().manual_seed(321)
    xs = [torch.randn(batch, 8, generator=g) for _ in range(steps)]
    ys = [torch.randn(batch, 4, generator=g) for _ in range(steps)]
    shard = batch // WORLD
    reference = make_model()
    model = make_model().to(DEV)
    mesh = init_device_mesh("mtia", (WORLD,))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=lr)
    for step in range(steps):
        x, y = xs[step], ys[step]
        opt.zero_grad()
        local = slice(RANK * shard, (RANK + 1) * shard)
        torch.nn.functional.mse_loss(model(x[local].to(DEV)), y[local].to(DEV)).backward()
        opt.step()
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        full = p.full_tensor().detach().cpu()
        torch.testing.assert_close(full, q.detach(), rtol=1e-5, atol=1e-5,
                                   msg=lambda m: f"FSDP2 {name}: {m}")
    assert_no_fallback()
    print(f"rank {RANK}: FSDP2 matches one CPU process")


def default_backend():
    """A plain init_process_group() (done by main) took mtia_emu for mtia, gloo for cpu."""
    if dist.get_backend() == "mtia_emu":
        raise AssertionError("default group is plain mtia_emu, expected a per-device map")
    d = torch.full((4,), float(RANK + 1), device=DEV)
    dist.all_reduce(d)
    check("default all_reduce mtia", d, torch.full((4,), float(WORLD * (WORLD + 1) // 2)))
    c = torch.full((4,), float(RANK + 1))
    dist.all_reduce(c)
    check("default all_reduce cpu", c, torch.full((4,), float(WORLD * (WORLD + 1) // 2)))
    print(f"rank {RANK}: default backend map {dist.get_backend()}")


def dead_rank():
    """Rank 1 stops taking part (it dies, or sleeps past the timeout with DEAD_MODE=hang);
    rank 0's all_reduce must raise within the timeout, not hang."""
    if RANK == 1:
        if os.environ.get("DEAD_MODE") == "hang":
            time.sleep(30)  # killed by the test once rank 0 is done
        os._exit(0)
    d = torch.ones(1024, device=DEV)
    start = time.monotonic()
    try:
        dist.all_reduce(d)
    except RuntimeError as e:
        print(f"rank 0: all_reduce raised after {time.monotonic() - start:.1f} s: "
              f"{str(e).splitlines()[0]}")
        os._exit(0)
    raise AssertionError("all_reduce with a dead peer returned")


def link_timing():
    """A ring all-reduce's simulated time against the alpha-beta model: each of its 2(n-1)
    link sends takes exactly alpha + (S/n)/beta on the link (alpha, beta: the preset's link
    latency and bandwidth), and the all-reduce as a whole takes 2(n-1)(alpha + (S/n)/beta) plus
    its reductions' launches, within LINK_TOLERANCE (the rest: each packet's dispatch and DMA
    setup). Run with the timing model and the trace on."""
    import json
    import math
    import tempfile

    config = json.loads(torch_mtia_emu.config_json())
    alpha_ps = round(config["link_latency_ns"]["value"] * 1000)
    mbps = round(config["link_bandwidth_GBps"]["value"] * 1000)
    n = WORLD
    size = n * (2 << 20)  # 2 MiB chunks
    t = torch.full((size // 4,), float(RANK + 1), device=DEV)
    dist.all_reduce(t)  # warm-up: afterwards the ranks' clocks are in step
    torch.mtia.synchronize()
    sim0 = torch_mtia_emu.simulated_time_ns() * 1000
    dist.all_reduce(t)
    torch.mtia.synchronize()
    sim1 = torch_mtia_emu.simulated_time_ns() * 1000
    want = float(sum(range(1, n + 1))) * n
    check("timed all_reduce", t[-4:], torch.full((4,), want))

    with tempfile.TemporaryDirectory() as d:
        torch_mtia_emu.write_artifacts(d)
        with open(os.path.join(d, "trace.json")) as f:
            events = json.load(f)["traceEvents"]

    def within(e):
        start = e["ts"] * 1e6
        return sim0 - 1 <= start and start + e["dur"] * 1e6 <= sim1 + 1

    sends = [e for e in events if e.get("cat") == "link" and e["name"] == "link send"
             and e["args"]["packet_start_ps"] >= sim0 - 1]
    receives = [e for e in events if e.get("cat") == "link" and e["name"] == "link receive"
                and e["args"]["packet_start_ps"] >= sim0 - 1]
    launches = [e for e in events if e.get("cat") == "launch" and within(e)]
    if len(sends) != 2 * (n - 1) or len(receives) != 2 * (n - 1):
        raise AssertionError(f"{len(sends)} link sends and {len(receives)} receives in the "
                             f"all-reduce, expected {2 * (n - 1)} of each")
    if len(launches) < n - 1:
        raise AssertionError(f"{len(launches)} reduction launches, expected at least {n - 1}")
    chunk = size // n
    per_transfer = alpha_ps + math.ceil(chunk * 10**6 / mbps)  # alpha + (S/n)/beta
    for e in sends:
        # The slice is the link's busy time; the bytes have arrived a latency later.
        got = e["args"]["arrival_ps"] - round(e["ts"] * 1e6)
        if got != per_transfer or e["args"]["bytes"] != chunk or e["args"]["peer"] != (RANK + 1) % n:
            raise AssertionError(f"link send {e['args']}: {got} ps, expected {per_transfer} ps "
                                 f"for {chunk} bytes to rank {(RANK + 1) % n}")
    model = 2 * (n - 1) * per_transfer
    reductions = sum(round(e["dur"] * 1e6) for e in launches)
    simulated = sim1 - sim0
    tolerance = float(os.environ.get("LINK_TOLERANCE", "0.05"))
    rest = simulated - reductions
    print(f"rank {RANK}: all_reduce of {size} bytes on {n} ranks: simulated {simulated / 1e6:.3f} us"
          f", reductions {reductions / 1e6:.3f} us, alpha-beta model {model / 1e6:.3f} us, "
          f"ratio {rest / model:.4f}")
    if not model <= rest <= model * (1 + tolerance):
        raise AssertionError(f"simulated time less reductions {rest} ps is not within "
                             f"{tolerance:.0%} above the alpha-beta model's {model} ps")
    print(f"rank {RANK}: link timing follows the alpha-beta model")


def no_link():
    """A chip without links (MTIA_EMU_SET=link_count=0): a collective on device tensors fails
    with an error naming the missing link, on every rank, instead of moving data another way."""
    t = torch.ones(1024, device=DEV)
    try:
        dist.all_reduce(t)
    except Exception as e:  # the device refused the link transfer
        if "link 0 does not exist" not in str(e):
            raise AssertionError(f"unexpected error: {e}")
        print(f"rank {RANK}: all_reduce refused: {str(e).splitlines()[0]}")
        return
    raise AssertionError("all_reduce ran on a chip without links")


def main():
    faulthandler.enable()  # a crash shows every thread's Python stack
    scenario = sys.argv[1]
    timeout = timedelta(seconds=float(os.environ.get("DIST_TIMEOUT_S", "60")))
    init = os.environ.get("DIST_INIT", "env")
    if scenario == "default_backend":
        dist.init_process_group(timeout=timeout)
    elif init == "tcp":
        url = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        dist.init_process_group("mtia_emu", init_method=url, rank=RANK, world_size=WORLD,
                                timeout=timeout)
    else:
        dist.init_process_group("mtia_emu", timeout=timeout)
    if scenario != "default_backend" and dist.get_backend() != "mtia_emu":
        raise AssertionError(f"backend is {dist.get_backend()}")
    globals()[scenario]()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
