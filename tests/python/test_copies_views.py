"""Copies between the host and the device and on the device, views, and in-place ops.

Copies must preserve arbitrary layouts: the property tests build random views (sliced with
steps and storage offsets, permuted, expanded on the read side) of random dtypes on both
sides, copy with and without dtype conversion, and check every element against the CPU -
and that the bytes around the written view stay untouched.
"""
import pytest
import torch
import torch_mtia_emu
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import DEVICE

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int32, torch.int64,
          torch.bool, torch.float64, torch.uint8, torch.int16, torch.complex64]


def _values(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        return torch.complex(torch.randn(shape, generator=g), torch.randn(shape, generator=g))
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 8).to(dtype)
    lo, hi = (0, 100) if dtype == torch.uint8 else (-100, 100)
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


@st.composite
def view_specs(draw, allow_expand=False):
    """A view of a bigger base tensor: per dimension a start, a step and a length, then a
    permutation of the dimensions and, on a read side, expanded size-1 dimensions."""
    rank = draw(st.integers(1, 4))
    dims = []
    for _ in range(rank):
        length = draw(st.integers(0 if rank == 1 else 1, 5))
        dims.append((draw(st.integers(0, 2)), draw(st.integers(1, 3)), length))
    perm = draw(st.permutations(range(rank)))
    expand = [draw(st.integers(1, 3)) if allow_expand and draw(st.booleans()) else 0
              for _ in range(rank)]
    return dims, perm, expand


def make_view(base, spec):
    dims, perm, expand = spec
    v = base
    for d, (start, step, length) in enumerate(dims):
        v = v.narrow(d, start, (length - 1) * step + 1 if length else 0)[
            (slice(None),) * d + (slice(None, None, step),)]
    v = v.permute(*perm)
    for d, e in enumerate(expand):
        if e and v.shape[d] == 1:
            shape = list(v.shape)
            shape[d] = e
            v = v.expand(*shape)
    return v


def base_shape(spec):
    dims, _, _ = spec
    return [start + (length - 1) * step + 1 + 1 if length else start + 1
            for start, step, length in dims]


def matching_dst_spec(src_view, spec):
    """A destination spec with the source view's shape, laid out differently."""
    shape = list(src_view.shape)
    rank = len(shape)
    dims = [(1, 2, n) for n in shape]
    return dims, list(reversed(range(rank))), [0] * rank


def _reorder(spec):
    # The reversed permutation above needs the dims in permuted order.
    dims, perm, expand = spec
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return [dims[inv[i]] for i in range(len(dims))], perm, expand


def check_copy(src_dev: bool, dst_dev: bool, spec, src_dtype, dst_dtype, seed):
    src_base = _values(base_shape(spec), src_dtype, seed)
    if src_dev:
        src_base = src_base.to(DEVICE)
    src = make_view(src_base, spec)
    dspec = _reorder(matching_dst_spec(src, spec))
    dst_base_cpu = _values(base_shape(dspec), dst_dtype, seed + 1)
    dst_base = dst_base_cpu.to(DEVICE) if dst_dev else dst_base_cpu.clone()
    dst = make_view(dst_base, dspec)
    assert dst.shape == src.shape

    dst.copy_(src)

    expected_base = dst_base_cpu.clone()
    make_view(expected_base, dspec).copy_(src.cpu())
    torch.testing.assert_close(dst_base.cpu(), expected_base, rtol=0, atol=0, equal_nan=True)


settings.register_profile("mtia", deadline=None, max_examples=120, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("mtia")


@given(spec=view_specs(allow_expand=True), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 2**16))
def test_host_to_device_copies_keep_layout(spec, dtype, seed):
    check_copy(False, True, spec, dtype, dtype, seed)


@given(spec=view_specs(allow_expand=True), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 2**16))
def test_device_to_host_copies_keep_layout(spec, dtype, seed):
    check_copy(True, False, spec, dtype, dtype, seed)


@given(spec=view_specs(allow_expand=True), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 2**16))
def test_device_to_device_copies_keep_layout(spec, dtype, seed):
    check_copy(True, True, spec, dtype, dtype, seed)


REAL = [d for d in DTYPES if not d.is_complex]


@given(spec=view_specs(), src=st.sampled_from(REAL), dst=st.sampled_from(REAL),
       direction=st.sampled_from(["h2d", "d2h", "d2d"]), seed=st.integers(0, 2**16))
def test_copies_convert_dtypes_like_the_cpu(spec, src, dst, direction, seed):
    check_copy(direction != "h2d", direction != "d2h", spec, src, dst, seed)


def test_to_device_preserves_strides_and_offsets(dev):
    base = torch.arange(60.).reshape(5, 12)
    for view in (base.t(), base[1:, 3:9], base[::2, ::3], base.unsqueeze(0).expand(2, 5, 12)):
        d = view.to(dev)
        assert torch.equal(d.cpu(), view)
    # A dense (here transposed) tensor keeps its strides on the device.
    t = base.t().to(dev)
    assert t.stride() == (1, 12) and not t.is_contiguous()


def test_pinned_memory_and_non_blocking(dev):
    x = torch.randn(64, 33)
    pinned = x.pin_memory(dev)
    assert pinned.is_pinned(dev) and not x.is_pinned(dev)
    assert torch.mtia.memory_stats()["dram"]["pinned_host_bytes"] >= x.numel() * 4
    d = pinned.to(dev, non_blocking=True)
    back = torch.empty_like(x).pin_memory(dev)
    back.copy_(d * 2, non_blocking=True)
    torch.mtia.synchronize()
    assert torch.equal(back, x * 2)
    # Pageable memory with non_blocking: staged, so the source may change at once.
    y = torch.randn(100)
    d2 = y.to(dev, non_blocking=True)
    expected = y.clone()
    y.zero_()
    assert torch.equal(d2.cpu(), expected)


@pytest.mark.parametrize("dtype", DTYPES)
def test_item_reads_one_element(dev, dtype):
    x = _values((3, 4), dtype, 7)
    d = x.to(dev)
    assert d[2, 1].item() == x[2, 1].item()
    assert d.t()[3, 0].item() == x[0, 3].item()


def test_views_are_metadata_only(dev, no_fallback):
    base = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)
    d = base.to(dev)
    ptr, es = d.data_ptr(), d.element_size()
    views = {
        "view": (d.view(6, 4), base.view(6, 4)),
        "reshape": (d.reshape(4, 6), base.reshape(4, 6)),
        "transpose": (d.transpose(0, 2), base.transpose(0, 2)),
        "permute": (d.permute(2, 0, 1), base.permute(2, 0, 1)),
        "select": (d.select(1, 2), base.select(1, 2)),
        "slice": (d[:, 1:, ::2], base[:, 1:, ::2]),
        "narrow": (d.narrow(2, 1, 2), base.narrow(2, 1, 2)),
        "expand": (d[:, :1].expand(2, 5, 4), base[:, :1].expand(2, 5, 4)),
        "as_strided": (d.as_strided((3, 3), (5, 2), 1), base.as_strided((3, 3), (5, 2), 1)),
        "unfold": (d.view(-1).unfold(0, 5, 3), base.view(-1).unfold(0, 5, 3)),
        "unsqueeze": (d.unsqueeze(1), base.unsqueeze(1)),
        "flatten": (d[0].flatten(), base[0].flatten()),
        "t": (d[1].t(), base[1].t()),
    }
    for name, (dv, cv) in views.items():
        assert dv.shape == cv.shape and dv.stride() == cv.stride(), name
        assert dv.data_ptr() - ptr == cv.storage_offset() * es, name
        assert torch.equal(dv.cpu(), cv), name
    # A write through a view lands in the base.
    d.transpose(0, 2)[1, 2, 0] = 100.0
    d.view(-1)[5] = -1.0
    expected = base.clone()
    expected.transpose(0, 2)[1, 2, 0] = 100.0
    expected.view(-1)[5] = -1.0
    assert torch.equal(d.cpu(), expected)


def test_in_place_ops_on_views(dev, no_fallback):
    base = torch.randn(6, 8, generator=torch.Generator().manual_seed(2))
    d = base.to(dev)
    c = base.clone()
    for t in (d, c):
        t[1:5, ::2].mul_(3.0)
        t.t()[2:4].add_(torch.ones(6, device=t.device), alpha=-2)
        t[:, 3].clamp_(-0.5, 0.5)
        t[::3].relu_()
        t[4].zero_()
        t[:, 7].fill_(2.5)
        t[0].addcmul_(t[1], t[2], value=0.5)
    torch.testing.assert_close(d.cpu(), c)


def test_out_variants_resize_and_keep_strides(dev, no_fallback):
    a = torch.randn(4, 5).to(dev)
    b = torch.randn(4, 5).to(dev)
    out = torch.empty(0, device=dev)
    torch.add(a, b, out=out)
    assert out.shape == (4, 5)
    torch.testing.assert_close(out.cpu(), a.cpu() + b.cpu())
    out_t = torch.empty(5, 4, device=dev).t()
    torch.mul(a, b, out=out_t)
    assert out_t.stride() == (1, 4)
    torch.testing.assert_close(out_t.cpu(), a.cpu() * b.cpu())
    s = torch.empty(0, device=dev)
    torch.sum(a, 1, out=s)
    torch.testing.assert_close(s.cpu(), a.cpu().sum(1))


def test_cat_and_arange_on_device(dev, no_fallback):
    parts = [torch.randn(2, 3), torch.randn(4, 3).t().contiguous().t(), torch.randn(1, 3)]
    got = torch.cat([p.to(dev) for p in parts], 0)
    assert torch.equal(got.cpu(), torch.cat(parts, 0))
    mixed = torch.cat([parts[0].to(dev), parts[2].to(dev).half()], 0)
    assert mixed.dtype == torch.float32
    assert torch.equal(torch.arange(3, 20, 4, device=dev).cpu(), torch.arange(3, 20, 4))
    assert torch.equal(torch.arange(0, 1, 0.125, device=dev).cpu(), torch.arange(0, 1, 0.125))


def test_random_numbers_follow_the_device_seed(dev):
    torch.mtia.manual_seed(1234)
    a = torch.rand(5, 7, device=dev).cpu()
    b = torch.randn(100, device=dev).cpu()
    torch.mtia.manual_seed(1234)
    assert torch.equal(torch.rand(5, 7, device=dev).cpu(), a)
    torch.manual_seed(1234)
    # Same generator algorithm as the CPU's: same numbers after the same seed.
    assert torch.equal(torch.rand(5, 7), a)
    assert torch.equal(torch.randn(100), b)
    assert torch.mtia.initial_seed() == 1234
    state = torch.mtia.get_rng_state()
    c = torch.empty(50, device=dev).uniform_(-2, 2).cpu()
    torch.mtia.set_rng_state(state)
    assert torch.equal(torch.empty(50, device=dev).uniform_(-2, 2).cpu(), c)
    n = torch.empty(10000, device=dev).normal_(3.0, 0.5).cpu()
    assert abs(n.mean().item() - 3.0) < 0.05 and abs(n.std().item() - 0.5) < 0.05
    r = torch.randint(0, 10, (1000,), device=dev).cpu()
    assert r.min() >= 0 and r.max() <= 9
