"""Sorting and selection on the device (kernels/lib/sort.c, python/csrc/ops_sort.cpp): sort,
argsort, msort, topk, kthvalue, median and nanmedian against PyTorch on the CPU, forward and
backward, for every kernel dtype, both directions, any dim, non-contiguous and channels_last
inputs, NaN / -0.0 / ties (stable=True in input order, stable=False in the CPU's std::sort
order), empty tensors, k = 0,
long lines (merged through DRAM scratch), out= and bad arguments raising like the CPU;
`no_fallback` proves nothing ran on the CPU."""
import pytest
import torch

import torch_mtia_emu

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int32, torch.int64,
          torch.bool]
FLOATS = [torch.float32, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.int32, torch.int64]


def _data(shape, dtype, seed=0, ties=True, specials=True):
    """Values with ties; floats also with NaN, +-0.0 and +-inf."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        if ties:
            x = (torch.randint(-8, 8, shape, generator=g) / 4).to(dtype)
        else:
            n = max(1, int(torch.tensor(shape).prod()))
            x = (torch.randperm(n, generator=g)[:n].reshape(shape) / 8 - n / 16).to(dtype)
        if specials and x.numel() >= 8:
            flat = x.view(-1)
            pos = torch.randperm(flat.numel(), generator=g)[:6]
            flat[pos] = torch.tensor([float("nan"), -0.0, 0.0, float("inf"), float("-inf"),
                                      float("nan")], dtype=dtype)
        return x
    info = torch.iinfo(dtype)
    if not ties:
        n = max(1, int(torch.tensor(shape).prod()))
        return (torch.randperm(n, generator=g).reshape(shape) - n // 2).to(dtype)
    x = torch.randint(-5, 5, shape, generator=g).to(dtype)
    if x.numel() >= 4:
        x.view(-1)[:2] = torch.tensor([info.min, info.max], dtype=dtype)
    return x


def _same(dev, cpu):
    """Exact equality, NaN equal to NaN."""
    if isinstance(dev, (tuple, list)):
        for d, c in zip(dev, cpu):
            _same(d, c)
        return
    d = dev.cpu()
    assert d.dtype == cpu.dtype and d.shape == cpu.shape, (d.dtype, cpu.dtype, d.shape, cpu.shape)
    torch.testing.assert_close(d, cpu, rtol=0, atol=0, equal_nan=True)


def _launched(fn, launches=True):
    """fn(), checking that it ran the sort kernel (or, for empty results, launched nothing)."""
    torch_mtia_emu.reset_kernel_launch_counts()
    out = fn()
    counts = torch_mtia_emu.kernel_launch_counts()
    if launches:
        assert counts.get("sort", 0) >= 1, counts
    else:
        assert counts == {}, counts
    return out


def _raises_like(fn, x):
    """fn on the device raises what the CPU raises: the same exception type and message (the
    CPU's own name for itself aside)."""
    with pytest.raises(Exception) as cpu:
        fn(x)
    with pytest.raises(Exception) as dev:
        fn(x.to("mtia"))
    assert type(dev.value) is type(cpu.value), (cpu.value, dev.value)
    want = str(cpu.value).split("\n")[0].replace("_cpu", "").replace(" on CPU", "")
    assert want[:40] in str(dev.value), (cpu.value, dev.value)


# --- sort, argsort, msort ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("descending", [False, True])
def test_sort_dtypes_dims(dtype, descending, no_fallback):
    x = _data((4, 5, 33), dtype, seed=1)
    d = x.to("mtia")
    for dim in (0, 1, 2, -1):
        want = torch.sort(x, dim=dim, descending=descending, stable=True)
        _same(_launched(lambda: torch.sort(d, dim=dim, descending=descending, stable=True)), want)
        _same(torch.argsort(d, dim=dim, descending=descending, stable=True), want.indices)
        # stable=False (the default): equal values in the order of the CPU's std::sort
        want = torch.sort(x, dim=dim, descending=descending)
        _same(torch.sort(d, dim=dim, descending=descending), want)
        _same(torch.sort(d, dim=dim, descending=descending, stable=False), want)
        _same(d.sort(dim, descending), want)
        _same(torch.argsort(d, dim=dim, descending=descending), want.indices)
    _same(torch.msort(d), torch.msort(x))


@pytest.mark.parametrize("dtype", [torch.bool, torch.float16, torch.int32])
def test_sort_unstable_ties_like_the_cpu(dtype, no_fallback):
    # Few distinct values: the CPU's unstable order of ties differs from the stable one.
    for n in (16, 17, 100, 2000):
        x = _data((3, n), dtype, seed=n, specials=False)
        for descending in (False, True):
            want = torch.sort(x, dim=1, descending=descending)
            if n > 16 and dtype == torch.bool:
                assert not torch.equal(want.indices,
                                       torch.sort(x, dim=1, descending=descending,
                                                  stable=True).indices)
            _same(torch.sort(x.to("mtia"), dim=1, descending=descending), want)
            _same(torch.argsort(x.t().to("mtia"), dim=0, descending=descending),
                  torch.argsort(x.t(), dim=0, descending=descending))
    # an expanded line (stride 0): the CPU keeps index order
    e = _data((1, 40), dtype, seed=1).expand(3, 40).t()
    _same(torch.sort(e.to("mtia"), dim=0), torch.sort(e, dim=0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_sort_layouts(dtype, no_fallback):
    x = _data((6, 8, 10), dtype, seed=2)
    views = {
        "transposed": lambda t: t.transpose(0, 2),
        "sliced": lambda t: t[::2, 1:, ::3],
        "expanded": lambda t: t[:, :1, :].expand(6, 4, 10),
        "0-dim": lambda t: t[1, 2, 3],
        "1-d": lambda t: t[2, 3],
    }
    for name, view in views.items():
        v = view(x)
        for dim in range(v.dim()) if v.dim() else (0,):
            for stable in (True, False):
                _same(torch.sort(view(x.to("mtia")), dim=dim, stable=stable),
                      torch.sort(v, dim=dim, stable=stable))
    # channels_last, sorted along the channels and along the width
    c = _data((2, 5, 4, 6), dtype, seed=3).to(memory_format=torch.channels_last)
    for dim in (1, 3):
        _same(torch.sort(c.to("mtia"), dim=dim, descending=True, stable=True),
              torch.sort(c, dim=dim, descending=True, stable=True))
    # 6-D with a permutation that leaves more than 3 line dims
    y = _data((2, 3, 2, 3, 2, 5), dtype, seed=4).permute(4, 0, 3, 1, 5, 2)
    for dim in (0, 4, -1):
        _same(torch.sort(y.to("mtia"), dim=dim, stable=True), torch.sort(y, dim=dim, stable=True))


def test_sort_nan_zero_ties_exact(no_fallback):
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([3.0, nan, -0.0, 1.0, 0.0, -inf, nan, 1.0, -0.0, inf, -1.0, 0.0])
    for descending in (False, True):
        got = torch.sort(x.to("mtia"), descending=descending, stable=True)
        want = torch.sort(x, descending=descending, stable=True)
        _same(got, want)
        _same(torch.sort(x.to("mtia"), descending=descending),
              torch.sort(x, descending=descending))
        # -0.0 keeps its sign: the values are the input's bits in sorted order
        assert torch.equal(got.values.cpu().view(torch.int32), want.values.view(torch.int32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32, torch.bool])
def test_sort_long_lines(dtype, no_fallback):
    # Longer than a local store holds: merged through DRAM scratch on the device.
    x = _data((2, 5000), dtype, seed=5)
    for descending in (False, True):
        _same(torch.sort(x.to("mtia"), dim=1, descending=descending, stable=True),
              torch.sort(x, dim=1, descending=descending, stable=True))
    y = _data((3000, 2), dtype, seed=6)
    _same(torch.sort(y.to("mtia"), dim=0, stable=True), torch.sort(y, dim=0, stable=True))


def test_sort_empty_and_out(no_fallback):
    for shape, dim in (((0,), 0), ((3, 0), 1), ((0, 4), 1), ((2, 0, 3), 0)):
        x = torch.empty(shape)
        d = x.to("mtia")
        _same(_launched(lambda: torch.sort(d, dim=dim), False), torch.sort(x, dim=dim))
    x = _data((5, 7), torch.float32, seed=7)
    d = x.to("mtia")
    v = torch.empty(0, device="mtia")
    i = torch.empty(0, dtype=torch.long, device="mtia")
    r = torch.sort(d, dim=0, descending=True, out=(v, i))
    assert r.values is v and r.indices is i
    _same((v, i), torch.sort(x, dim=0, descending=True, stable=True))
    # out= over the input itself, and into non-contiguous outputs
    d2 = d.clone()
    i2 = torch.empty(5, 7, dtype=torch.long, device="mtia")
    torch.sort(d2, dim=1, out=(d2, i2))
    _same((d2, i2), torch.sort(x, dim=1, stable=True))
    vt = torch.empty(7, 5, device="mtia").t()
    it = torch.empty(7, 5, dtype=torch.long, device="mtia").t()
    torch.sort(d, dim=1, out=(vt, it))
    _same((vt, it), torch.sort(x, dim=1, stable=True))


def test_sort_bad_args(no_fallback):
    x = _data((3, 4), torch.float32, seed=8)
    _raises_like(lambda t: torch.sort(t, dim=2), x)
    _raises_like(lambda t: torch.argsort(t, dim=-3), x)
    with pytest.raises(RuntimeError):
        torch.sort(x.to("mtia"), out=(torch.empty(0, device="mtia"),
                                      torch.empty(0, dtype=torch.int32, device="mtia")))


def test_sort_float64_falls_back():
    x = torch.randn(4, 6, dtype=torch.float64)
    mode = torch_mtia_emu.get_fallback_mode()
    torch_mtia_emu.set_fallback_mode("silent")
    torch_mtia_emu.reset_fallback_counts()
    try:
        _same(torch.sort(x.to("mtia"), dim=1), torch.sort(x, dim=1))
    finally:
        torch_mtia_emu.set_fallback_mode(mode)
    counts = torch_mtia_emu.fallback_counts()
    assert any("sort" in k and "Double" in k for k in counts), counts


@pytest.mark.parametrize("dtype", FLOATS)
def test_sort_backward(dtype, no_fallback):
    x = _data((4, 9), dtype, seed=9, ties=False, specials=False).requires_grad_()
    g = torch.randn(4, 9).to(dtype)
    grads = []
    for dev in ("mtia", "cpu"):
        xx = x.detach().to(dev).requires_grad_()
        v, _ = torch.sort(xx, dim=1, descending=True)
        (v * g.to(dev)).sum().backward()
        grads.append(xx.grad.cpu())
    _same(grads[0], grads[1])


# --- topk -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("largest", [True, False])
def test_topk(dtype, largest, no_fallback):
    x = _data((3, 6, 17), dtype, seed=10)
    d = x.to("mtia")
    for dim in (0, 1, -1):
        n = x.size(dim)
        for k in sorted({0, 1, 2, n // 2, n}):
            want = torch.topk(x, k, dim=dim, largest=largest)
            got = _launched(lambda: torch.topk(d, k, dim=dim, largest=largest), k > 0)
            # The CPU picks among equal values by its own partition; the values agree exactly
            # and each index points at its value.
            _same(got.values, want.values)
            _same(torch.gather(x, dim, got.indices.cpu()), want.values)
    # sorted=False: the same set (the device returns it sorted)
    got = torch.topk(d, 5, dim=-1, largest=largest, sorted=False)
    want = torch.topk(x, 5, dim=-1, largest=largest, sorted=True)
    _same(torch.sort(got.values.cpu(), dim=-1, descending=largest).values, want.values)


def test_topk_exact_indices_and_layouts(no_fallback):
    x = _data((5, 40), torch.float32, seed=11, ties=False, specials=False)
    xt = x.t()
    for src in (x, xt, x[:, ::3]):
        for dim in (0, 1):
            k = min(4, src.size(dim))
            _same(torch.topk(src.to("mtia"), k, dim=dim), torch.topk(src, k, dim=dim))
    _same(torch.topk(torch.tensor(2.5).to("mtia"), 1), torch.topk(torch.tensor(2.5), 1))
    e = torch.empty(0, 3)
    _same(torch.topk(e.to("mtia"), 0, dim=0), torch.topk(e, 0, dim=0))
    _same(torch.topk(e.to("mtia"), 2, dim=1), torch.topk(e, 2, dim=1))
    # long lines: the last merge stops after the k results
    y = _data((2, 6000), torch.float32, seed=12, ties=False, specials=False)
    _same(torch.topk(y.to("mtia"), 10, dim=1), torch.topk(y, 10, dim=1))


def test_topk_bad_args(no_fallback):
    x = _data((3, 4), torch.float32, seed=13)
    _raises_like(lambda t: torch.topk(t, 5), x)
    _raises_like(lambda t: torch.topk(t, -1), x)
    _raises_like(lambda t: torch.topk(t, 1, dim=3), x)
    with pytest.raises(RuntimeError, match="bool"):
        torch.topk(torch.ones(3, dtype=torch.bool).to("mtia"), 1)


@pytest.mark.parametrize("dtype", FLOATS)
def test_topk_backward(dtype, no_fallback):
    x = _data((6, 8), dtype, seed=14, ties=False, specials=False)
    g = torch.randn(6, 3).to(dtype)
    grads = []
    for dev in ("mtia", "cpu"):
        xx = x.detach().to(dev).requires_grad_()
        v, _ = torch.topk(xx, 3, dim=1, largest=False)
        (v * g.to(dev)).sum().backward()
        grads.append(xx.grad.cpu())
    _same(grads[0], grads[1])


# --- kthvalue, median, nanmedian ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_kthvalue(dtype, keepdim, no_fallback):
    x = _data((4, 7, 9), dtype, seed=15)
    d = x.to("mtia")
    for dim in (0, 1, 2, -1):
        for k in (1, x.size(dim) // 2 + 1, x.size(dim)):
            want = torch.kthvalue(x, k, dim=dim, keepdim=keepdim)
            got = _launched(lambda: torch.kthvalue(d, k, dim=dim, keepdim=keepdim))
            _same(got.values, want.values)
            # ties: any index of the value (the device gives the first in input order)
            idx = got.indices.cpu() if keepdim else got.indices.cpu().unsqueeze(dim)
            _same(torch.gather(x, dim, idx).squeeze(dim) if not keepdim else
                  torch.gather(x, dim, idx), want.values)
    u = _data((5, 8), dtype, seed=16, ties=False, specials=False)
    _same(torch.kthvalue(u.to("mtia"), 3, dim=1), torch.kthvalue(u, 3, dim=1))
    _same(torch.kthvalue(u.t().to("mtia"), 3, dim=0), torch.kthvalue(u.t(), 3, dim=0))


def test_kthvalue_edges_and_errors(no_fallback):
    s = torch.tensor(1.5)
    _same(torch.kthvalue(s.to("mtia"), 1), torch.kthvalue(s, 1))
    e = torch.empty(3, 0)
    _same(torch.kthvalue(e.to("mtia"), 1, 0), torch.kthvalue(e, 1, 0))
    x = _data((3, 4), torch.float32, seed=17)
    _raises_like(lambda t: torch.kthvalue(t, 0), x)
    _raises_like(lambda t: torch.kthvalue(t, 5), x)
    _raises_like(lambda t: torch.kthvalue(t, 1, dim=2), x)
    _raises_like(lambda t: torch.kthvalue(t, 1, 0), torch.empty(0, 3))
    _raises_like(lambda t: torch.kthvalue(t, 1), torch.ones(3, dtype=torch.bool))
    v = torch.empty(0, device="mtia")
    i = torch.empty(0, dtype=torch.long, device="mtia")
    torch.kthvalue(x.to("mtia"), 2, dim=0, out=(v, i))
    _same(v, torch.kthvalue(x, 2, dim=0).values)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("op", ["median", "nanmedian"])
def test_median(dtype, op, no_fallback):
    fn = getattr(torch, op)
    for seed, ties in ((18, False), (19, True)):
        x = _data((5, 6, 7), dtype, seed=seed, ties=ties, specials=ties)
        if dtype.is_floating_point and ties:
            x[0, 0, :] = float("nan")  # a line of NaNs only
            x[1, 2, 3] = float("nan")
        d = x.to("mtia")
        for dim in (0, 1, 2, -1):
            for keepdim in (False, True):
                want = fn(x, dim=dim, keepdim=keepdim)
                got = _launched(lambda: fn(d, dim=dim, keepdim=keepdim))
                _same(got.values, want.values)
                idx = got.indices.cpu() if keepdim else got.indices.cpu().unsqueeze(dim)
                picked = torch.gather(x, dim, idx)
                _same(picked if keepdim else picked.squeeze(dim), want.values)
                if not ties:  # one answer: the same index
                    _same(got.indices, want.indices)
        _same(fn(d), fn(x))
        _same(fn(d[::2, 1:]), fn(x[::2, 1:]))


def test_median_nan_index_and_edges(no_fallback):
    nan = float("nan")
    x = torch.tensor([[1.0, nan, 2.0, nan], [3.0, 0.0, -1.0, 5.0], [nan, nan, nan, nan]])
    # median: a line's first NaN and its index; nanmedian: the lower median of the others.
    # Over a line of NaNs only the CPU's nanmedian index is its nth_element's choice.
    _same(torch.median(x.to("mtia"), 1), torch.median(x, 1))
    got, want = torch.nanmedian(x.to("mtia"), 1), torch.nanmedian(x, 1)
    _same(got.values, want.values)
    _same(got.indices[:2], want.indices[:2])
    assert 0 <= int(got.indices[2]) < 4
    for fn in (torch.median, torch.nanmedian):
        _same(fn(x.to("mtia")), fn(x))
        _same(fn(torch.tensor(2.0).to("mtia"), 0), fn(torch.tensor(2.0), 0))
        _same(fn(torch.empty(0).to("mtia")), fn(torch.empty(0)))
        _same(fn(torch.empty(3, 0).to("mtia"), 0), fn(torch.empty(3, 0), 0))
        _raises_like(lambda t: fn(t, 0), torch.empty(0, 3))
        _raises_like(lambda t: fn(t, 2), x)
        _raises_like(lambda t: fn(t, 0), torch.ones(3, dtype=torch.bool))
        _raises_like(lambda t: fn(t), torch.ones(3, dtype=torch.bool))
    # long lines
    y = _data((2, 4099), torch.float32, seed=20, ties=False, specials=False)
    y[1, 17] = nan
    _same(torch.median(y.to("mtia"), 1), torch.median(y, 1))
    _same(torch.nanmedian(y.to("mtia"), 1), torch.nanmedian(y, 1))


@pytest.mark.parametrize("op", ["kthvalue", "median", "nanmedian"])
def test_selection_backward(op, no_fallback):
    x = _data((5, 7), torch.float32, seed=21, ties=False, specials=False)
    g = torch.randn(5)
    grads = []
    for dev in ("mtia", "cpu"):
        xx = x.detach().to(dev).requires_grad_()
        if op == "kthvalue":
            v, _ = torch.kthvalue(xx, 3, dim=1)
        else:
            v, _ = getattr(torch, op)(xx, dim=1)
        (v * g.to(dev)).sum().backward()
        grads.append(xx.grad.cpu())
    _same(grads[0], grads[1])
    # the full median's gradient too
    grads = []
    for dev in ("mtia", "cpu"):
        xx = x.detach().to(dev).requires_grad_()
        (torch.median(xx) * 3).backward()
        grads.append(xx.grad.cpu())
    _same(grads[0], grads[1])
