"""Empty tensors (numel 0, a zero-size dimension) pass through every kind of device op without
launching a kernel, and give the CPU's shapes, dtypes and (for reductions over nothing) values."""
import pytest
import torch
import torch.nn.functional as F
import torch_mtia_emu

from conftest import DEVICE

E = torch.empty(3, 0, 4)


def _cases():
    w = torch.randn(5, 4)
    return {
        "exp": lambda t: torch.exp(t),
        "sin": lambda t: torch.sin(t),
        "add": lambda t: t + t,
        "mul scalar": lambda t: t * 2.5,
        "pow": lambda t: t ** 3,
        "where": lambda t: torch.where(t > 0, t, -t),
        "clamp": lambda t: t.clamp(-1, 1),
        "gelu": F.gelu,
        "softmax": lambda t: torch.softmax(t, -1),
        "layer_norm": lambda t: F.layer_norm(t, (4,)),
        "matmul": lambda t: t @ w.to(t.device).t(),
        "cumsum": lambda t: torch.cumsum(t, 1),
        "index_select": lambda t: t.index_select(1, torch.empty(0, dtype=torch.long,
                                                                device=t.device)),
        "flip": lambda t: torch.flip(t, [2]),
        "tril": lambda t: torch.tril(t),
        "cast": lambda t: t.half(),
        "copy": lambda t: t.transpose(0, 2).contiguous(),
        "roll": lambda t: torch.roll(t, 1, 2),
    }


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_empty_input_launches_nothing(name, no_fallback):
    fn = CASES[name]
    want = fn(E)
    torch_mtia_emu.reset_kernel_launch_counts()
    got = fn(E.to(DEVICE))
    assert torch_mtia_emu.kernel_launch_counts() == {}, name
    assert got.shape == want.shape and got.dtype == want.dtype


REDUCTIONS = {
    "sum": lambda t: t.sum(1),
    "mean": lambda t: t.mean(1),
    "amax over kept": lambda t: t.amax(2),
    "norm": lambda t: torch.linalg.vector_norm(t, dim=1),
    "nansum": lambda t: torch.nansum(t, 1),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions_over_nothing_match_the_cpu(name, no_fallback):
    fn = REDUCTIONS[name]
    want = fn(E)
    got = fn(E.to(DEVICE)).cpu()
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, equal_nan=True)  # 0 for sums, NaN for the mean


def test_empty_batch_through_modules(no_fallback):
    x = torch.empty(0, 3, 8, 8)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    lin = torch.nn.Linear(8, 2)
    dconv, dlin = torch.nn.Conv2d(3, 4, 3, padding=1).to(DEVICE), torch.nn.Linear(8, 2).to(DEVICE)
    dconv.load_state_dict(conv.state_dict())
    dlin.load_state_dict(lin.state_dict())
    torch_mtia_emu.reset_kernel_launch_counts()
    got = dlin(dconv(x.to(DEVICE)))
    assert got.shape == lin(conv(x)).shape
    assert "im2col" not in torch_mtia_emu.kernel_launch_counts()
