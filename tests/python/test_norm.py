"""Batch norm and group norm on the device (channel_moments / channel_grad_sums kernels plus
pointwise passes) against PyTorch on the CPU: nn.BatchNorm1d/2d in training (running
statistics and their momentum update, cumulative momentum, no running statistics) and eval
mode, with and without affine parameters, nn.GroupNorm, forward and backward through autograd,
float32/float16/bfloat16, channels_last and strided inputs, empty batches, bad arguments.
Every case must run on device kernels (no CPU fallback)."""
import copy

import pytest
import torch
import torch.nn.functional as F
import torch_mtia_emu

from conftest import DEVICE

FLOATS = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float16: dict(rtol=1e-2, atol=1e-2),
       torch.bfloat16: dict(rtol=5e-2, atol=5e-2)}


def _input(shape, layout, seed=0):
    g = torch.Generator().manual_seed(seed)
    if layout == "strided":
        big = list(shape)
        big[-1] *= 2
        return (torch.randn(big, generator=g) * 2 + 1)[..., ::2]
    x = torch.randn(shape, generator=g) * 2 + 1
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    return x


def _module_step(module, x, dtype, device, steps=2):
    """Runs `steps` forward/backward passes of a copy of `module` on `device` in `dtype` (the
    CPU in float32); returns the outputs, input gradients, parameter gradients and buffers."""
    m = copy.deepcopy(module).to(device)
    m = m.to(dtype) if device != "cpu" else m.float()
    outs, grads = [], []
    for i in range(steps):
        xd = x.to(dtype).to(device)
        xd = (xd.float() if device == "cpu" else xd).detach().requires_grad_()
        y = m(xd)
        w = torch.linspace(-1, 1, y.numel()).reshape(y.shape).to(device, y.dtype)
        (y * w * (i + 1)).sum().backward()
        outs.append(y.detach().float().cpu())
        grads.append(xd.grad.float().cpu())
    params = [p.grad.float().cpu() for p in m.parameters()]
    buffers = [b.float().cpu() for b in m.buffers()]
    return outs, grads, params, buffers


def _compare_module(module, x, dtype, launches, tol=None):
    torch_mtia_emu.reset_kernel_launch_counts()
    got = _module_step(module, x, dtype, DEVICE)
    counts = torch_mtia_emu.kernel_launch_counts()
    want = _module_step(module, x, dtype, "cpu")
    for g_list, w_list in zip(got, want):
        assert len(g_list) == len(w_list)
        for g, w in zip(g_list, w_list):
            torch.testing.assert_close(g, w, **(tol or TOL[dtype]))
    for k in launches:
        assert counts.get(k, 0) > 0, f"{k} was not launched: {counts}"


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_batch_norm2d_training(dtype, layout, affine, no_fallback):
    bn = torch.nn.BatchNorm2d(5, affine=affine, momentum=0.3)
    if affine:
        with torch.no_grad():
            bn.weight.copy_(torch.linspace(0.5, 1.5, 5))
            bn.bias.copy_(torch.linspace(-1, 1, 5))
    _compare_module(bn, _input((4, 5, 6, 7), layout), dtype,
                    ["channel_moments", "channel_grad_sums"])


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_batch_norm2d_eval(dtype, no_fallback):
    bn = torch.nn.BatchNorm2d(3)
    with torch.no_grad():
        bn.running_mean.copy_(torch.tensor([0.5, -1.0, 2.0]))
        bn.running_var.copy_(torch.tensor([1.5, 0.25, 4.0]))
        bn.weight.copy_(torch.tensor([1.0, 2.0, 0.5]))
        bn.bias.copy_(torch.tensor([0.1, 0.2, -0.3]))
    bn.eval()
    _compare_module(bn, _input((2, 3, 5, 5), "channels_last"), dtype, ["channel_grad_sums"])


@pytest.mark.parametrize("shape", [(8, 6), (5, 4, 9)], ids=["NC", "NCL"])
def test_batch_norm1d(shape, no_fallback):
    _compare_module(torch.nn.BatchNorm1d(shape[1]), _input(shape, "contiguous"), torch.float32,
                    ["channel_moments"])


def test_batch_norm_cumulative_momentum_and_no_running_stats(no_fallback):
    """momentum=None (a cumulative average of the batches) and track_running_stats=False
    (batch statistics in eval mode too)."""
    x = _input((3, 4, 5, 5), "contiguous", seed=3)
    _compare_module(torch.nn.BatchNorm2d(4, momentum=None), x, torch.float32, ["channel_moments"])
    bn = torch.nn.BatchNorm2d(4, track_running_stats=False)
    bn.eval()
    _compare_module(bn, x, torch.float32, ["channel_moments"])


def test_batch_norm_functional_and_native_ops(no_fallback):
    """F.batch_norm and torch.native_batch_norm: outputs, saved statistics, running stats."""
    x = _input((3, 4, 6, 5), "contiguous", seed=4)
    rm, rv = torch.randn(4), torch.rand(4) + 0.5
    w, b = torch.rand(4) + 0.5, torch.randn(4)

    def run(device):
        args = [t.to(device) for t in (x, w, b, rm, rv)]
        outs = torch.native_batch_norm(*args, True, 0.2, 1e-3)
        y = F.batch_norm(args[0], args[3], args[4], args[1], args[2], False, 0.1, 1e-5)
        return [t.cpu() for t in (*outs, y, args[3], args[4])]

    for g, wnt in zip(run(DEVICE), run("cpu")):
        torch.testing.assert_close(g, wnt, rtol=1e-5, atol=1e-5)


def test_batch_norm_empty_batch(no_fallback):
    """nn.BatchNorm2d on an empty batch gives an empty result (PyTorch handles it before the
    backend); the backend's own entry point refuses an empty training batch like the CPU."""
    bn = torch.nn.BatchNorm2d(3).to(DEVICE)
    x = torch.randn(0, 3, 4, 4, device=DEVICE, requires_grad=True)
    y = bn(x)
    assert y.shape == x.shape
    y.sum().backward()
    assert x.grad.shape == x.shape
    with pytest.raises(RuntimeError, match="at least one element"):
        torch.native_batch_norm(torch.randn(0, 3, 4, 4, device=DEVICE), None, None,
                                torch.zeros(3, device=DEVICE), torch.ones(3, device=DEVICE),
                                True, 0.1, 1e-5)
    out = torch.native_batch_norm(torch.randn(0, 3, 4, 4, device=DEVICE), None, None,
                                  torch.zeros(3, device=DEVICE), torch.ones(3, device=DEVICE),
                                  False, 0.1, 1e-5)
    assert out[0].shape == (0, 3, 4, 4)


def test_batch_norm_bad_arguments():
    x = torch.randn(2, 3, 4, 4, device=DEVICE)
    with pytest.raises(RuntimeError, match="3 elements"):
        torch.native_batch_norm(x, torch.ones(4, device=DEVICE), None, None, None, True, 0.1,
                                1e-5)
    with pytest.raises(RuntimeError, match="evaluation mode"):  # the CPU crashes here
        torch.native_batch_norm(x, None, None, None, None, False, 0.1, 1e-5)
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.native_batch_norm(torch.randn(3, device=DEVICE), None, None, None, None, True,
                                0.1, 1e-5)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_group_norm(dtype, layout, affine, no_fallback):
    gn = torch.nn.GroupNorm(3, 6, affine=affine)
    if affine:
        with torch.no_grad():
            gn.weight.copy_(torch.linspace(0.5, 1.5, 6))
            gn.bias.copy_(torch.linspace(-1, 1, 6))
    _compare_module(gn, _input((3, 6, 5, 4), layout, seed=7), dtype,
                    ["channel_moments", "channel_grad_sums"])


def test_group_norm_shapes(no_fallback):
    """One group, a group per channel, a (N, C) input and a (N, C, L) input. Groups of two
    elements cancel almost entirely in the gradient: a looser absolute tolerance."""
    for groups, shape in [(1, (2, 4, 3, 3)), (4, (2, 4, 3, 3)), (2, (5, 4)), (2, (3, 6, 7))]:
        _compare_module(torch.nn.GroupNorm(groups, shape[1]), _input(shape, "contiguous"),
                        torch.float32, ["channel_moments"], dict(rtol=1e-4, atol=5e-4))


def test_group_norm_native_op_statistics(no_fallback):
    x = _input((2, 6, 4, 4), "contiguous", seed=8)
    w, b = torch.rand(6) + 0.5, torch.randn(6)

    def run(device):
        outs = torch.native_group_norm(x.to(device), w.to(device), b.to(device), 2, 6, 16, 3,
                                       1e-5)
        return [t.cpu() for t in outs]

    for g, wnt in zip(run(DEVICE), run("cpu")):
        torch.testing.assert_close(g, wnt, rtol=1e-5, atol=1e-5)


def test_group_norm_empty_batch(no_fallback):
    """An empty batch returns empty results and zero parameter gradients (the CPU kernel
    dies with SIGFPE on this input: the device must not)."""
    gn = torch.nn.GroupNorm(2, 4).to(DEVICE)
    x = torch.randn(0, 4, 3, 3, device=DEVICE, requires_grad=True)
    y = gn(x)
    assert y.shape == x.shape
    y.sum().backward()
    assert x.grad.shape == x.shape
    assert torch.equal(gn.weight.grad.cpu(), torch.zeros(4))
    out, mean, rstd = torch.native_group_norm(torch.randn(0, 4, 3, 3, device=DEVICE), None, None,
                                              0, 4, 9, 2, 1e-5)
    assert out.shape == (0, 4, 3, 3) and mean.shape == (0, 2) and rstd.shape == (0, 2)
    grads = torch.ops.aten.native_group_norm_backward(
        torch.randn(0, 4, 3, 3, device=DEVICE), torch.randn(0, 4, 3, 3, device=DEVICE), mean,
        rstd, torch.ones(4, device=DEVICE), 0, 4, 9, 2, [True, True, True])
    assert grads[0].shape == (0, 4, 3, 3)
    assert torch.equal(grads[1].cpu(), torch.zeros(4))
    assert torch.equal(grads[2].cpu(), torch.zeros(4))


def test_group_norm_bad_arguments():
    x = torch.randn(2, 4, 3, 3, device=DEVICE)
    with pytest.raises(RuntimeError):
        F.group_norm(x, 3)  # 4 channels in 3 groups
    with pytest.raises(RuntimeError):
        torch.native_group_norm(x, None, None, 2, 4, 9, 0, 1e-5)  # no groups
    with pytest.raises(RuntimeError):
        torch.native_group_norm(x, torch.ones(3, device=DEVICE), None, 2, 4, 9, 2, 1e-5)
    with pytest.raises(RuntimeError):
        torch.native_group_norm(x, None, None, 2, 4, 8, 2, 1e-5)  # HxW does not match


def test_float64_takes_the_cpu_fallback():
    x = torch.randn(2, 4, 3, 3, dtype=torch.float64)
    torch_mtia_emu.reset_fallback_counts()
    got = F.group_norm(x.to(DEVICE), 2).cpu()
    torch.testing.assert_close(got, F.group_norm(x, 2))
    assert any("native_group_norm" in k and "Double" in k
               for k in torch_mtia_emu.fallback_counts())


def test_batch_norm_other_entry_points(no_fallback):
    """The 2.13 entry points that export/compile paths call (eager nn.BatchNorm goes through
    native_batch_norm): _native_batch_norm_legit (with and without running statistics),
    _batch_norm_with_update and batch_norm_backward, against the CPU."""
    x = _input((3, 4, 5, 5), "channels_last", seed=9)
    w, b = torch.rand(4) + 0.5, torch.randn(4)
    rm0, rv0 = torch.randn(4), torch.rand(4) + 0.5
    g = torch.randn(3, 4, 5, 5, generator=torch.Generator().manual_seed(10))

    def run(device):
        xd, wd, bd, gd = (t.to(device) for t in (x, w, b, g))
        rm, rv = rm0.to(device), rv0.to(device)
        res = list(torch.ops.aten._native_batch_norm_legit(xd, wd, bd, rm, rv, True, 0.2, 1e-5))
        res += torch.ops.aten._native_batch_norm_legit.no_stats(xd, wd, bd, True, 0.2, 1e-5)
        out, mean, invstd, reserve = torch.ops.aten._batch_norm_with_update(xd, wd, bd, rm, rv,
                                                                            0.1, 1e-5)
        res += [out, mean, invstd, rm, rv]
        res += torch.ops.aten.batch_norm_backward(gd, xd, wd, rm, rv, mean, invstd, True, 1e-5,
                                                  [True, True, True], reserve)
        res += torch.ops.aten.native_batch_norm_backward(gd, xd, wd, rm, rv, None, None, False,
                                                         1e-5, [True, True, True])
        return [t.cpu() for t in res]

    for got, want in zip(run(DEVICE), run("cpu")):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_norms_over_many_pes(no_fallback):
    """Shapes large enough to spread over several PEs and several tiles per channel. The
    parameter gradients are fp32 sums of 25600 terms: CPU and device are each ~1e-4 (relative)
    from a float64 reference, in different directions."""
    x = _input((4, 16, 40, 40), "contiguous", seed=11)
    _compare_module(torch.nn.BatchNorm2d(16), x, torch.float32,
                    ["channel_moments", "channel_grad_sums"], dict(rtol=5e-4, atol=1e-4))
    _compare_module(torch.nn.GroupNorm(4, 16), x.contiguous(memory_format=torch.channels_last),
                    torch.float32, ["channel_moments"], dict(rtol=5e-4, atol=1e-4))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_batch_norm_mixed_dtypes(dtype, no_fallback):
    """A float16/bfloat16 input with float32 parameters and running statistics (PyTorch's
    mixed type): float32 statistics and parameter gradients, output in the input's dtype."""
    x = _input((4, 3, 5, 5), "contiguous", seed=12)

    def run(device):
        m = torch.nn.BatchNorm2d(3).to(device)
        xd = x.to(device, dtype).requires_grad_()
        y = m(xd)
        w = torch.linspace(-1, 1, y.numel(), device=device).reshape(y.shape)
        (y.float() * w).sum().backward()
        assert y.dtype == dtype and m.weight.grad.dtype == torch.float32
        return [t.float().cpu() for t in (y, xd.grad, m.weight.grad, m.bias.grad,
                                          m.running_mean, m.running_var)]

    for got, want in zip(run(DEVICE), run("cpu")):
        torch.testing.assert_close(got, want, **TOL[dtype])
