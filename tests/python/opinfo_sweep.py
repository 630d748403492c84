#!/usr/bin/env python3
"""Every op of PyTorch's OpInfo database on the mtia device, against the CPU.

    .venv/bin/python tests/python/opinfo_sweep.py [--samples N] [--jobs J] [--ops REGEX]
                                                  [--dtype float32] [--json FILE]

For each op (and variant) that takes the dtype on the CPU, the first N samples run on the CPU
and on the device, with the CPU fallback allowed; the device's result must equal the CPU's
(float tolerance 1e-4; ops whose results are random or uninitialized are checked for shape and
dtype only). Each op ends as one of:

    device    every sample ran on device kernels alone
    fallback  some sample used the CPU fallback (fallback_counts() named an op)
    raised    the device raised a Python exception where the CPU did not (allowed: an error)
    cpu-only  the CPU itself took none of the samples (nothing to compare)
    wrong     the device answered differently from the CPU            -> the sweep fails
    crashed   the interpreter died (a signal, an abort) or hung        -> the sweep fails

The ops run in child interpreters, one chunk each; a child that dies is reported with the op
it was running, and a new child goes on with the next op. Exit status 0 when no op is wrong
or crashed, 1 otherwise.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

# Ops whose values are random (drawn differently on each device) or uninitialized: shapes and
# dtypes are compared, values are not.
UNCHECKED_VALUES = re.compile(
    r"^(bernoulli|normal|uniform|cauchy|exponential|geometric|log_normal|multinomial|"
    r"rand_like|randn_like|randint_like|randint|randn|rand|empty.*|new_empty.*|"
    r"nn\.functional\.(dropout.*|alpha_dropout|feature_alpha_dropout.*|rrelu|"
    r"gumbel_softmax|fractional_max_pool[23]d)|torch\.ops\.aten\._efficientzerotensor|"
    r"nn\.functional\.multi_head_attention_forward|nn\.functional\.scaled_dot_product_attention|"
    r"_native_batch_norm_legit|native_dropout_backward)$")

CHILD = r"""
import faulthandler, json, sys, warnings
warnings.simplefilter("ignore")
import torch
import torch_mtia_emu
from torch.testing._internal.common_methods_invocations import op_db

cfg = json.loads(sys.argv[1])
dtype = getattr(torch, cfg["dtype"])
compiling = cfg.get("compile", False)
if compiling:
    import torch._dynamo
    from torch_mtia_emu import _inductor_backend
unchecked = __import__("re").compile(cfg["unchecked"])
torch_mtia_emu.set_fallback_mode("silent")
dev = torch.device("mtia")


def tree_map(x, fn):
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # a named tuple
        return type(x)(*(tree_map(v, fn) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(tree_map(v, fn) for v in x)
    if isinstance(x, dict):
        return {k: tree_map(v, fn) for k, v in x.items()}
    return x


def fresh(x, device):
    return tree_map(x, lambda t: t.detach().clone().to(device) if t.device.type == "cpu"
                    else t.detach().clone())


def compare(got, want, values):
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise AssertionError(f"got {type(got).__name__}, want a tensor")
        got = got.cpu()
        if got.shape != want.shape or got.dtype != want.dtype:
            raise AssertionError(f"got {got.dtype}{list(got.shape)}, "
                                 f"want {want.dtype}{list(want.shape)}")
        if values:
            torch.testing.assert_close(got.resolve_conj().resolve_neg(),
                                       want.resolve_conj().resolve_neg(), rtol=1e-4,
                                       atol=1e-4, equal_nan=True, check_device=False)
    elif isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            raise AssertionError(f"got {got!r:.80}, want {len(want)} results")
        for g, w in zip(got, want):
            compare(g, w, values)
    elif values and isinstance(want, (int, float, bool)) and not isinstance(got, torch.Tensor):
        if not (got == want or (got != got and want != want)):
            raise AssertionError(f"got {got!r}, want {want!r}")


for index in cfg["ops"]:
    op = op_db[index]
    name = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
    print("START", index, flush=True)
    faulthandler.dump_traceback_later(cfg["timeout"], exit=True)
    result = {"index": index, "op": name, "status": "cpu-only", "samples": 0}
    try:
        samples = []
        for s in op.sample_inputs("cpu", dtype):
            samples.append(s)
            if len(samples) >= cfg["samples"]:
                break
    except Exception as e:
        samples = []
        result["detail"] = f"sample_inputs: {type(e).__name__}: {e}"[:300]
    statuses = []
    for s in samples:
        args = (s.input,) + tuple(s.args)
        try:
            want = op(*fresh(args, "cpu"), **fresh(s.kwargs, "cpu"))
        except Exception:
            continue
        torch_mtia_emu.reset_fallback_counts()
        launches = torch_mtia_emu.compile_stats()["launches"]
        checked = sum(_inductor_backend.check_fallbacks.values()) if compiling else 0
        run = op
        if compiling:
            torch._dynamo.reset()
            run = torch.compile(lambda *a, **k: op(*a, **k))
        try:
            got = run(*fresh(args, dev), **fresh(s.kwargs, dev))
            got = tree_map(got, lambda t: t.cpu())
        except Exception as e:
            statuses.append("raised")
            result.setdefault("detail", f"{type(e).__name__}: {e}"[:300])
            continue
        fell_back = torch_mtia_emu.fallback_counts()
        try:
            compare(got, want, not unchecked.match(op.name))
        except AssertionError as e:
            statuses.append("wrong")
            result["detail"] = f"{s}: {e}"[:600]
            continue
        if compiling:
            if torch_mtia_emu.compile_stats()["launches"] > launches:
                statuses.append("generated")
            else:
                statuses.append("extern")
                if sum(_inductor_backend.check_fallbacks.values()) > checked:
                    result["lowered"] = True  # Inductor lowers it; the check sent it extern
            continue
        statuses.append("fallback" if fell_back else "device")
        if fell_back:
            result.setdefault("fallbacks", sorted(fell_back))
    result["samples"] = len(statuses)
    order = (("wrong", "raised", "generated", "extern") if compiling else
             ("wrong", "raised", "fallback", "device"))
    for status in order:
        if status in statuses:
            result["status"] = status
            break
    faulthandler.cancel_dump_traceback_later()
    print("DONE", json.dumps(result), flush=True)
"""


def op_list(dtype_name, pattern):
    """(index, name) of the OpInfo entries that take the dtype on the CPU."""
    import torch
    from torch.testing._internal.common_methods_invocations import op_db
    dtype = getattr(torch, dtype_name)
    out = []
    for i, op in enumerate(op_db):
        name = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
        if pattern and not re.search(pattern, name):
            continue
        if dtype in op.supported_dtypes("cpu"):
            out.append((i, name))
    return out


def run_chunk(indexes, names, cfg):
    """Runs the ops of one chunk, restarting after a crash; returns their results."""
    results, todo = [], list(indexes)
    env = dict(os.environ, MTIA_EMU_TIMING="0", TORCH_DEVICE_BACKEND_AUTOLOAD="1")
    while todo:
        child_cfg = dict(cfg, ops=todo)
        proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(child_cfg)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        out, err = proc.communicate()
        started, done = None, set()
        for line in out.splitlines():
            if line.startswith("START "):
                started = int(line.split()[1])
            elif line.startswith("DONE "):
                r = json.loads(line[5:])
                results.append(r)
                done.add(r["index"])
                started = None
        if proc.returncode == 0 and started is None:
            break
        # The child died: the op it had started crashed (or hung past the timeout).
        crashed = started if started is not None else next(i for i in todo if i not in done)
        tail = err.strip().splitlines()[-3:]
        results.append({"index": crashed, "op": names[crashed], "status": "crashed",
                        "detail": f"exit {proc.returncode}: {' | '.join(tail)}"[:600]})
        done.add(crashed)
        todo = [i for i in todo if i not in done]
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=2, help="samples per op (default 2)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="child interpreters")
    ap.add_argument("--chunk", type=int, default=40, help="ops per child interpreter")
    ap.add_argument("--ops", default="", help="only ops whose name matches this regex")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--timeout", type=int, default=120, help="seconds an op may take")
    ap.add_argument("--json", help="write every op's result to this file")
    ap.add_argument("--compile", action="store_true",
                    help="run each op compiled (torch.compile, Inductor) instead of eagerly: "
                         "an op ends 'generated' (a generated kernel ran) or 'extern'")
    args = ap.parse_args(argv)
    if args.samples < 1 or args.jobs < 1 or args.chunk < 1:
        ap.error("--samples, --jobs and --chunk must be at least 1")

    t0 = time.time()
    ops = op_list(args.dtype, args.ops)
    names = dict(ops)
    cfg = {"samples": args.samples, "dtype": args.dtype, "timeout": args.timeout,
           "unchecked": UNCHECKED_VALUES.pattern, "compile": args.compile}
    chunks = [[i for i, _ in ops[k:k + args.chunk]] for k in range(0, len(ops), args.chunk)]
    with ThreadPoolExecutor(args.jobs) as pool:
        results = [r for rs in pool.map(lambda c: run_chunk(c, names, cfg), chunks) for r in rs]
    results.sort(key=lambda r: r["index"])

    counts = {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    ran = ("generated", "extern") if args.compile else ("device", "fallback")
    compared = sum(counts.get(s, 0) for s in ran + ("raised", "wrong", "crashed"))
    for r in results:
        if r["status"] in ("wrong", "crashed"):
            print(f"{r['status'].upper()}: {r['op']}: {r.get('detail', '')}")
    print(f"opinfo sweep ({args.dtype}, {args.samples} samples an op, "
          f"{'compiled, ' if args.compile else ''}{time.time() - t0:.0f} s): {len(results)} "
          "ops; " + ", ".join(f"{counts.get(s, 0)} {s}" for s in
                              ran + ("raised", "cpu-only", "wrong", "crashed")))
    if args.compile and compared:
        generated = counts.get("generated", 0)
        lowered = generated + sum(1 for r in results if r["status"] == "extern" and
                                  r.get("lowered"))
        print(f"in generated kernels: {generated} of {compared} ops that ran "
              f"({100.0 * generated / compared:.1f}%)")
        if lowered:
            print(f"of the ops Inductor lowers itself: {generated} of {lowered} "
                  f"({100.0 * generated / lowered:.1f}%) in generated kernels")
    elif compared:
        print(f"on device kernels: {counts.get('device', 0)} of {compared} ops that ran "
              f"({100.0 * counts.get('device', 0) / compared:.1f}%)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if counts.get("wrong") or counts.get("crashed") else 0


if __name__ == "__main__":
    sys.exit(main())
