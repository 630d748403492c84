"""Convolutions on the device (convolution_overrideable, convolution_backward_overrideable: the
im2col kernel and bmm) against PyTorch on the CPU: conv1d/2d/3d and conv_transpose1d/2d/3d
with strides, padding ('same' too), dilation, groups (depthwise too) and output_padding, forward
and backward, float32/float16/bfloat16, contiguous, channels_last and strided inputs, nn.Conv*d
modules, empty batches, float64 on the CPU fallback and bad arguments.

float16/bfloat16 references are computed in float32 on the CPU from the same (rounded) values:
the device accumulates in float32 and rounds each result once."""
import pytest
import torch
import torch.nn.functional as F
import torch_mtia_emu

from conftest import DEVICE

TOL = {
    torch.float32: dict(rtol=1e-5, atol=2e-5),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=1e-2, atol=1e-2),
}
DTYPES = list(TOL)

# PyTorch's note that an even kernel with padding='same' pads a copy of the input.
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same'")


@pytest.fixture
def on_device():
    """The test's convolutions must run on device kernels: a fallback is an error, and im2col
    and bmm must have run."""
    mode = torch_mtia_emu.get_fallback_mode()
    torch_mtia_emu.set_fallback_mode("error")
    torch_mtia_emu.reset_fallback_counts()
    torch_mtia_emu.reset_kernel_launch_counts()
    yield
    torch_mtia_emu.set_fallback_mode(mode)
    assert torch_mtia_emu.fallback_counts() == {}
    counts = torch_mtia_emu.kernel_launch_counts()
    assert counts.get("im2col", 0) > 0 and counts.get("bmm", 0) > 0, counts


def _leaf(t, device=None):
    t = t.detach()
    if device is not None:
        t = t.to(device)
    return t.requires_grad_(True)


def check_conv(fn, x, w, b, dtype=torch.float32, layout=None, **kw):
    """fn(x, w, b, **kw) and its gradients on the device (in `dtype`) against the CPU (float32
    from the same values). `layout` turns the device input into another layout."""
    x, w = x.to(dtype), w.to(dtype)
    b = b.to(dtype) if b is not None else None
    xc, wc = _leaf(x.float()), _leaf(w.float())
    bc = _leaf(b.float()) if b is not None else None
    xd_base = x.to(DEVICE)
    if layout is not None:
        xd_base = layout(xd_base)
    xd, wd = _leaf(xd_base), _leaf(w, DEVICE)
    bd = _leaf(b, DEVICE) if b is not None else None
    want = fn(xc, wc, bc, **kw)
    got = fn(xd, wd, bd, **kw)
    assert got.device == DEVICE and got.dtype == dtype and got.shape == want.shape
    tol = TOL[dtype]
    torch.testing.assert_close(got.cpu().float(), want, **tol)
    g = torch.randn(want.shape).to(dtype)
    want.backward(g.float())
    got.backward(g.to(DEVICE))
    for d, c, name in ((xd, xc, "input"), (wd, wc, "weight"), (bd, bc, "bias")):
        if c is None:
            continue
        assert d.grad is not None and d.grad.shape == c.grad.shape, name
        torch.testing.assert_close(d.grad.cpu().float(), c.grad, **tol,
                                   msg=lambda m: f"{name}: {m}")
    return got, xd


# (function, input shape, weight shape, has bias, kwargs)
CONV_CASES = [
    ("conv1d", (2, 4, 11), (6, 4, 3), True, dict()),
    ("conv1d", (2, 4, 12), (6, 2, 3), True, dict(stride=2, padding=1, dilation=2, groups=2)),
    ("conv1d", (3, 3, 9), (3, 1, 4), False, dict(padding="same", groups=3)),
    ("conv2d", (2, 3, 7, 8), (5, 3, 3, 3), True, dict(padding=1)),
    ("conv2d", (2, 3, 9, 8), (4, 3, 3, 2), True, dict(stride=(2, 1), padding=(1, 2),
                                                      dilation=(1, 2))),
    ("conv2d", (2, 4, 7, 6), (8, 2, 3, 3), True, dict(stride=2, groups=2)),
    ("conv2d", (2, 4, 7, 8), (4, 1, 3, 3), True, dict(padding="same", groups=4)),  # depthwise
    ("conv2d", (1, 4, 6, 7), (4, 2, 4, 2), False, dict(padding="same", groups=2)),  # even kernel
    ("conv2d", (2, 3, 5, 5), (2, 3, 1, 1), True, dict()),
    ("conv2d", (1, 2, 6, 6), (3, 2, 2, 2), True, dict(padding="valid", dilation=3)),
    ("conv3d", (1, 2, 5, 6, 4), (3, 2, 2, 3, 2), True, dict(stride=(1, 2, 1), padding=1)),
    ("conv3d", (2, 4, 4, 5, 3), (4, 2, 3, 1, 2), False, dict(dilation=(1, 1, 2), groups=2)),
]

TRANSPOSED_CASES = [
    ("conv_transpose1d", (2, 4, 6), (4, 3, 3), True, dict(stride=2, padding=1, output_padding=1,
                                                           groups=2)),
    ("conv_transpose1d", (2, 3, 5), (3, 2, 4), False, dict(dilation=2)),
    ("conv_transpose2d", (2, 3, 4, 5), (3, 4, 3, 3), True, dict()),
    ("conv_transpose2d", (2, 4, 5, 4), (4, 2, 3, 3), True, dict(stride=2, padding=1,
                                                                output_padding=(1, 0), dilation=2,
                                                                groups=2)),
    ("conv_transpose2d", (1, 2, 4, 4), (2, 2, 3, 3), True, dict(stride=3, output_padding=2)),
    # output_padding below the dilation but not the stride: the output outgrows the formula
    ("conv_transpose2d", (1, 2, 4, 4), (2, 2, 3, 3), False, dict(dilation=3, output_padding=2)),
    ("conv_transpose2d", (1, 4, 3, 3), (4, 1, 3, 3), True, dict(stride=2, groups=4)),
    ("conv_transpose3d", (1, 2, 3, 4, 3), (2, 3, 2, 2, 3), True, dict(stride=(2, 1, 2),
                                                                      padding=(0, 1, 1))),
]


def _bias_size(name, w_shape, kw):
    return w_shape[1] * kw.get("groups", 1) if "transpose" in name else w_shape[0]


def _case_id(case):
    name, xs, ws, bias, kw = case
    return f"{name}-{'x'.join(map(str, xs))}-{','.join(f'{k}={v}' for k, v in kw.items())}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CONV_CASES + TRANSPOSED_CASES, ids=_case_id)
def test_conv_forward_and_backward(case, dtype, on_device):
    name, xs, ws, bias, kw = case
    torch.manual_seed(0)
    x, w = torch.randn(xs), torch.randn(ws)
    b = torch.randn(_bias_size(name, ws, kw)) if bias else None
    check_conv(getattr(F, name), x, w, b, dtype=dtype, **kw)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_channels_last_input_gives_channels_last_output(dtype, on_device):
    torch.manual_seed(1)
    x, w, b = torch.randn(2, 4, 6, 7), torch.randn(6, 2, 3, 3), torch.randn(6)
    cl = lambda t: t.contiguous(memory_format=torch.channels_last)  # noqa: E731
    got, xd = check_conv(F.conv2d, x, w, b, dtype=dtype, layout=cl, stride=2, padding=1, groups=2)
    assert xd.is_contiguous(memory_format=torch.channels_last)
    assert got.is_contiguous(memory_format=torch.channels_last)
    assert xd.grad.is_contiguous(memory_format=torch.channels_last)
    got, _ = check_conv(F.conv_transpose2d, x, torch.randn(4, 3, 2, 3), None, dtype=dtype,
                        layout=cl, stride=2, output_padding=1)
    assert got.is_contiguous(memory_format=torch.channels_last)


def test_channels_last_3d_and_channels_last_weight(on_device):
    torch.manual_seed(2)
    x, w, b = torch.randn(1, 3, 4, 5, 6), torch.randn(4, 3, 2, 3, 2), torch.randn(4)
    cl3 = lambda t: t.contiguous(memory_format=torch.channels_last_3d)  # noqa: E731
    got, _ = check_conv(F.conv3d, x, w, b, layout=cl3, padding=(1, 0, 1))
    assert got.is_contiguous(memory_format=torch.channels_last_3d)
    # A channels_last weight on the device: its gradient keeps the layout, as on the CPU.
    x2, w2 = torch.randn(2, 3, 6, 6), torch.randn(5, 3, 3, 3)
    xd = _leaf(x2, DEVICE)
    wd = _leaf(w2.to(DEVICE).contiguous(memory_format=torch.channels_last))
    out = F.conv2d(xd, wd, padding=1)
    xc, wc = _leaf(x2), _leaf(w2)
    want = F.conv2d(xc, wc, padding=1)
    torch.testing.assert_close(out.cpu(), want, **TOL[torch.float32])
    out.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(wd.grad.cpu(), wc.grad, **TOL[torch.float32])
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, **TOL[torch.float32])


def every_other(t):
    """t stored in every other element of its last dim, on the device."""
    big = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
    big[..., ::2] = t
    return big[..., ::2]


def stored_transposed(t):
    """t with its last two dims stored the other way round."""
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_inputs(dtype, on_device):
    torch.manual_seed(3)
    # Inputs gathered as they lie, and a weight stored transposed.
    w = torch.randn(4, 3, 2, 3).transpose(2, 3)
    _, xd = check_conv(F.conv2d, torch.randn(2, 3, 7, 7), w, torch.randn(4), dtype=dtype,
                       layout=every_other, padding=1)
    assert not xd.is_contiguous() and xd.stride(-1) == 2
    check_conv(F.conv2d, torch.randn(2, 3, 8, 10), torch.randn(2, 3, 3, 3), None, dtype=dtype,
               layout=stored_transposed, stride=2)
    check_conv(F.conv_transpose2d, torch.randn(1, 3, 4, 5), torch.randn(3, 2, 3, 2), None,
               dtype=dtype, layout=every_other, stride=(1, 2))
    check_conv(F.conv3d, torch.randn(1, 2, 3, 4, 5), torch.randn(2, 2, 2, 2, 2), torch.randn(2),
               dtype=dtype, layout=every_other, padding=(0, 1, 0))
    # conv1d of a [N, L, C] sequence, permuted to [N, C, L]
    check_conv(F.conv1d, torch.randn(2, 4, 10), torch.randn(3, 4, 3), torch.randn(3),
               dtype=dtype, layout=stored_transposed, padding=1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_modules_on_the_device(dtype, on_device):
    torch.manual_seed(4)
    for cpu in (torch.nn.Conv1d(3, 4, 3, padding=1), torch.nn.Conv2d(3, 6, 3, stride=2, groups=3),
                torch.nn.Conv3d(2, 2, (1, 2, 2), bias=False),
                torch.nn.ConvTranspose2d(4, 2, 2, stride=2),
                torch.nn.ConvTranspose1d(2, 4, 3, groups=2, dilation=2),
                torch.nn.ConvTranspose3d(2, 3, 2, stride=(1, 2, 1))):
        cpu = cpu.to(dtype)
        args, kw = _module_args(cpu)
        dev = type(cpu)(*args, **kw).to(dtype)
        dev.load_state_dict(cpu.state_dict())
        dev = dev.to(DEVICE)
        ref = cpu.float()
        nd = len(cpu.kernel_size)
        x = torch.randn(2, cpu.in_channels, *([5] * nd)).to(dtype)
        out = dev(x.to(DEVICE))
        want = ref(x.float())
        torch.testing.assert_close(out.cpu().float(), want, **TOL[dtype])
        g = torch.randn(want.shape).to(dtype)
        out.backward(g.to(DEVICE))
        want.backward(g.float())
        for (n, p), (_, q) in zip(dev.named_parameters(), ref.named_parameters()):
            assert p.grad.dtype == dtype
            torch.testing.assert_close(p.grad.cpu().float(), q.grad, **TOL[dtype],
                                       msg=lambda m: f"{type(cpu).__name__}.{n}: {m}")


def _module_args(m):
    kw = dict(stride=m.stride, padding=m.padding, dilation=m.dilation, groups=m.groups,
              bias=m.bias is not None)
    if isinstance(m, torch.nn.modules.conv._ConvTransposeNd):
        kw["output_padding"] = m.output_padding
    return (m.in_channels, m.out_channels, m.kernel_size), kw


def test_empty_batch_and_empty_channels():
    torch.manual_seed(5)
    w, b = torch.randn(4, 3, 3, 3), torch.randn(4)
    for fn, x, wt in ((F.conv2d, torch.randn(0, 3, 6, 6), w),
                      (F.conv_transpose2d, torch.randn(0, 4, 3, 3), w)):
        xd, wd, bd = _leaf(x, DEVICE), _leaf(wt, DEVICE), _leaf(b if fn is F.conv2d else
                                                                 torch.randn(3), DEVICE)
        out = fn(xd, wd, bd)
        want = fn(x, wt, b if fn is F.conv2d else bd.detach().cpu())
        assert out.shape == want.shape and out.numel() == 0
        out.sum().backward()
        assert torch.equal(wd.grad.cpu(), torch.zeros_like(wt))
        assert torch.equal(bd.grad.cpu(), torch.zeros_like(bd.grad.cpu()))
        assert xd.grad.shape == x.shape
    # The device ops themselves, called directly (PyTorch's conv keeps empty inputs from them).
    aten = torch.ops.aten
    torch_mtia_emu.reset_kernel_launch_counts()
    out = aten.convolution_overrideable(torch.randn(0, 3, 6, 6, device=DEVICE), w.to(DEVICE),
                                        b.to(DEVICE), [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    assert out.shape == (0, 4, 4, 4)
    assert torch_mtia_emu.kernel_launch_counts() == {}  # nothing to launch
    # No input channels: the output is the bias alone.
    out = aten.convolution_overrideable(torch.randn(2, 0, 5, 5, device=DEVICE),
                                        torch.randn(4, 0, 3, 3, device=DEVICE), b.to(DEVICE),
                                        [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    torch.testing.assert_close(out.cpu(), b.view(1, 4, 1, 1).expand(2, 4, 5, 5))
    gi, gw, gb = aten.convolution_backward_overrideable(
        torch.randn(0, 4, 4, 4, device=DEVICE), torch.randn(0, 3, 6, 6, device=DEVICE),
        w.to(DEVICE), [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, True, True])
    assert gi.shape == (0, 3, 6, 6)
    assert torch.equal(gw.cpu(), torch.zeros(4, 3, 3, 3))
    assert torch.equal(gb.cpu(), torch.zeros(4))
    gi, gw, gb = aten.convolution_backward_overrideable(
        torch.randn(2, 4, 4, 4, device=DEVICE), torch.randn(2, 3, 6, 6, device=DEVICE),
        w.to(DEVICE), [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [False, True, False])
    assert gi is None and gb is None and gw.shape == w.shape


def test_float64_runs_on_the_cpu_fallback():
    mode = torch_mtia_emu.get_fallback_mode()
    try:
        torch_mtia_emu.set_fallback_mode("silent")
        torch_mtia_emu.reset_fallback_counts()
        torch.manual_seed(6)
        x, w, b = (torch.randn(2, 3, 6, 6, dtype=torch.float64), torch.randn(4, 3, 3, 3,
                   dtype=torch.float64), torch.randn(4, dtype=torch.float64))
        xd, wd, bd = _leaf(x, DEVICE), _leaf(w, DEVICE), _leaf(b, DEVICE)
        xc, wc, bc = _leaf(x), _leaf(w), _leaf(b)
        out = F.conv2d(xd, wd, bd, stride=2, padding=1)
        want = F.conv2d(xc, wc, bc, stride=2, padding=1)
        assert out.device == DEVICE and out.dtype == torch.float64
        torch.testing.assert_close(out.cpu(), want)
        out.sum().backward()
        want.sum().backward()
        for d, c in ((xd, xc), (wd, wc), (bd, bc)):
            assert d.grad.device == DEVICE
            torch.testing.assert_close(d.grad.cpu(), c.grad)
        counts = torch_mtia_emu.fallback_counts()
        assert counts["aten::convolution (dtype Double)"] == 1
        assert counts["aten::convolution_backward (dtype Double)"] == 1
        torch_mtia_emu.set_fallback_mode("error")
        with pytest.raises(NotImplementedError, match="aten::convolution.*dtype Double"):
            F.conv2d(xd, wd, bd)
    finally:
        torch_mtia_emu.set_fallback_mode(mode)


def test_bad_arguments_raise():
    aten = torch.ops.aten
    x = torch.randn(2, 4, 6, 6, device=DEVICE)
    w = torch.randn(6, 2, 3, 3, device=DEVICE)

    def conv(x=x, w=w, b=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), transposed=False,
             output_padding=(0, 0), groups=2):
        return aten.convolution_overrideable(x, w, b, list(stride), list(padding), list(dilation),
                                             transposed, list(output_padding), groups)

    assert conv().shape == (2, 6, 4, 4)
    with pytest.raises(RuntimeError, match="groups must be positive"):
        conv(groups=0)
    with pytest.raises(RuntimeError, match="must be divisible by groups"):
        conv(groups=4)
    with pytest.raises(RuntimeError, match="expected an input with 2 channels"):
        conv(groups=1)
    with pytest.raises(RuntimeError, match="stride must be positive"):
        conv(stride=(0, 1))
    with pytest.raises(RuntimeError, match="padding must be non-negative"):
        conv(padding=(-1, 0))
    with pytest.raises(RuntimeError, match="dilation must be positive"):
        conv(dilation=(1, 0))
    with pytest.raises(RuntimeError, match="expected stride to have 2 elements"):
        conv(stride=(1, 1, 1))
    with pytest.raises(RuntimeError, match="output_padding is only supported for transposed"):
        conv(output_padding=(1, 0))
    with pytest.raises(RuntimeError, match="output padding must be smaller"):
        conv(w=torch.randn(4, 3, 3, 3, device=DEVICE), transposed=True, output_padding=(1, 0))
    with pytest.raises(RuntimeError, match="smaller than the kernel"):
        conv(w=torch.randn(6, 2, 7, 3, device=DEVICE))
    with pytest.raises(RuntimeError, match="expected a 4-dimensional input"):
        conv(x=torch.randn(4, 6, 6, device=DEVICE))
    with pytest.raises(RuntimeError, match="expected a bias of size \\[6\\]"):
        conv(b=torch.randn(5, device=DEVICE))
    with pytest.raises(RuntimeError, match="expected every tensor to have dtype Float"):
        conv(w=w.half())
    with pytest.raises(RuntimeError, match="expected every tensor on the mtia device"):
        conv(b=torch.randn(6))
    with pytest.raises(RuntimeError, match="kernel size must be positive"):
        conv(w=torch.randn(6, 2, 0, 3, device=DEVICE))
    with pytest.raises(RuntimeError, match="does not match the convolution's output"):
        aten.convolution_backward_overrideable(torch.randn(2, 6, 5, 4, device=DEVICE), x, w,
                                               [1, 1], [0, 0], [1, 1], False, [0, 0], 2,
                                               [True, True, True])
    # PyTorch's own checks in front of them still apply.
    with pytest.raises(RuntimeError):
        F.conv2d(x, w, groups=3)
    # The device is still usable.
    assert conv().shape == (2, 6, 4, 4)


def test_large_batches_are_split_into_chunks(monkeypatch, on_device):
    # Columns over the budget: the batch goes in chunks, one im2col and product each, and the
    # weight gradient sums the chunks' products.
    monkeypatch.setenv("MTIA_EMU_CONV_COLUMN_BYTES", "900")
    torch.manual_seed(7)
    x, w, b = torch.randn(5, 3, 6, 6), torch.randn(4, 3, 3, 3), torch.randn(4)
    torch_mtia_emu.reset_kernel_launch_counts()
    # 972 bytes of columns per sample (27 rows, 9 columns of float32): one sample a chunk, for
    # the forward, the input gradient and the weight gradient
    check_conv(F.conv2d, x, w, b, padding=1, stride=2)
    counts = torch_mtia_emu.kernel_launch_counts()
    assert counts["im2col"] == 3 * 5 and counts["bmm"] == 3 * 5, counts
    monkeypatch.setenv("MTIA_EMU_CONV_COLUMN_BYTES", "2000")  # two samples a chunk
    check_conv(F.conv_transpose2d, torch.randn(3, 4, 3, 3), w, torch.randn(3), stride=2)
