"""Embeddings and indexing on the device (kernels/lib/index.c, python/csrc/ops_index.cpp):
each op against PyTorch on the CPU, forward and backward through autograd, for each dtype,
with non-contiguous inputs, duplicate and negative indices, empty tensors, out-of-range
indices (IndexError) and bad arguments; `no_fallback` proves nothing ran on the CPU. Ends
with a small DLRM (EmbeddingBag + MLPs + pairwise dot interaction) trained on both."""
import pytest
import torch
import torch.nn.functional as F

import torch_mtia_emu

FLOATS = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1e-2)}
INDEX_KERNELS = {"index_gather", "index_put", "embedding_bag", "gather_lines", "scatter_lines",
                 "cumsum", "tri", "compact"}


def _to(x, device):
    if isinstance(x, torch.Tensor):
        y = x.detach().to(device)
        return y.requires_grad_() if x.requires_grad else y
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device) for v in x)
    return x


def _run(fn, inputs, device, seed=0):
    """fn(*inputs) on `device`; returns (outputs, grads of the inputs that require grad), on
    the CPU. The backward seeds with a fixed random gradient of each floating output."""
    xs = _to(inputs, device)
    out = fn(*xs)
    outs = out if isinstance(out, tuple) else (out,)
    leaves = [x for x in xs if isinstance(x, torch.Tensor) and x.requires_grad]
    grads = []
    if leaves:
        g = torch.Generator().manual_seed(seed)
        total = None
        for o in outs:
            if o.is_floating_point() and o.requires_grad:
                w = torch.randn(o.shape, generator=g).to(o.dtype).to(device)
                s = (o * w).sum()
                total = s if total is None else total + s
        grads = torch.autograd.grad(total, leaves, allow_unused=True)
    return [o.detach().cpu() for o in outs], [None if g is None else g.cpu() for g in grads]


def _check(fn, inputs, dtype=torch.float32, launched=None):
    torch_mtia_emu.reset_kernel_launch_counts()
    dev_out, dev_grads = _run(fn, inputs, "mtia")
    counts = torch_mtia_emu.kernel_launch_counts()
    cpu_out, cpu_grads = _run(fn, inputs, "cpu")
    rtol, atol = TOL.get(dtype, (0, 0))
    for d, c in zip(dev_out, cpu_out):
        assert d.dtype == c.dtype and d.shape == c.shape
        torch.testing.assert_close(d, c, rtol=rtol, atol=atol)
    for d, c in zip(dev_grads, cpu_grads):
        if c is None:
            assert d is None
            continue
        # gradients sum many products: a looser bound for the narrow dtypes
        torch.testing.assert_close(d, c, rtol=rtol * 4, atol=atol * 4)
    if launched is not None:
        assert launched in counts, f"{launched} did not run: {counts}"
    return counts


def _rand(*shape, dtype=torch.float32, grad=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).requires_grad_(grad and dtype.is_floating_point)


# --- embedding, embedding_bag ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("idx_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("padding_idx,scale", [(None, False), (3, False), (None, True), (2, True)])
def test_embedding(dtype, idx_dtype, padding_idx, scale, no_fallback):
    w = _rand(20, 9, dtype=dtype)
    idx = torch.tensor([[1, 3, 3, 19], [0, 2, 3, 1], [7, 7, 7, 2]], dtype=idx_dtype)
    _check(lambda w, i: F.embedding(i, w, padding_idx=padding_idx, scale_grad_by_freq=scale),
           [w, idx], dtype, launched="index_put")


def test_embedding_noncontiguous_weight(no_fallback):
    w = _rand(9, 20).t().detach().requires_grad_()  # [20, 9], column-major
    idx = torch.tensor([4, 0, 19, 4])
    _check(lambda w, i: F.embedding(i, w), [w, idx], launched="index_gather")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("idx_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_bag(dtype, mode, idx_dtype, include_last_offset, padding_idx, no_fallback):
    w = _rand(12, 7, dtype=dtype)
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 11, 0, 2], dtype=idx_dtype)
    offs = torch.tensor([0, 4, 4, 8, 11] if include_last_offset else [0, 4, 4, 8], dtype=idx_dtype)
    _check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, padding_idx=padding_idx,
                                           include_last_offset=include_last_offset),
           [w, idx, offs], dtype, launched="embedding_bag")


@pytest.mark.parametrize("dtype", FLOATS)
def test_embedding_bag_per_sample_weights(dtype, no_fallback):
    w = _rand(12, 5, dtype=dtype)
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
    offs = torch.tensor([0, 3, 3, 6])
    psw = _rand(8, dtype=dtype, seed=1)
    _check(lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p,
                                              padding_idx=4),
           [w, idx, offs, psw], dtype)


def test_embedding_bag_2d_input_and_freq(no_fallback):
    w = _rand(10, 4)
    idx = torch.tensor([[1, 2, 2], [9, 0, 2]])
    for mode in ["sum", "mean"]:
        _check(lambda w, i: F.embedding_bag(i, w, mode=mode), [w, idx])
        # scale_grad_by_freq: PyTorch 2.13's CPU embedding_bag scales some rows by another
        # index's count (row 9 above gets 1/3), so the reference is embedding + sum/mean,
        # whose CPU kernel divides each row by its own count.
        dev_out, dev_grads = _run(
            lambda w, i: F.embedding_bag(i, w, mode=mode, scale_grad_by_freq=True), [w, idx],
            "mtia")
        ref_out, ref_grads = _run(
            lambda w, i: getattr(F.embedding(i, w, scale_grad_by_freq=True), mode)(1), [w, idx],
            "cpu")
        torch.testing.assert_close(dev_out[0], ref_out[0])
        torch.testing.assert_close(dev_grads[0], ref_grads[0])


# --- index_select, index, index_put_, index_add ----------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.int64, torch.int8, torch.bool])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_index_select(dtype, dim, no_fallback):
    x = _rand(5, 6, 7, dtype=dtype) if dtype.is_floating_point else \
        torch.randint(-5, 5, (5, 6, 7)).to(dtype)
    x = x.transpose(0, 2).detach().requires_grad_(dtype.is_floating_point)  # non-contiguous
    idx = torch.tensor([0, 4, 4, 1])
    _check(lambda x, i: x.index_select(dim, i), [x, idx], dtype, launched="index_gather")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", ["first", "middle", "two_adjacent", "split", "neg", "mask",
                                  "2d_index", "int32"])
def test_index_tensor(dtype, case, no_fallback):
    x = _rand(5, 6, 7, dtype=dtype)
    i = torch.tensor([0, 4, 2, 4])
    j = torch.tensor([1, 5, 0, 5])
    fns = {
        "first": lambda x: x[i],
        "middle": lambda x: x[:, j],
        "two_adjacent": lambda x: x[:, j, torch.tensor([6, 0, 1, 6])],
        "split": lambda x: x[i, :, torch.tensor([3])],
        "neg": lambda x: x[torch.tensor([-1, 0, -5])],
        "mask": lambda x: x[torch.tensor([True, False, True, True, False])],
        "2d_index": lambda x: x[:, torch.tensor([[0, 1], [5, 5]])],
        "int32": lambda x: x[i.int(), j.int()],
    }
    # indices are moved to the device by _to: close over CPU ones and move them inside
    fn = fns[case]
    _check(lambda x: fn(x) if x.device.type == "cpu" else _index_on_device(fn, x), [x], dtype,
           launched="index_gather")


def _index_on_device(fn, x):
    # Re-run the same indexing with the index tensors on the device.
    orig = torch.Tensor.__getitem__

    def getitem(self, key):
        key = _to(key, "mtia") if self.device.type == "mtia" else key
        return orig(self, key)

    torch.Tensor.__getitem__ = getitem
    try:
        return fn(x)
    finally:
        torch.Tensor.__getitem__ = orig


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.int64])
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(dtype, accumulate, no_fallback):
    x = _rand(5, 6, dtype=dtype) if dtype.is_floating_point else torch.randint(-9, 9, (5, 6)).to(dtype)
    # duplicates only when accumulating (PyTorch leaves the winner of a plain put undefined)
    i = torch.tensor([0, 4, -1, 2] if accumulate else [0, 4, 1, 2])
    j = torch.tensor([1, 5, 5, 0])
    v = _rand(4, dtype=dtype, seed=2) if dtype.is_floating_point else torch.arange(4).to(dtype)
    _check(lambda x, i, j, v: x.index_put((i, j), v, accumulate=accumulate), [x, i, j, v], dtype,
           launched="index_put")
    # a whole row, broadcast value
    _check(lambda x, i: x.index_put((i,), torch.ones((), dtype=dtype, device=x.device),
                                    accumulate=accumulate),
           [x, torch.tensor([3, 1])], dtype)


def test_setitem_mask_and_masked_scatter(no_fallback):
    x = _rand(4, 5, grad=False)
    m = x > 0
    _check(lambda x, m: x.clone().index_put_((m,), torch.tensor(7.0, device=x.device)), [x, m])
    src = _rand(20, seed=3)
    _check(lambda x, m, s: x.masked_scatter(m, s), [x.requires_grad_(), m, src])


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.int64])
@pytest.mark.parametrize("dim", [0, 1])
def test_index_add(dtype, dim, no_fallback):
    fl = dtype.is_floating_point
    x = _rand(5, 6, dtype=dtype) if fl else torch.randint(-9, 9, (5, 6)).to(dtype)
    n = x.shape[dim]
    idx = torch.tensor([0, n - 1, 0, 2, 0])  # duplicates
    shape = [5, 6]
    shape[dim] = 5
    src = _rand(*shape, dtype=dtype, seed=4) if fl else torch.randint(-9, 9, shape).to(dtype)
    alpha = 2 if not fl else 0.5
    _check(lambda x, i, s: x.index_add(dim, i, s, alpha=alpha), [x, idx, src], dtype,
           launched="index_put")


def test_index_add_noncontiguous_and_inplace(no_fallback):
    x = _rand(6, 5, grad=False).t()
    src = _rand(4, 5, grad=False).t()
    idx = torch.tensor([4, 4, 0, 1])
    ref = x.clone().index_add_(1, idx, src)
    xd = x.to("mtia")
    xd.index_add_(1, idx.to("mtia"), src.to("mtia"))
    torch.testing.assert_close(xd.cpu(), ref)


# --- gather, scatter, scatter_add ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.int8])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather_scatter(dtype, dim, no_fallback):
    fl = dtype.is_floating_point
    mk = (lambda *s, seed=0: _rand(*s, dtype=dtype, seed=seed)) if fl else \
        (lambda *s, seed=0: torch.randint(-9, 9, s).to(dtype))
    x = mk(4, 5, 6)
    g = torch.Generator().manual_seed(5)
    d = dim % 3
    ishape = [3, 4, 5]
    idx = torch.randint(0, x.shape[d], ishape, generator=g)
    src = mk(*ishape, seed=6)
    _check(lambda x, i: torch.gather(x, dim, i), [x, idx], dtype, launched="gather_lines")
    _check(lambda x, i, s: torch.scatter_add(x, dim, i, s), [x, idx, src], dtype,
           launched="scatter_lines")
    # plain scatter: unique targets per line (duplicates would be undefined)
    uidx = torch.argsort(torch.rand(4, 5, 6, generator=g), dim=d).narrow(d, 0, 2)
    usrc = mk(*uidx.shape, seed=7)
    _check(lambda x, i, s: torch.scatter(x, dim, i, s), [x, uidx, usrc], dtype)
    _check(lambda x, i: torch.scatter(x, dim, i, 3), [x, uidx], dtype)


def test_gather_noncontiguous(no_fallback):
    x = _rand(6, 5).t().detach().requires_grad_()
    idx = torch.tensor([[0, 5, 5], [1, 1, 2]]).t().contiguous().t()
    _check(lambda x, i: torch.gather(x, 1, i), [x, idx])


# --- masked ops, nonzero ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.bool])
def test_masked(dtype, no_fallback):
    fl = dtype.is_floating_point
    x = _rand(4, 5, 6, dtype=dtype) if fl else torch.randint(-2, 3, (4, 5, 6)).to(dtype)
    m = torch.rand(5, 1, generator=torch.Generator().manual_seed(8)) > 0.4  # broadcast mask
    _check(lambda x, m: x.masked_fill(m, 1), [x, m], dtype, launched="where")
    _check(lambda x, m: x.masked_fill(m, torch.tensor(2)), [x, m], dtype)
    _check(lambda x, m: x.masked_select(m), [x, m], dtype, launched="compact")
    _check(lambda x: torch.nonzero(x), [x.detach()], launched="compact")
    _check(lambda x: x.transpose(0, 2).nonzero(), [x.detach()])


def test_nonzero_shapes(no_fallback):
    for x in [torch.tensor(3.0), torch.tensor(0.0), torch.zeros(3, 4), torch.tensor([0, 1, 0, 2])]:
        _check(lambda x: x.nonzero(), [x])


# --- cumsum, triu/tril, linspace --------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.int8, torch.bool])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_cumsum(dtype, dim, no_fallback):
    fl = dtype.is_floating_point
    x = _rand(4, 33, 5, dtype=dtype) if fl else torch.randint(-3, 4, (4, 33, 5)).to(dtype)
    _check(lambda x: x.cumsum(dim), [x], dtype, launched="cumsum")
    _check(lambda x: x.transpose(0, 1).cumsum(dim), [x], dtype)
    if fl:
        _check(lambda x: x.cumsum(dim, dtype=torch.float32), [x], dtype)


def test_cumsum_long_vector(no_fallback):
    # fp32 running sums (the CPU keeps a double): bounded by the prefix's magnitude
    x = torch.randn(3000, generator=torch.Generator().manual_seed(10))
    got = x.to("mtia").cumsum(0).cpu()
    torch.testing.assert_close(got, x.cumsum(0), rtol=0, atol=3000 * 6e-8 * x.abs().max().item())


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.bool])
@pytest.mark.parametrize("k", [-2, 0, 1, 9])
def test_triu_tril(dtype, k, no_fallback):
    fl = dtype.is_floating_point
    x = _rand(2, 5, 7, dtype=dtype) if fl else torch.randint(0, 3, (2, 5, 7)).to(dtype)
    _check(lambda x: x.triu(k), [x], dtype, launched="tri")
    _check(lambda x: x.tril(k), [x], dtype)
    _check(lambda x: x.transpose(1, 2).tril(k), [x], dtype)
    y = x.detach().clone()
    yd = y.to("mtia")
    yd.triu_(k)
    torch.testing.assert_close(yd.cpu(), y.triu(k))


def test_triu_many_dims(no_fallback):
    x = _rand(2, 3, 4, 5)
    _check(lambda x: x.triu(1), [x])
    _check(lambda x: x.permute(1, 0, 2, 3).tril(), [x])


def test_flip(no_fallback):
    x = _rand(3, 4, 5)
    _check(lambda x: x.flip(0, 2), [x], launched="index_gather")


@pytest.mark.parametrize("dtype", FLOATS)
def test_linspace(dtype, no_fallback):
    d = torch.linspace(-1, 3, 17, dtype=dtype, device="mtia")
    torch.testing.assert_close(d.cpu(), torch.linspace(-1, 3, 17, dtype=dtype))


# --- empty tensors, errors, fallback ---------------------------------------------------------


def test_empty_tensors_launch_nothing(no_fallback):
    dev = "mtia"
    w = torch.randn(5, 3, device=dev)
    e = torch.zeros(0, dtype=torch.long, device=dev)
    torch_mtia_emu.reset_kernel_launch_counts()
    assert w.index_select(0, e).shape == (0, 3)
    assert F.embedding(e, w).shape == (0, 3)
    assert w[e].shape == (0, 3)
    assert torch.gather(w, 1, torch.zeros(5, 0, dtype=torch.long, device=dev)).shape == (5, 0)
    z = torch.zeros(0, 4, device=dev)
    assert z.cumsum(1).shape == (0, 4)
    assert z.triu().shape == (0, 4)
    assert z.masked_select(z > 0).shape == (0,)
    assert z.nonzero().shape == (0, 2)
    assert w.index_add(0, e, torch.zeros(0, 3, device=dev)).shape == (5, 3)
    w2 = w.clone()
    w2.index_put_((e,), torch.zeros(0, 3, device=dev), accumulate=True)
    counts = torch_mtia_emu.kernel_launch_counts()
    assert not (set(counts) & INDEX_KERNELS), counts
    out = F.embedding_bag(torch.zeros(0, dtype=torch.long, device=dev), w,
                          torch.tensor([0, 0], device=dev), mode="mean")
    torch.testing.assert_close(out.cpu(), torch.zeros(2, 3))


@pytest.mark.parametrize("case", ["index_select", "embedding", "index", "index_neg", "index_put",
                                  "index_add", "gather", "scatter", "scatter_add", "bag",
                                  "bag_offsets"])
def test_out_of_range_raises_index_error(case):
    dev = "mtia"
    x = torch.randn(5, 4, device=dev)
    bad = torch.tensor([1, 5], device=dev)
    calls = {
        "index_select": lambda: x.index_select(0, bad),
        "embedding": lambda: F.embedding(bad, x),
        "index": lambda: x[bad],
        "index_neg": lambda: x[torch.tensor([-6], device=dev)],
        "index_put": lambda: x.index_put_((bad,), torch.zeros(4, device=dev), accumulate=True),
        "index_add": lambda: x.index_add(0, bad, torch.ones(2, 4, device=dev)),
        "gather": lambda: torch.gather(x, 1, torch.tensor([[0, 4]], device=dev)),
        "scatter": lambda: x.scatter(1, torch.tensor([[4]], device=dev), 1.0),
        "scatter_add": lambda: x.scatter_add(0, torch.tensor([[7]], device=dev),
                                             torch.ones(1, 1, device=dev)),
        "bag": lambda: F.embedding_bag(torch.tensor([0, 5], device=dev), x,
                                       torch.tensor([0], device=dev)),
        "bag_offsets": lambda: F.embedding_bag(torch.tensor([0, 1], device=dev), x,
                                               torch.tensor([0, 3], device=dev),
                                               include_last_offset=True),
    }
    before = x.cpu()
    with pytest.raises(IndexError, match="out of bounds|range|offsets"):
        calls[case]()
        torch.mtia.synchronize()
    # nothing outside the tensors was touched and the device is still usable
    torch.testing.assert_close(x.cpu(), before)
    assert (x + 1).cpu().shape == (5, 4)


def test_bad_arguments_raise():
    dev = "mtia"
    x = torch.randn(5, 4, device=dev)
    with pytest.raises(IndexError):
        x.index_select(0, torch.tensor([0.5], device=dev))
    with pytest.raises(IndexError):
        x.index_select(0, torch.tensor([[0]], device=dev))
    with pytest.raises(RuntimeError, match="boolean"):
        x.masked_fill(torch.ones(5, 4, device=dev), 1.0)
    with pytest.raises(RuntimeError, match="per_sample_weights"):
        F.embedding_bag(torch.tensor([0, 1], device=dev), x, torch.tensor([0], device=dev),
                        mode="max", per_sample_weights=torch.ones(2, device=dev))
    with pytest.raises(RuntimeError, match="dtype"):
        x.index_put_((torch.tensor([0], device=dev),), torch.ones(4, dtype=torch.int32, device=dev))
    with pytest.raises(RuntimeError):
        torch.gather(x, 1, torch.tensor([[0, 1]], device=dev).expand(6, 2))


def test_float64_falls_back_with_reason():
    torch_mtia_emu.reset_fallback_counts()
    x = torch.randn(4, 3, dtype=torch.float64)
    i = torch.tensor([2, 0])
    mode = torch_mtia_emu.get_fallback_mode()
    torch_mtia_emu.set_fallback_mode("silent")
    try:
        r = x.to("mtia").index_select(0, i.to("mtia"))
    finally:
        torch_mtia_emu.set_fallback_mode(mode)
    torch.testing.assert_close(r.cpu(), x.index_select(0, i))
    assert any("Double" in k for k in torch_mtia_emu.fallback_counts())


def test_duplicate_accumulation_is_deterministic(no_fallback):
    w = torch.randn(8, 16, device="mtia")
    idx = torch.randint(0, 8, (300,), generator=torch.Generator().manual_seed(9)).to("mtia")
    src = torch.randn(300, 16).to("mtia")
    a = w.index_add(0, idx, src).cpu()
    b = w.index_add(0, idx, src).cpu()
    assert torch.equal(a, b)
    torch.testing.assert_close(a, w.cpu().index_add(0, idx.cpu(), src.cpu()))


# --- a DLRM-shaped model ------------------------------------------------------------------------


class _DLRM(torch.nn.Module):
    def __init__(self, tables=3, rows=40, dim=8, dense_in=6):
        super().__init__()
        self.emb = torch.nn.ModuleList(
            torch.nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables))
        self.bottom = torch.nn.Sequential(torch.nn.Linear(dense_in, 16), torch.nn.ReLU(),
                                          torch.nn.Linear(16, dim), torch.nn.ReLU())
        n = tables + 1
        self.top = torch.nn.Sequential(torch.nn.Linear(dim + n * (n - 1) // 2, 16),
                                       torch.nn.ReLU(), torch.nn.Linear(16, 1))
        li, lj = torch.tril_indices(n, n, offset=-1)
        self.register_buffer("li", li)
        self.register_buffer("lj", lj)

    def forward(self, dense, indices, offsets):
        x = self.bottom(dense)
        feats = [x] + [e(i, o) for e, i, o in zip(self.emb, indices, offsets)]
        t = torch.stack(feats, dim=1)  # [B, n, dim]
        z = torch.bmm(t, t.transpose(1, 2))  # pairwise dots
        inter = z[:, self.li, self.lj]
        return self.top(torch.cat([x, inter], dim=1)).squeeze(1)


def test_dlrm_training_matches_cpu(no_fallback):
    torch.manual_seed(0)
    cpu = _DLRM()
    dev = _DLRM().to("mtia")
    dev.load_state_dict({k: v.to("mtia") for k, v in cpu.state_dict().items()})
    g = torch.Generator().manual_seed(1)
    B = 16
    batches = []
    for _ in range(3):
        dense = torch.randn(B, 6, generator=g)
        idx, offs = [], []
        for _t in range(3):
            lengths = torch.randint(0, 4, (B,), generator=g)
            offs.append(torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]]))
            idx.append(torch.randint(0, 40, (int(lengths.sum()),), generator=g))
        y = torch.rand(B, generator=g)
        batches.append((dense, idx, offs, y))
    opt_c = torch.optim.SGD(cpu.parameters(), lr=0.1)
    opt_d = torch.optim.SGD(dev.parameters(), lr=0.1)
    for dense, idx, offs, y in batches:
        for model, opt, d in ((cpu, opt_c, "cpu"), (dev, opt_d, "mtia")):
            opt.zero_grad()
            out = model(dense.to(d), [i.to(d) for i in idx], [o.to(d) for o in offs])
            loss = F.mse_loss(out, y.to(d))
            loss.backward()
            opt.step()
            if d == "cpu":
                lc = loss.item()
            else:
                ld = loss.item()
        assert abs(lc - ld) <= 1e-4 * max(1.0, abs(lc)), (lc, ld)
    for (name, p), q in zip(cpu.named_parameters(), dev.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-4, atol=1e-5, msg=name)
