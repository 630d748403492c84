"""The SE's function ops (python/csrc/ops_math.cpp) beyond what test_ops.py's OpInfo samples
cover: backward passes through autograd, rounded division, shifts, integer division by zero,
GELU/hardswish/hardsigmoid and their gradients in every floating dtype, and empty tensors.
Everything is compared with PyTorch on the CPU and must run on device kernels."""
import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE

FLOATS = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3),
       torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


def _x(*shape, lo=-3.0, hi=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g) * (hi - lo) + lo


UNARY_GRAD = {
    "sin": (torch.sin, -3, 3), "cos": (torch.cos, -3, 3), "tan": (torch.tan, -1.2, 1.2),
    "asin": (torch.asin, -0.9, 0.9), "acos": (torch.acos, -0.9, 0.9), "atan": (torch.atan, -3, 3),
    "sinh": (torch.sinh, -3, 3), "cosh": (torch.cosh, -3, 3), "asinh": (torch.asinh, -3, 3),
    "acosh": (torch.acosh, 1.1, 4), "atanh": (torch.atanh, -0.9, 0.9),
    "expm1": (torch.expm1, -3, 3), "log1p": (torch.log1p, -0.5, 3), "log10": (torch.log10, 0.1, 4),
    "exp2": (torch.exp2, -3, 3), "erfc": (torch.erfc, -3, 3),
    "pow": (lambda t: t ** 2.5, 0.1, 3), "rpow": (lambda t: 1.7 ** t, -2, 2),
    "gelu": (F.gelu, -5, 5), "gelu_tanh": (lambda t: F.gelu(t, approximate="tanh"), -5, 5),
    "hardswish": (F.hardswish, -5, 5), "hardsigmoid": (F.hardsigmoid, -5, 5),
    "hardtanh": (lambda t: F.hardtanh(t, -0.5, 2.0), -3, 3), "relu6": (F.relu6, -3, 8),
    "leaky_relu": (lambda t: F.leaky_relu(t, 0.1), -3, 3),
    "logsigmoid": (F.logsigmoid, -30, 30),
    "elu": (lambda t: F.elu(t, 0.7), -3, 3), "selu": (F.selu, -3, 3),
    "celu": (lambda t: F.celu(t, 1.5), -3, 3),
    "softplus": (lambda t: F.softplus(t, 2.0, 4.0), -4, 4), "mish": (F.mish, -5, 5),
    "logit": (torch.logit, 0.05, 0.95), "logit_eps": (lambda t: torch.logit(t, 0.2), 0.05, 0.95),
}


@pytest.mark.parametrize("name", sorted(UNARY_GRAD))
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_backward_matches_cpu(name, dtype, no_fallback):
    fn, lo, hi = UNARY_GRAD[name]
    base = _x(7, 9, lo=lo, hi=hi).to(dtype)
    # the CPU reference in float32, rounded once, as the device computes the narrow dtypes
    ref_in = base.float().requires_grad_()
    ref = fn(ref_in)
    grad = _x(7, 9, seed=1)
    ref.backward(grad)
    x = base.to(DEVICE).t().contiguous().t().detach().requires_grad_()  # non-contiguous
    y = fn(x)
    y.backward(grad.to(dtype).to(DEVICE))
    torch.testing.assert_close(y.detach().cpu().float(), ref.detach().to(dtype).float(),
                               **TOL[dtype])
    torch.testing.assert_close(x.grad.cpu().float(), ref_in.grad.to(dtype).float(),
                               rtol=TOL[dtype]["rtol"] * 4, atol=TOL[dtype]["atol"] * 4)


def test_gelu_tails_are_accurate(no_fallback):
    # far in the negative tail 1 + erf(x) cancels; the device's forms keep the digits
    x = torch.tensor([-12.0, -8.0, -5.0, 0.0, 5.0, 30.0], dtype=torch.float64)
    exact = x * 0.5 * torch.special.erfc(-x / 2 ** 0.5)
    got = F.gelu(x.float().to(DEVICE)).cpu().double()
    torch.testing.assert_close(got, exact, rtol=1e-5, atol=0)


@pytest.mark.parametrize("mode", ["floor", "trunc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8, torch.int32,
                                   torch.int64], ids=str)
def test_rounded_division(mode, dtype, no_fallback):
    if dtype.is_floating_point:
        a, b = _x(40, lo=-20, hi=20).to(dtype), _x(40, lo=0.5, hi=4, seed=2).to(dtype)
        b[::3] *= -1
    else:
        a = torch.randint(-100, 100, (40,), generator=torch.Generator().manual_seed(0)).to(dtype)
        b = torch.randint(1, 9, (40,), generator=torch.Generator().manual_seed(1)).to(dtype)
        b[::3] *= -1
    want = torch.div(a, b, rounding_mode=mode)
    got = torch.div(a.to(DEVICE), b.to(DEVICE), rounding_mode=mode).cpu()
    torch.testing.assert_close(got, want)
    # a Python number as the divisor
    torch.testing.assert_close(torch.div(a.to(DEVICE), 3, rounding_mode=mode).cpu(),
                               torch.div(a, 3, rounding_mode=mode))


@pytest.mark.parametrize("op", [torch.fmod, torch.remainder, torch.floor_divide,
                                lambda a, b: torch.div(a, b, rounding_mode="trunc")])
def test_integer_division_by_zero_raises(op):
    a = torch.arange(6, device=DEVICE)
    b = torch.tensor([1, 2, 0, 3, 4, 5], device=DEVICE)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        op(a, b)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        op(a, 0)
    # floats divide by zero the IEEE way, as on the CPU
    z = torch.zeros(6)
    torch.testing.assert_close(op(a.float(), z.to(DEVICE)).cpu(), op(a.float().cpu(), z),
                               equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64], ids=str)
def test_shift_operators(dtype, no_fallback):
    a = torch.tensor([-100, -3, -1, 0, 1, 5, 77, 100], dtype=dtype)
    s = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7], dtype=dtype)
    d = a.to(DEVICE)
    torch.testing.assert_close((d << s.to(DEVICE)).cpu(), a << s)
    torch.testing.assert_close((d >> s.to(DEVICE)).cpu(), a >> s)
    torch.testing.assert_close((d << 2).cpu(), a << 2)
    torch.testing.assert_close((d >> 1).cpu(), a >> 1)
    d <<= 1
    torch.testing.assert_close(d.cpu(), a << 1)
    d >>= 2
    torch.testing.assert_close(d.cpu(), (a << 1) >> 2)


def test_round_decimals(no_fallback):
    x = _x(50, lo=-100, hi=100)
    for decimals in (-1, 0, 2):
        torch.testing.assert_close(torch.round(x.to(DEVICE), decimals=decimals).cpu(),
                                   torch.round(x, decimals=decimals))


@pytest.mark.parametrize("fn", [torch.sin, torch.floor, torch.sign, F.gelu, F.hardswish,
                                lambda t: torch.pow(t, 3.0), lambda t: torch.atan2(t, t),
                                lambda t: torch.fmod(t, 2.0)])
def test_empty_tensors(fn, no_fallback):
    for shape in [(0,), (3, 0, 2)]:
        got = fn(torch.empty(shape, device=DEVICE))
        assert got.shape == fn(torch.empty(shape)).shape


def test_float64_goes_to_the_cpu():
    import torch_mtia_emu
    torch_mtia_emu.reset_fallback_counts()
    x = _x(5).double()
    torch.testing.assert_close(torch.sin(x.to(DEVICE)).cpu(), torch.sin(x))
    assert any("Double" in k for k in torch_mtia_emu.fallback_counts())


def test_bad_gelu_argument_raises():
    with pytest.raises(RuntimeError, match="approximate"):
        torch.ops.aten.gelu(torch.ones(3, device=DEVICE), approximate="sigmoid")


def test_native_dropout_uses_the_device_generator(no_fallback):
    x = torch.ones(64, 64, device=DEVICE, requires_grad=True)
    torch.manual_seed(3)
    out, mask = torch.ops.aten.native_dropout(x, 0.25, True)
    keep = mask.cpu()
    assert keep.dtype == torch.bool and 0.65 < keep.float().mean().item() < 0.85
    torch.testing.assert_close(out.detach().cpu(), keep.float() / 0.75)
    g = torch.randn(64, 64)
    back = torch.ops.aten.native_dropout_backward(g.to(DEVICE), mask, 1 / 0.75)
    torch.testing.assert_close(back.cpu(), g * keep.float() / 0.75)
    # the same seed, the same mask (the device's generator is seeded by torch.manual_seed)
    torch.manual_seed(3)
    _, again = torch.ops.aten.native_dropout(x, 0.25, True)
    assert torch.equal(again.cpu(), keep)
    # eval keeps everything; p = 1 drops everything
    out, mask = torch.ops.aten.native_dropout(x, 0.25, False)
    assert torch.equal(out.detach().cpu(), x.detach().cpu()) and bool(mask.cpu().all())
    out, mask = torch.ops.aten.native_dropout(x, 1.0, True)
    assert not bool(out.detach().cpu().any()) and not bool(mask.cpu().any())
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        torch.ops.aten.native_dropout(x, 1.5, True)


def test_binary_functions_at_their_edges(no_fallback):
    inf, nan = float("inf"), float("nan")
    a = torch.tensor([-inf, inf, -inf, 1.0, 0.0, nan, 3.0, 0.0, -2.0])
    b = torch.tensor([-inf, inf, 5.0, 1.0, nan, 2.0, 4.0, 0.0, 0.0])
    da, db = a.to(DEVICE), b.to(DEVICE)
    for fn in (torch.logaddexp, torch.logaddexp2, torch.xlogy, torch.fmax, torch.fmin,
               torch.heaviside):
        torch.testing.assert_close(fn(da, db).cpu(), fn(a, b), equal_nan=True,
                                   msg=lambda m: f"{fn.__name__}: {m}")
