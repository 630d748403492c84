"""Every op with a device kernel against PyTorch on the CPU, on PyTorch's own OpInfo sample
inputs, for each dtype the device kernels take, contiguous and non-contiguous.

Each case also checks that the op really ran on the device: the CPU fallback must not have
been used (samples that ask for a dtype the kernels do not have, e.g. softmax(dtype=float64),
are left out). float16/bfloat16 references are computed in float32 on the CPU and rounded
once, because the CPU lacks many half kernels and the device computes in float32 too.
"""
import pytest
import torch
import torch_mtia_emu
from torch.testing._internal.common_methods_invocations import op_db

from conftest import DEVICE

F = (torch.float32, torch.float16, torch.bfloat16)
I = (torch.int8, torch.int32, torch.int64)
NUM = F + I
ALL = NUM + (torch.bool,)
KERNEL_DTYPES = set(ALL)

# OpInfo name -> dtypes that must run entirely on device kernels.
DEVICE_OPS = {
    "abs": NUM, "neg": NUM, "nn.functional.relu": NUM,
    "exp": ALL, "log": ALL, "sqrt": ALL, "rsqrt": ALL, "tanh": ALL, "erf": ALL,
    "sigmoid": ALL, "nn.functional.silu": F, "reciprocal": ALL, "log2": ALL,
    "add": ALL, "sub": NUM, "mul": ALL, "div": ALL, "maximum": ALL, "minimum": ALL,
    "eq": ALL, "ne": ALL, "lt": ALL, "le": ALL, "gt": ALL, "ge": ALL,
    "logical_and": ALL, "logical_or": ALL, "logical_xor": ALL, "logical_not": ALL,
    "bitwise_and": I + (torch.bool,), "bitwise_or": I + (torch.bool,),
    "bitwise_xor": I + (torch.bool,), "bitwise_not": I + (torch.bool,),
    "clamp": NUM, "clamp_min": NUM, "clamp_max": NUM, "where": ALL,
    "addcmul": NUM, "addcdiv": F,
    "sum": ALL, "mean": F, "var": F, "std": F, "amax": ALL, "amin": ALL,
    "max": ALL, "min": ALL, "all": ALL, "any": ALL, "argmax": NUM, "argmin": NUM,
    "mm": F, "addmm": F, "bmm": F, "baddbmm": F, "matmul": F,
    "softmax": F, "log_softmax": F, "nn.functional.layer_norm": F,
    "nn.functional.mse_loss": F, "nn.functional.nll_loss": F,
    # upsampling (ops_upsample.cpp)
    "nn.functional.interpolate": F, "nn.functional.upsample_nearest": F,
    "nn.functional.upsample_bilinear": F,
    "isnan": ALL, "nan_to_num": ALL, "aminmax": ALL,
    "cat": ALL, "arange": NUM, "fill": ALL, "zero_": ALL,
    # the SE's function ops (ops_math.cpp)
    "sin": ALL, "cos": ALL, "tan": ALL, "asin": ALL, "acos": ALL, "atan": ALL,
    "sinh": ALL, "cosh": ALL, "asinh": ALL, "acosh": ALL, "atanh": ALL,
    "expm1": ALL, "log1p": ALL, "log10": ALL, "exp2": ALL, "erfc": ALL, "lgamma": ALL,
    "floor": NUM, "ceil": NUM, "trunc": NUM, "round": F, "frac": F, "sign": NUM, "sgn": NUM,
    "pow": F, "atan2": ALL, "hypot": F, "copysign": ALL,
    "fmod": NUM, "remainder": NUM, "floor_divide": NUM,
    "bitwise_left_shift": I, "bitwise_right_shift": I,
    "nn.functional.gelu": F, "nn.functional.hardswish": F, "nn.functional.hardsigmoid": F,
    "nn.functional.hardtanh": NUM, "nn.functional.leaky_relu": F,
    "isneginf": ALL, "isposinf": ALL, "nn.functional.logsigmoid": F,
    "nn.functional.elu": F, "nn.functional.selu": F, "nn.functional.celu": F,
    "nn.functional.softplus": F, "nn.functional.mish": F, "logit": F,
    "logaddexp": F, "logaddexp2": F, "xlogy": F, "fmax": NUM, "fmin": NUM, "heaviside": NUM,
    # composed from the device ops above (ops_composed.cpp)
    "linalg.vector_norm": F, "norm": F, "cdist": F, "var_mean": F, "std_mean": F,
    "nansum": F, "equal": ALL, "roll": ALL, "vdot": F, "addbmm": F,
}

# Samples an op's device kernels do not cover by design (they take the CPU fallback).
SKIP_SAMPLE = {
    # PyTorch 1.13's CPU aminmax resizes a 0-dim input's keepdim result to [1] (with a
    # deprecation warning) although its meta function says []; the device follows the meta.
    "aminmax": lambda s: s.input.dim() == 0 and s.kwargs.get("keepdim", False),
}

# Looser tolerances where the device rounds differently from a float64-free CPU reference:
# composed ops on the narrow dtypes, and the float32 summation order of the kernels.
TOL = {
    torch.float32: dict(rtol=1.3e-5, atol=1e-5),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
}
OP_TOL = {
    # one-element rows: the kernel's (x - mean) is a rounding error times rstd = 1/sqrt(eps)
    "nn.functional.layer_norm": {torch.float32: dict(rtol=1e-4, atol=2e-4)},
    "var": {torch.float16: dict(rtol=5e-3, atol=5e-3)},
    # 2.13's samples reach |x| ~ 9: a sum of products that cancels to ~0.2 differs from the
    # CPU's by the fp32 rounding of its larger terms (the DPE adds in another order)
    "matmul": {torch.float32: dict(rtol=1e-4, atol=5e-5)},
    "std": {torch.float16: dict(rtol=5e-3, atol=5e-3)},
    # |a|^2 + |b|^2 - 2 a.b cancels near 0: the sum's order decides the last digits, and
    # rounding the inputs to float16/bfloat16 first shows them
    "cdist": {torch.float16: dict(rtol=2e-1, atol=5e-2), torch.bfloat16: dict(rtol=2e-1, atol=2e-1)},
}

# OpInfo variants left to other tests: rounded division (test_math.py: its narrow dtypes round
# the quotient before trunc, as the CPU does, where this file's reference computes in float32;
# bool takes the CPU), softmax with a dtype= argument (every sample asks for float64), the
# nuclear norm (an SVD, which has no device kernel), and the interpolation modes without a
# device kernel: bicubic, and area (its 3-D samples are adaptive_avg_pool3d).
CPU_VARIANTS = {("div", "trunc_rounding"), ("div", "floor_rounding"),
                ("nn.functional.interpolate", "bicubic"), ("nn.functional.interpolate", "area"),
                ("softmax", "with_dtype"), ("log_softmax", "with_dtype"), ("norm", "nuc")}

# The ops the device implements, from its op table (python/csrc/op_table.def): every OpInfo
# whose ATen op has a row runs here, at the dtypes DEVICE_OPS gives it (float32 if it gives
# none), unless OTHER_TESTS names the file that covers it instead.
TABLE_OPS = {overload.split(".")[0] for overload, _, _ in torch_mtia_emu._C._op_table()}
FROM_TABLE = {op.name for op in op_db if op.name in TABLE_OPS or op.aten_name in TABLE_OPS}
OTHER_TESTS = {
    "as_strided": "test_copies_views.py: the result depends on the storage's layout, which a "
                  "copy to the device need not keep",
    "empty": "test_empty.py: the values are undefined",
    "empty_strided": "test_empty.py: the values are undefined",
    "scatter": "test_index.py: its reduce= samples take the CPU fallback by design",
    "view_as_real": "test_views_conj.py: its samples are complex",
}
EXPECTED_ON_DEVICE = {name: DEVICE_OPS.get(name, (torch.float32,))
                      for name in (FROM_TABLE | set(DEVICE_OPS)) - set(OTHER_TESTS)}

CASES = [(op, dt) for op in op_db
         if op.name in EXPECTED_ON_DEVICE and (op.name, op.variant_test_name) not in CPU_VARIANTS
         for dt in EXPECTED_ON_DEVICE[op.name]]


def _case_id(case):
    op, dt = case
    variant = f".{op.variant_test_name}" if op.variant_test_name else ""
    return f"{op.name}{variant}-{str(dt).replace('torch.', '')}"


def _map(x, fn):
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_map(v, fn) for v in x)
    if isinstance(x, dict):
        return {k: _map(v, fn) for k, v in x.items()}
    return x


def _up(x):
    return _map(x, lambda t: t.float() if t.dtype in (torch.float16, torch.bfloat16) else t)


def _asks_foreign_dtype(sample) -> bool:
    """A sample whose kwargs ask for a dtype the kernels do not take (it legitimately uses the
    CPU fallback), or a rounded division (test_math.py)."""
    d = sample.kwargs.get("dtype")
    return (d is not None and d not in KERNEL_DTYPES) or \
        sample.kwargs.get("rounding_mode") is not None


def _reference(op, args, kwargs, dtype):
    if dtype in (torch.float16, torch.bfloat16):
        out = op(*_up(args), **_up(kwargs))
        return _map(out, lambda t: t.to(dtype) if t.dtype == torch.float32 else t)
    return op(*args, **kwargs)


def test_op_table_is_what_the_dispatcher_has():
    """The table lists exactly the ATen overloads registered under the MTIA key, so a family
    whose section no op file registers, or a registration outside the table, shows here."""
    table = {f"aten::{overload}" for overload, _, _ in torch_mtia_emu._C._op_table()}
    registered = {name for name in torch._C._dispatch_get_registrations_for_dispatch_key("MTIA")
                  if name.startswith("aten::")}
    assert table == registered
    assert len(table) == len(torch_mtia_emu._C._op_table()), "an overload listed twice"
    families = [name for name, _ in torch_mtia_emu._C._op_families()]
    assert {family for _, family, _ in torch_mtia_emu._C._op_table()} == set(families)


def test_op_table_kinds_are_atens():
    """A row is `structured` exactly when ATen's native_functions.yaml (shipped with torchgen)
    declares the overload structured."""
    import pathlib
    import re

    import torchgen
    yaml = pathlib.Path(torchgen.__file__).parent / "packaged/ATen/native/native_functions.yaml"
    entries = re.split(r"^- func: ", yaml.read_text(), flags=re.M)[1:]
    structured = {e.split("(", 1)[0] for e in entries
                  if re.search(r"^  structured: True$", e, flags=re.M)}
    wrong = [(overload, kind) for overload, _, kind in torch_mtia_emu._C._op_table()
             if (kind == "structured") != (overload in structured)]
    assert not wrong


def test_other_tests_name_table_ops():
    assert set(OTHER_TESTS) <= FROM_TABLE


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_op_matches_cpu(case):
    op, dtype = case
    tol = OP_TOL.get(op.name, {}).get(dtype, TOL.get(dtype, {}))
    checked = 0
    skip = SKIP_SAMPLE.get(op.name, lambda s: False)
    for sample in op.sample_inputs("cpu", dtype):
        if _asks_foreign_dtype(sample) or skip(sample):
            continue
        for variant in (sample, sample.noncontiguous()):
            args = (variant.input,) + tuple(variant.args)
            try:
                expected = _reference(op, args, variant.kwargs, dtype)
            except (RuntimeError, TypeError):
                continue  # the CPU does not take this sample either
            torch_mtia_emu.reset_fallback_counts()
            got = op(*_map(args, lambda t: t.to(DEVICE)), **_map(variant.kwargs,
                                                                 lambda t: t.to(DEVICE)))
            fell_back = torch_mtia_emu.fallback_counts()
            got = _map(got, lambda t: t.cpu())
            torch.testing.assert_close(got, expected, equal_nan=True, **tol,
                                       msg=lambda m: f"{_case_id(case)} on {variant}: {m}")
            assert fell_back == {}, f"{_case_id(case)} fell back to the CPU: {fell_back}"
            checked += 1
    assert checked > 0, "no sample ran"


def _grad_cases():
    x = torch.randn(6, 7, generator=torch.Generator().manual_seed(3))
    return {
        "softmax": lambda t: torch.softmax(t, 1),
        "log_softmax": lambda t: torch.log_softmax(t, 0),
        "tanh": torch.tanh,
        "sigmoid": torch.sigmoid,
        "silu": torch.nn.functional.silu,
        "relu": torch.relu,
        "layer_norm": lambda t: torch.nn.functional.layer_norm(
            t, (7,), torch.linspace(0.5, 1.5, 7, device=t.device),
            torch.linspace(-1, 1, 7, device=t.device)),
        "mse_loss": lambda t: torch.nn.functional.mse_loss(t, torch.ones_like(t)),
        "mean": lambda t: t.mean(0),
        "sum": lambda t: t.sum(1),
        "amax": lambda t: t.amax(1),
        "matmul": lambda t: t @ t.t(),
    }, x


GRAD_FNS, GRAD_X = _grad_cases()


@pytest.mark.parametrize("name", sorted(GRAD_FNS))
@pytest.mark.parametrize("noncontiguous", [False, True], ids=["contig", "noncontig"])
def test_backward_matches_cpu(name, noncontiguous, no_fallback):
    """Backward formulas (softmax, log_softmax, layer_norm, tanh/sigmoid/silu/relu, mse_loss,
    reductions, matmul) run on device kernels and agree with the CPU's gradients."""
    fn = GRAD_FNS[name]
    base = GRAD_X.t().contiguous().t() if noncontiguous else GRAD_X

    def grad(device):
        x = base.detach().clone().to(device).requires_grad_()
        y = fn(x)
        g = torch.linspace(-1, 1, y.numel()).reshape(y.shape).to(device)
        (y * g).sum().backward()
        return x.grad.cpu()

    torch.testing.assert_close(grad(DEVICE), grad("cpu"), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layer_norm_backward_narrow_dtypes(dtype, no_fallback):
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(4))
    w = torch.rand(16) + 0.5
    b = torch.rand(16)

    def grads(device, dt):
        xs = x.to(device, dt).requires_grad_()
        ws = w.to(device, dt).requires_grad_()
        bs = b.to(device, dt).requires_grad_()
        y = torch.nn.functional.layer_norm(xs, (16,), ws, bs)
        (y * y).sum().backward()
        return [t.grad.float().cpu() for t in (xs, ws, bs)]

    for got, want in zip(grads(DEVICE, dtype), grads("cpu", torch.float32)):
        torch.testing.assert_close(got, want, rtol=5e-2, atol=5e-2)


def test_foreach_ops_match_cpu(no_fallback):
    """The _foreach ops an optimizer uses, on device against the CPU."""
    g = torch.Generator().manual_seed(5)
    shapes = [(3, 4), (5,), (2, 3, 2)]
    xs = [torch.randn(s, generator=g) for s in shapes]
    ys = [torch.rand(s, generator=g) + 0.5 for s in shapes]
    zs = [torch.randn(s, generator=g) for s in shapes]

    def run(device):
        a = [t.to(device) for t in xs]
        b = [t.to(device) for t in ys]
        c = [t.to(device) for t in zs]
        out = []
        out += torch._foreach_add(a, b, alpha=0.5)
        out += torch._foreach_mul(a, 3.0)
        out += torch._foreach_div(a, b)
        out += torch._foreach_addcmul(a, b, c, value=0.25)
        out += torch._foreach_addcdiv(a, c, b, value=2.0)
        out += torch._foreach_abs(c)
        out += torch._foreach_sqrt(b)
        out += torch._foreach_maximum(a, c)
        out += torch._foreach_norm(a)
        torch._foreach_add_(a, 1.5)
        torch._foreach_mul_(a, b)
        torch._foreach_sub_(a, c, alpha=2)
        torch._foreach_div_(a, [2.0, 4.0, 8.0])
        torch._foreach_addcmul_(a, b, c)
        torch._foreach_neg_(c)
        torch._foreach_zero_(b)
        return [t.cpu() for t in out + a + b + c]

    for got, want in zip(run(DEVICE), run("cpu")):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int64, torch.bfloat16])
def test_add_sub_alpha_match_cpu(dtype, no_fallback):
    """add/sub with alpha (an optimizer's update) against the CPU: strided and broadcast
    operands, in place too; float32 and the integers take one pointwise launch each."""
    g = torch.Generator().manual_seed(6)
    a = (torch.randn(9, 37, generator=g) * 8).to(dtype)
    b = (torch.randn(37, 9, generator=g) * 8).to(dtype)
    row = (torch.randn(37, generator=g) * 8).to(dtype)
    alpha = -0.375 if dtype.is_floating_point else 3

    def run(device):
        x, y, r = a.to(device), b.to(device), row.to(device)
        out = [torch.add(x, y.t(), alpha=alpha), torch.sub(x, r, alpha=alpha)]
        z = x.clone()
        z.add_(y.t(), alpha=alpha)
        return [t.cpu() for t in out + [z]]

    torch_mtia_emu.reset_kernel_launch_counts()
    got = run(DEVICE)
    counts = torch_mtia_emu.kernel_launch_counts()
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    for g_, w in zip(got, run("cpu")):
        torch.testing.assert_close(g_.double(), w.double(), rtol=tol, atol=tol)
    if dtype != torch.bfloat16:
        assert counts.get("pointwise") == 3
        assert "binary_scalar" not in counts


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_activation_backward_ops_match_cpu(dtype, no_fallback):
    """tanh/sigmoid/silu/threshold backward (one pointwise launch each) against the CPU, with a
    broadcast and a transposed operand and a non-zero threshold."""
    g = torch.Generator().manual_seed(7)
    grad = torch.randn(33, 17, generator=g).to(dtype)
    x = (torch.randn(17, 33, generator=g) * 3).to(dtype).t()
    row = torch.rand(17, generator=g).to(dtype)

    def run(device, dt):
        gd, xd, rd = (t.to(device, dt) for t in (grad, x, row))
        y = torch.tanh(xd)
        if device == DEVICE:
            torch_mtia_emu.reset_kernel_launch_counts()
        out = (torch.ops.aten.tanh_backward(gd, y),
               torch.ops.aten.sigmoid_backward(gd, rd),
               torch.ops.aten.silu_backward(gd, xd),
               torch.ops.aten.threshold_backward(gd, xd, 0.25))
        return [t.cpu().float() for t in out]

    got = run(DEVICE, dtype)
    launches = torch_mtia_emu.kernel_launch_counts()
    # The CPU lacks some of these for float16: its reference runs in float32 on the same values.
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for g_, w in zip(got, run("cpu", torch.float32)):
        torch.testing.assert_close(g_, w, rtol=tol, atol=tol)
    assert launches == {"pointwise": 4} if dtype == torch.float32 else "pointwise" in launches


@pytest.mark.parametrize("shape", [(5, 7, 3), (70, 130, 90), (9, 0, 4), (0, 5, 6)],
                         ids=lambda s: "x".join(map(str, s)))
def test_int8_matmul_runs_on_the_dpe_exactly(shape, no_fallback):
    """torch._int_mm (what int8 linear layers call): int8 operands, int32 results, exact, one
    matmul launch; a transposed operand is read as it lies."""
    m, k, n = shape
    g = torch.Generator().manual_seed(3)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
    bt = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g)
    want = a.int() @ bt.int().t()  # the nested-sum reference, in int32
    torch_mtia_emu.reset_kernel_launch_counts()
    got = torch._int_mm(a.to(DEVICE), bt.to(DEVICE).t())
    assert got.dtype == torch.int32 and got.shape == (m, n)
    assert torch.equal(got.cpu(), want)
    out = torch.empty(0, dtype=torch.int32, device=DEVICE)
    torch._int_mm(a.to(DEVICE), bt.t().contiguous().to(DEVICE), out=out)
    assert torch.equal(out.cpu(), want)
    launches = torch_mtia_emu.kernel_launch_counts()
    assert launches.get("matmul", 0) == (2 if m * n * k else 0)


def test_int8_matmul_bad_input_is_an_error():
    a = torch.ones(4, 3, dtype=torch.int8, device=DEVICE)
    with pytest.raises(RuntimeError, match="self.size\\(1\\) needs to match"):
        torch._int_mm(a, a)
    with pytest.raises(RuntimeError, match="int8 or uint8"):
        torch._int_mm(a.float(), a.t())
    with pytest.raises(RuntimeError, match="int32"):
        torch._int_mm(a, a.t(), out=torch.empty(4, 4, device=DEVICE))
