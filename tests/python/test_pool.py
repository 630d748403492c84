"""2-D pooling on the device (pool2d / pool2d_backward kernels) against PyTorch on the CPU:
max with indices, average, adaptive average and adaptive max, forward and backward through
autograd, float32/float16/bfloat16 (and integer max), padding/stride/dilation/ceil_mode
variants, 3-D and 4-D inputs, channels_last and strided inputs, empty batches, bad arguments.
Every case must run on device kernels (no CPU fallback)."""
import copy

import pytest
import torch
import torch.nn.functional as F
import torch_mtia_emu

from conftest import DEVICE, FLOATS, TOL, layout_input as _input

def _run(fn, x, dtype, device):
    """fn(x) on `device` in `dtype` (the CPU reference in float32, rounded once), with the
    gradient of sum(out * weights) with respect to x."""
    xd = x.to(dtype).to(device)
    xd = (xd.float() if device == "cpu" else xd).detach().requires_grad_()
    out = fn(xd)
    vals = out[0] if isinstance(out, tuple) else out
    w = torch.linspace(-1, 1, vals.numel()).reshape(vals.shape).to(device)
    (vals * w.to(vals.dtype)).sum().backward()
    res = [t.detach().cpu() for t in (out if isinstance(out, tuple) else (out,))]
    if device == "cpu":
        res = [t.to(dtype) if t.is_floating_point() else t for t in res]
        grad = xd.grad.to(dtype)
    else:
        grad = xd.grad.cpu()
    return res, grad


def _check(fn, x, dtype, launches):
    torch_mtia_emu.reset_kernel_launch_counts()
    got, ggot = _run(fn, x, dtype, DEVICE)
    counts = torch_mtia_emu.kernel_launch_counts()
    want, gwant = _run(fn, x, dtype, "cpu")
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, **TOL[dtype])
    torch.testing.assert_close(ggot, gwant, **TOL[dtype])
    for k in launches:
        assert counts.get(k, 0) > 0, f"{k} was not launched: {counts}"


MAX_CASES = [
    # kernel, stride, padding, dilation, ceil_mode
    (3, 2, 1, 1, False),
    ((2, 3), (2, 1), (1, 0), (2, 1), True),
    (3, 3, 1, 2, True),
    (2, None, 0, 1, False),
    (4, 1, 2, 1, False),  # overlapping windows: several outputs pick one element
]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("case", range(len(MAX_CASES)))
def test_max_pool2d_with_indices(dtype, layout, case, no_fallback):
    k, s, p, d, ceil = MAX_CASES[case]
    x = _input((2, 3, 11, 10), layout, seed=case)
    fn = lambda t: F.max_pool2d(t, k, s, p, d, ceil_mode=ceil, return_indices=True)  # noqa: E731
    _check(fn, x, dtype, ["pool2d", "pool2d_backward"])


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_max_pool2d_without_indices_and_3d(dtype, no_fallback):
    """F.max_pool2d (no indices) and nn.MaxPool2d reach the device, also for (C, H, W)."""
    x = _input((3, 9, 9), "contiguous", seed=5)
    _check(lambda t: F.max_pool2d(t, 3, 2, 1), x, dtype, ["pool2d", "pool2d_backward"])
    _check(torch.nn.MaxPool2d(2, ceil_mode=True), _input((2, 4, 7, 7), "channels_last"), dtype,
           ["pool2d"])


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int8])
def test_max_pool2d_integers(dtype, no_fallback):
    x = (torch.randn(2, 3, 8, 9, generator=torch.Generator().manual_seed(6)) * 50).to(dtype)
    got = F.max_pool2d(x.to(DEVICE), 3, 2, 1, return_indices=True)
    want = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    for g, w in zip(got, want):
        assert torch.equal(g.cpu(), w)


AVG_CASES = [
    # kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    (3, 2, 1, False, True, None),
    (3, 2, 1, True, False, None),
    ((2, 3), (1, 2), (1, 1), True, True, None),
    (3, 3, 1, False, True, 4),
    ((4, 4), (2, 3), 1, True, False, -2),  # a negative override divides too
    (2, None, 0, False, True, None),
]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("case", range(len(AVG_CASES)))
def test_avg_pool2d(dtype, layout, case, no_fallback):
    k, s, p, ceil, cip, div = AVG_CASES[case]
    x = _input((2, 3, 10, 11), layout, seed=10 + case)
    fn = lambda t: F.avg_pool2d(t, k, s, p, ceil, cip, div)  # noqa: E731
    _check(fn, x, dtype, ["pool2d", "pool2d_backward"])


def test_avg_pool2d_3d_input(no_fallback):
    _check(lambda t: F.avg_pool2d(t, 2, 1, 1), _input((4, 6, 5), "contiguous"), torch.float32,
           ["pool2d", "pool2d_backward"])


ADAPTIVE_SIZES = [(4, 5), (3, 4), (7, 9), (1, 1), (5, 1)]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("size", ADAPTIVE_SIZES, ids=str)
def test_adaptive_avg_pool2d(dtype, layout, size, no_fallback):
    x = _input((2, 3, 12, 10), layout, seed=20)
    # (1, 1) is PyTorch's mean over H and W: the reduction kernels, not pool2d
    launches = ["mean"] if size == (1, 1) else ["pool2d", "pool2d_backward"]
    _check(lambda t: F.adaptive_avg_pool2d(t, size), x, dtype, launches)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("size", ADAPTIVE_SIZES, ids=str)
def test_adaptive_max_pool2d(dtype, layout, size, no_fallback):
    x = _input((2, 3, 12, 10), layout, seed=21)
    _check(lambda t: F.adaptive_max_pool2d(t, size, return_indices=True), x, dtype,
           ["pool2d", "pool2d_backward"])


def test_adaptive_3d_input(no_fallback):
    x = _input((3, 7, 6), "contiguous", seed=22)
    _check(lambda t: F.adaptive_avg_pool2d(t, (3, 4)), x, torch.float32, ["pool2d"])
    _check(lambda t: F.adaptive_max_pool2d(t, (4, 2)), x, torch.float32, ["pool2d"])


def test_empty_batch(no_fallback):
    """An empty batch launches nothing and gives empty results and gradients."""
    x = torch.randn(0, 3, 8, 8)
    fns = [lambda t: F.max_pool2d(t, 2), lambda t: F.avg_pool2d(t, 3, 2, 1),
           lambda t: F.adaptive_avg_pool2d(t, (3, 3)), lambda t: F.adaptive_max_pool2d(t, 2)]
    for fn in fns:
        torch_mtia_emu.reset_kernel_launch_counts()
        xd = x.to(DEVICE).requires_grad_()
        out = fn(xd)
        assert out.shape == fn(x).shape
        out.sum().backward()
        assert xd.grad.shape == x.shape
        assert "pool2d" not in torch_mtia_emu.kernel_launch_counts()


@pytest.mark.parametrize("call", [
    lambda t: F.max_pool2d(t, 0),
    lambda t: F.max_pool2d(t, 2, padding=2),  # padding over half the kernel
    lambda t: F.max_pool2d(t, 2, dilation=0),
    lambda t: F.max_pool2d(t.reshape(1, 1, 2, 3, 16), 2),  # 5-D
    lambda t: F.max_pool2d(t, 9),  # output too small
    lambda t: F.avg_pool2d(t, 2, stride=0),
    lambda t: F.avg_pool2d(t, 2, divisor_override=0),
    lambda t: F.adaptive_avg_pool2d(t, (1, 2, 3)),
    lambda t: F.adaptive_avg_pool2d(t[:, :, :0], 2),
    lambda t: F.adaptive_max_pool2d(t.reshape(6, 16), 2),
], ids=["kernel0", "padding", "dilation0", "5d", "too_small", "stride0", "divisor0",
        "avg_output_size", "avg_empty_plane", "max_2d"])
def test_bad_arguments_raise(call):
    x = torch.randn(2, 3, 4, 4)
    with pytest.raises(RuntimeError):
        call(x)
    with pytest.raises(RuntimeError):
        call(x.to(DEVICE))


def test_max_pool_backward_checks_indices():
    x = torch.randn(1, 2, 4, 4, device=DEVICE)
    out, idx = F.max_pool2d(x, 2, return_indices=True)
    with pytest.raises(RuntimeError, match="indices"):
        torch.ops.aten.max_pool2d_with_indices_backward(torch.ones_like(out), x, [2, 2], [2, 2],
                                                         [0, 0], [1, 1], False, idx.int())


def test_float64_takes_the_cpu_fallback():
    x = torch.randn(1, 2, 6, 6, dtype=torch.float64)
    torch_mtia_emu.reset_fallback_counts()
    got = F.max_pool2d(x.to(DEVICE), 2).cpu()
    assert torch.equal(got, F.max_pool2d(x, 2))
    assert any("max_pool2d_with_indices" in k and "Double" in k
               for k in torch_mtia_emu.fallback_counts())
    prev = torch_mtia_emu.get_fallback_mode()
    torch_mtia_emu.set_fallback_mode("error")
    try:
        with pytest.raises(NotImplementedError):
            F.avg_pool2d(x.to(DEVICE), 2)
    finally:
        torch_mtia_emu.set_fallback_mode(prev)


def test_small_cnn_trains_like_the_cpu(no_fallback):
    """A conv-free CNN-ish stack of pools and linear layers: one SGD step matches the CPU."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.MaxPool2d(2), torch.nn.AvgPool2d(3, 1, 1),
                                torch.nn.AdaptiveMaxPool2d((3, 3)), torch.nn.AdaptiveAvgPool2d(2),
                                torch.nn.Flatten(), torch.nn.Linear(12, 4))
    x = torch.randn(5, 3, 12, 12)

    def step(device):
        m = copy.deepcopy(model).to(device)
        xd = x.to(device).requires_grad_()
        y = m(xd)
        loss = (y * y).mean()
        loss.backward()
        return loss.item(), xd.grad.cpu()

    lg, gg = step(DEVICE)
    lw, gw = step("cpu")
    assert abs(lg - lw) < 1e-5
    torch.testing.assert_close(gg, gw, rtol=1e-5, atol=1e-6)


def test_pooling_over_many_pes(no_fallback):
    """Shapes that take several chunks per PE and tiles split across the grid."""
    x = _input((4, 16, 40, 40), "channels_last", seed=30)
    _check(lambda t: F.max_pool2d(t, 3, 2, 1, return_indices=True), x, torch.float32,
           ["pool2d", "pool2d_backward"])
    _check(lambda t: F.avg_pool2d(t, 3, 1, 1), x, torch.float32, ["pool2d", "pool2d_backward"])
    _check(lambda t: F.adaptive_max_pool2d(t, (7, 6)), x, torch.float32, ["pool2d"])
