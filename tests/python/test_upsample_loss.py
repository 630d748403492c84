"""Upsampling (upsample / upsample_backward kernels) and the negative log-likelihood loss,
spatial and plain (nll_loss / nll_loss_backward kernels), on the device against PyTorch on the
CPU: nearest, nearest-exact, linear, bilinear and trilinear with and without align_corners,
sizes and scale factors (given to the op, and recomputed), odd sizes, down- and upsampling,
channels_last and strided inputs, float32/float16/bfloat16, empty batches, backward through
autograd; nll_loss2d and nll_loss with every reduction, class weights, ignore_index, few and
many classes, bad targets; a small segmentation network's training steps. Every device case
must run on device kernels (no CPU fallback)."""
import copy

import pytest
import torch
import torch.nn.functional as F
import torch_mtia_emu

from conftest import DEVICE, FLOATS, TOL, layout_input as _input, run_child

def _run(fn, x, dtype, device):
    """fn(x) on `device` in `dtype` (the CPU reference in float32, rounded once), and the
    gradient of sum(out * weights) with respect to x."""
    xd = x.to(dtype).to(device)
    xd = (xd.float() if device == "cpu" else xd).detach().requires_grad_()
    out = fn(xd)
    w = torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(device)
    (out * w.to(out.dtype)).sum().backward()
    if device == "cpu":
        return out.detach().to(dtype), xd.grad.to(dtype)
    return out.detach().cpu(), xd.grad.cpu()


def _check(fn, x, dtype, launches, tol=None):
    torch_mtia_emu.reset_kernel_launch_counts()
    got, ggot = _run(fn, x, dtype, DEVICE)
    counts = torch_mtia_emu.kernel_launch_counts()
    want, gwant = _run(fn, x, dtype, "cpu")
    tol = tol or TOL[dtype]
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, **tol)
    torch.testing.assert_close(ggot, gwant, **tol)
    for k in launches:
        assert counts.get(k, 0) > 0, f"{k} was not launched: {counts}"
    return got


UP = ["upsample", "upsample_backward"]

# mode, input shape, interpolate kwargs
CASES = [
    ("nearest", (2, 3, 5, 7), dict(scale_factor=2)),
    ("nearest", (2, 3, 5, 7), dict(scale_factor=1.7)),
    ("nearest", (2, 3, 9, 7), dict(scale_factor=(0.6, 0.45))),
    ("nearest", (1, 4, 6, 5), dict(size=(13, 3))),
    ("nearest", (2, 3, 11), dict(scale_factor=2.5)),
    ("nearest", (1, 2, 3, 5, 4), dict(scale_factor=(2, 1.5, 0.75))),
    ("nearest-exact", (2, 3, 5, 7), dict(scale_factor=1.7)),
    ("nearest-exact", (2, 3, 9, 7), dict(size=(4, 10))),
    ("nearest-exact", (2, 3, 11), dict(size=6)),
    ("nearest-exact", (1, 2, 3, 5, 4), dict(size=(5, 2, 7))),
    ("bilinear", (2, 3, 5, 7), dict(scale_factor=2)),
    ("bilinear", (2, 3, 5, 7), dict(scale_factor=1.7)),
    ("bilinear", (2, 3, 9, 8), dict(scale_factor=(0.6, 0.45))),
    ("bilinear", (1, 4, 6, 5), dict(size=(13, 3))),
    ("bilinear", (2, 3, 5, 7), dict(size=(5, 7))),  # same size: a copy
    ("bilinear", (1, 2, 1, 6), dict(size=(4, 1))),  # one-element axes
    ("linear", (2, 3, 11), dict(scale_factor=2.5)),
    ("linear", (2, 3, 11), dict(size=4)),
    ("trilinear", (1, 2, 3, 5, 4), dict(scale_factor=(2, 1.5, 0.75))),
    ("trilinear", (2, 2, 4, 3, 5), dict(size=(3, 7, 5))),
]


def _interp(mode, kw, align):
    if mode in ("nearest", "nearest-exact"):
        return lambda t: F.interpolate(t, mode=mode, **kw)
    return lambda t: F.interpolate(t, mode=mode, align_corners=align, **kw)


@pytest.mark.parametrize("case,align", [(i, a) for i, c in enumerate(CASES)
                                        for a in ([False] if c[0].startswith("nearest")
                                                  else [False, True])])
def test_interpolate(case, align, no_fallback):
    mode, shape, kw = CASES[case]
    _check(_interp(mode, kw, align), _input(shape, "contiguous", seed=case), torch.float32, UP)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("mode", ["nearest", "bilinear", "trilinear"])
def test_layouts_and_dtypes(mode, layout, dtype, no_fallback):
    shape = (2, 5, 3, 6, 7) if mode == "trilinear" else (2, 5, 6, 7)
    fn = _interp(mode, dict(scale_factor=1.6), False)
    _check(fn, _input(shape, layout, seed=3), dtype, UP)


def test_channels_last_stays_channels_last(no_fallback):
    x = _input((2, 4, 5, 6), "channels_last").to(DEVICE)
    y = F.interpolate(x, scale_factor=2, mode="bilinear")
    assert y.is_contiguous(memory_format=torch.channels_last)
    want = F.interpolate(x.cpu(), scale_factor=2, mode="bilinear")
    torch.testing.assert_close(y.cpu(), want, **TOL[torch.float32])


@pytest.mark.parametrize("align", [False, True])
def test_scales_given_to_the_op(align, no_fallback):
    """The ops' own scale arguments decide the source positions, whatever the output size."""
    x = _input((2, 3, 6, 5), "contiguous")
    for size, scales in [([9, 11], [2.5, 1.3]), ([12, 10], [1.9, 3.0]), ([4, 3], [0.5, 0.9])]:
        ops = [lambda t: torch.ops.aten.upsample_nearest2d(t, size, *scales),
               lambda t: torch.ops.aten._upsample_nearest_exact2d(t, size, *scales),
               lambda t: torch.ops.aten.upsample_bilinear2d(t, size, align, *scales)]
        for fn in ops:
            _check(fn, x, torch.float32, UP)
    _check(lambda t: torch.ops.aten.upsample_linear1d(t, [9], align, 1.7), x[:, :, 0],
           torch.float32, UP)
    _check(lambda t: torch.ops.aten.upsample_trilinear3d(t, [3, 7, 4], align, 2.0, 1.2, 0.7),
           x.reshape(1, 2, 3, 6, 5), torch.float32, UP)
    _check(lambda t: torch.ops.aten.upsample_nearest3d(t, [3, 7, 4], 2.0, 1.2, 0.7),
           x.reshape(1, 2, 3, 6, 5), torch.float32, UP)
    # Equal and doubled extents with a scale that says otherwise: PyTorch's 2-D forward and
    # every backward map them without the scale, the 1-D and 3-D forwards with it.
    for size, scale in [([5], 2.0), ([10], 3.0)]:
        _check(lambda t: torch.ops.aten.upsample_nearest1d(t, size, scale), x[:, :, 0],
               torch.float32, UP)
    for size, scales in [([6, 5], [2.0, 0.5]), ([12, 10], [3.0, 1.0])]:
        _check(lambda t: torch.ops.aten.upsample_nearest2d(t, size, *scales), x, torch.float32,
               UP)


def test_recompute_scale_factor(no_fallback):
    x = _input((2, 3, 7, 5), "contiguous")
    for mode in ["nearest", "bilinear"]:
        kw = {} if mode == "nearest" else dict(align_corners=False)
        _check(lambda t: F.interpolate(t, scale_factor=1.37, mode=mode,
                                       recompute_scale_factor=True, **kw), x, torch.float32, UP)


def test_segmentation_sized(no_fallback):
    """A segmentation head's upsampling: 21 classes, 4x bilinear, several chunks per PE."""
    x = _input((2, 21, 16, 12), "contiguous")
    fn = lambda t: F.interpolate(t, scale_factor=4, mode="bilinear", align_corners=False)  # noqa: E731
    _check(fn, x, torch.float32, UP)
    _check(fn, _input((2, 21, 16, 12), "channels_last"), torch.float32, UP)


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "trilinear"])
def test_empty_batch(mode, no_fallback):
    shape = (0, 3, 2, 4, 5) if mode == "trilinear" else (0, 3, 4, 5)
    x = torch.randn(shape, device=DEVICE, requires_grad=True)
    y = F.interpolate(x, scale_factor=2, mode=mode)
    assert y.shape == F.interpolate(torch.randn(shape), scale_factor=2, mode=mode).shape
    y.sum().backward()
    assert x.grad.shape == x.shape


def test_rows_too_wide_use_the_cpu():
    """A row (input and output width) beyond a PE's local store takes the CPU fallback."""
    x = torch.randn(1, 1, 2, 40000)
    torch_mtia_emu.reset_fallback_counts()
    y = F.interpolate(x.to(DEVICE), size=(3, 90000), mode="bilinear")
    assert "aten::upsample_bilinear2d.out" in str(torch_mtia_emu.fallback_counts())
    torch.testing.assert_close(y.cpu(), F.interpolate(x, size=(3, 90000), mode="bilinear"))


def test_integer_nearest_uses_the_cpu():
    """Nearest upsampling of integers is the CPU kernel's (uint8) or its error (int32)."""
    x = torch.randint(0, 200, (1, 2, 3, 4), dtype=torch.uint8)
    y = F.interpolate(x.to(DEVICE), scale_factor=2, mode="nearest")
    assert torch.equal(y.cpu(), F.interpolate(x, scale_factor=2, mode="nearest"))


def test_bad_arguments():
    x = torch.randn(1, 2, 3, 4, device=DEVICE)
    with pytest.raises(RuntimeError):
        torch.ops.aten.upsample_bilinear2d(x, [0, 4], False)
    with pytest.raises(RuntimeError):
        torch.ops.aten.upsample_nearest2d(x[0], [6, 8])
    with pytest.raises(RuntimeError):
        torch.ops.aten.upsample_bilinear2d_backward(torch.randn(1, 2, 5, 5, device=DEVICE),
                                                    [6, 8], [1, 2, 3, 4], False)


# --- nll_loss2d ------------------------------------------------------------------------------

NLL = ["nll_loss", "nll_loss_backward"]


def _targets(shape, classes, seed=0, ignore=-100, layout="contiguous"):
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, classes, shape, generator=g)
    t.view(-1)[::5] = ignore
    if layout == "strided":
        t = torch.stack([t, t], dim=-1)[..., 0]
    return t


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_nll_loss2d(reduction, weighted, dtype, no_fallback):
    x = _input((3, 5, 6, 7), "contiguous", seed=1)
    t = _targets((3, 6, 7), 5)
    w = torch.rand(5, generator=torch.Generator().manual_seed(2)) + 0.5

    def fn(a):
        ww = w.to(a.dtype).to(a.device) if weighted else None
        return F.nll_loss(a, t.to(a.device), weight=ww, reduction=reduction)

    tol = TOL[dtype] if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    _check(fn, x, dtype, NLL, tol)


@pytest.mark.parametrize("layout", ["channels_last", "strided"])
@pytest.mark.parametrize("ignore", [-100, 2])
def test_nll_loss2d_layouts(layout, ignore, no_fallback):
    x = _input((2, 4, 5, 9), layout, seed=4)
    t = _targets((2, 5, 9), 4, seed=5, ignore=ignore, layout=layout)
    for reduction in ["none", "mean"]:
        # PyTorch's CPU backward refuses a channels_last input: its reference is contiguous.
        fn = lambda a: F.nll_loss(a.contiguous() if a.device.type == "cpu" else a,  # noqa: E731
                                  t.to(a.device), ignore_index=ignore, reduction=reduction)
        _check(fn, x, torch.float32, NLL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_nll_loss2d_many_classes(dtype, no_fallback):
    """More classes than the kernels load whole: each picked element is fetched alone."""
    x = _input((2, 300, 3, 5), "contiguous", seed=6)
    t = _targets((2, 3, 5), 300, seed=8)
    w = torch.rand(300, generator=torch.Generator().manual_seed(9)) + 0.5
    tol = TOL[dtype] if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    for reduction in ["none", "mean", "sum"]:
        fn = lambda a: F.nll_loss(a, t.to(a.device), weight=w.to(a.dtype).to(a.device),  # noqa: E731
                                  reduction=reduction)
        _check(fn, x, dtype, NLL, tol)
    if dtype == torch.float32:
        # channels_last: PyTorch's CPU backward refuses it, so its reference is contiguous
        fn = lambda a: F.nll_loss(a.contiguous() if a.device.type == "cpu" else a,  # noqa: E731
                                  t.to(a.device))
        _check(fn, _input((2, 300, 3, 5), "channels_last"), torch.float32, NLL)


def test_nll_loss_nd_shapes(no_fallback):
    """3-D and 5-D inputs reach nll_loss2d through reshapes; cross_entropy of images."""
    x3 = _input((2, 4, 9), "contiguous")
    t3 = _targets((2, 9), 4)
    _check(lambda a: F.nll_loss(a, t3.to(a.device)), x3, torch.float32, NLL)
    x5 = _input((2, 3, 2, 3, 4), "contiguous")
    t5 = _targets((2, 2, 3, 4), 3)
    _check(lambda a: F.nll_loss(a, t5.to(a.device), reduction="sum"), x5, torch.float32, NLL)
    x4 = _input((2, 6, 5, 4), "contiguous")
    t4 = _targets((2, 5, 4), 6)
    _check(lambda a: F.cross_entropy(a, t4.to(a.device)), x4, torch.float32, NLL)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("classes", [7, 1000])  # boxes of classes, and single elements
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_1d(weighted, classes, dtype, no_fallback):
    """The plain [N, C] loss (cross_entropy's) runs on the same kernels with S = 1."""
    x = _input((6, classes), "contiguous", seed=classes)
    t = _targets((6,), classes, seed=1)
    w = torch.rand(classes, generator=torch.Generator().manual_seed(2)) + 0.5
    tol = TOL[dtype] if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    for reduction in ["none", "mean", "sum"]:
        fn = lambda a: F.nll_loss(a, t.to(a.device), reduction=reduction,  # noqa: E731
                                  weight=w.to(a.dtype).to(a.device) if weighted else None)
        _check(fn, x, dtype, NLL, tol)
    _check(lambda a: F.cross_entropy(a, t.clamp(min=0).to(a.device), label_smoothing=0.1), x,
           dtype, NLL, tol)


def test_nll_loss_1d_outputs_and_errors(no_fallback):
    x = torch.randn(4, 5)
    w = torch.rand(5) + 0.5
    for args in [(x, torch.tensor([0, 4, -100, 2]), None, 0, -100),  # none: total_weight 0
                 (x, torch.tensor([0, 4, 1, 2]), w, 0, 1),
                 (x[1], torch.tensor(3), w, 0, -100),  # one [C] input: its weight
                 (x[1], torch.tensor(3), None, 1, 3),  # mean of nothing: NaN
                 (x, torch.tensor([0, 4, 1, 2]), w, 1, -100),
                 (x.t().contiguous().t(), torch.tensor([0, 4, 1, 2]), w, 2, -100)]:
        got = torch.ops.aten.nll_loss_forward(*[a.to(DEVICE) if isinstance(a, torch.Tensor)
                                                else a for a in args])
        want = torch.ops.aten.nll_loss_forward(*args)
        for g, wa in zip(got, want):
            assert g.shape == wa.shape
            torch.testing.assert_close(g.cpu(), wa, equal_nan=True)
    with pytest.raises(IndexError, match="Target 5 is out of bounds"):
        F.nll_loss(x.to(DEVICE), torch.tensor([0, 5, 1, 2], device=DEVICE))
    with pytest.raises(IndexError, match="Target -1 is out of bounds"):
        F.cross_entropy(x.to(DEVICE), torch.tensor([0, -1, 1, 2], device=DEVICE))


def test_nll_loss2d_all_ignored_and_empty(no_fallback):
    x = torch.randn(2, 3, 4, 4)
    t = torch.full((2, 4, 4), -100)
    for reduction in ["mean", "sum", "none"]:
        got = torch.ops.aten.nll_loss2d_forward(x.to(DEVICE), t.to(DEVICE), None,
                                                ["none", "mean", "sum"].index(reduction), -100)
        want = torch.ops.aten.nll_loss2d_forward(x, t, None,
                                                 ["none", "mean", "sum"].index(reduction), -100)
        for g, w in zip(got, want):
            torch.testing.assert_close(g.cpu(), w, equal_nan=True)
    xe = torch.randn(0, 3, 4, 4, device=DEVICE, requires_grad=True)
    te = torch.zeros(0, 4, 4, dtype=torch.long, device=DEVICE)
    loss = F.nll_loss(xe, te, reduction="sum")
    assert loss.item() == 0
    loss.backward()
    assert xe.grad.shape == xe.shape
    assert F.nll_loss(xe, te).isnan().item()
    assert F.nll_loss(xe, te, reduction="none").shape == (0, 4, 4)


def test_nll_loss2d_bad_target():
    x = torch.randn(2, 3, 4, 4, device=DEVICE)
    t = torch.zeros(2, 4, 4, dtype=torch.long)
    t[1, 2, 3] = 7
    with pytest.raises(RuntimeError, match="Target 7 is out of bounds"):
        F.nll_loss(x, t.to(DEVICE))
    with pytest.raises(RuntimeError, match="Target -3 is out of bounds"):
        F.nll_loss(x, torch.full((2, 4, 4), -3, device=DEVICE), reduction="none")
    # The device is still usable.
    assert F.nll_loss(x, torch.zeros(2, 4, 4, dtype=torch.long, device=DEVICE)).isfinite().item()
    with pytest.raises(RuntimeError, match="sizes don't match"):
        torch.ops.aten.nll_loss2d_forward(x, torch.zeros(2, 4, 5, dtype=torch.long,
                                                         device=DEVICE), None, 1, -100)


def test_segmentation_training(no_fallback):
    """Two SGD steps of a tiny segmentation net (conv, downsample, bilinear upsample, per-pixel
    cross-entropy with an ignored label) on the device and on the CPU."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 5, 1),
        torch.nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False))
    x = torch.randn(2, 3, 12, 10)
    t = _targets((2, 12, 10), 5, seed=7, ignore=255)
    dev_net = copy.deepcopy(net).to(DEVICE)
    losses = {}
    for device, model in [("cpu", net), (DEVICE, dev_net)]:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses[device] = []
        for _ in range(2):
            opt.zero_grad()
            loss = F.cross_entropy(model(x.to(device)), t.to(device), ignore_index=255)
            loss.backward()
            opt.step()
            losses[device].append(loss.item())
    assert losses["cpu"] == pytest.approx(losses[DEVICE], rel=1e-4)
    for p, q in zip(net.parameters(), dev_net.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-4, atol=1e-5)


def test_many_pes(no_fallback):
    """Sizes that spread over many PEs: each PE's partial sums, and blocks of every PE."""
    x = _input((4, 5, 48, 48), "contiguous", seed=10)
    t = _targets((4, 48, 48), 5, seed=11)
    for reduction in ["mean", "sum", "none"]:
        _check(lambda a: F.nll_loss(a, t.to(a.device), reduction=reduction), x, torch.float32,
               NLL, dict(rtol=1e-4, atol=1e-5))
    x = _input((2, 300, 48, 32), "channels_last", seed=12)
    t = _targets((2, 48, 32), 300, seed=13)
    _check(lambda a: F.nll_loss(a.contiguous() if a.device.type == "cpu" else a,
                                t.to(a.device)), x, torch.float32, NLL)
    _check(lambda a: F.interpolate(a, size=(70, 50), mode="bilinear"),
           _input((3, 8, 40, 30), "channels_last", seed=14), torch.float32, UP)


CHILD = """
import torch, torch.nn.functional as F, torch_mtia_emu
torch_mtia_emu.set_fallback_mode("error")
g = torch.Generator().manual_seed(0)
def check(fn, x):
    xc = x.clone().requires_grad_()
    xd = x.to("mtia").requires_grad_()
    yc, yd = fn(xc), fn(xd)
    w = torch.randn(yc.shape, generator=g)
    (yc * w).sum().backward()
    (yd * w.to("mtia")).sum().backward()
    torch.testing.assert_close(yd.detach().cpu(), yc.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)
x = torch.randn(2, 5, 20, 30, generator=g)
check(lambda a: F.interpolate(a, scale_factor=3.3, mode="bilinear", align_corners=True), x)
check(lambda a: F.interpolate(a, size=(61, 600), mode="bilinear"), x[:, :2, :4])
check(lambda a: F.interpolate(a, scale_factor=2, mode="nearest"), x)
check(lambda a: F.interpolate(a, scale_factor=(1.5, 2, 0.5), mode="trilinear"),
      x.reshape(2, 5, 2, 10, 30))
t = torch.randint(0, 5, (2, 20, 30), generator=g)
for r in ["none", "mean", "sum"]:
    check(lambda a: F.nll_loss(a, t.to(a.device), reduction=r), x)
print("OK", torch_mtia_emu.kernel_launch_counts())
"""


def test_mtia_v1():
    """The kernels on mtia-v1's smaller local store: blocks of fewer rows, several per PE (a
    functional run: the timing model does not change results)."""
    r = run_child(CHILD, env={"MTIA_EMU_PRESET": "mtia-v1", "MTIA_EMU_TIMING": "0"}, timeout=300)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr
    for k in ["upsample", "upsample_backward", "nll_loss", "nll_loss_backward"]:
        assert f"'{k}'" in r.stdout
