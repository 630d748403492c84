"""Conjugate and negative views, and the complex <-> real views, on the device.

torch.fft and Tensor.conj() give views whose conjugate or negative bit is set. Copying one
between the host and the device once recursed without end inside PyTorch's generic handling of
those bits and killed the process; these tests run such copies in a child interpreter first,
so a crash shows up as that test's failure, then check the values against the CPU.
"""
import pytest
import torch

from conftest import DEVICE, run_child

# The ffts as source text, so that a child interpreter can run the very same calls.
FFT_SOURCES = {
    "ifft": "lambda t: torch.fft.ifft(t)",
    "hfft": "lambda t: torch.fft.hfft(t)",
    "hfft2": "lambda t: torch.fft.hfft2(t.reshape(4, 6))",
    "hfftn": "lambda t: torch.fft.hfftn(t.reshape(2, 3, 4))",
    "ihfft": "lambda t: torch.fft.ihfft(t.real)",
    "ihfft2": "lambda t: torch.fft.ihfft2(t.real.reshape(4, 6))",
    "ihfftn": "lambda t: torch.fft.ihfftn(t.real.reshape(2, 3, 4))",
}
FFTS = {name: eval(source) for name, source in FFT_SOURCES.items()}


def _values(t):
    return t.cpu().resolve_conj().resolve_neg()


@pytest.mark.parametrize("name", sorted(FFTS))
def test_ffts_that_make_conjugate_views_do_not_crash(name):
    r = run_child(f"""
        import warnings, torch
        warnings.simplefilter("ignore")
        x = torch.arange(24, dtype=torch.float32).to(torch.complex64) / 7
        print(*({FFT_SOURCES[name]})(x.to("mtia")).cpu().shape)
    """)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-2000:]}"
    x = torch.arange(24, dtype=torch.float32).to(torch.complex64) / 7
    assert [int(n) for n in r.stdout.split()] == list(FFTS[name](x).shape)


@pytest.mark.parametrize("name", sorted(FFTS))
def test_ffts_match_the_cpu(name):
    x = torch.randn(24, dtype=torch.complex64, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(_values(FFTS[name](x.to(DEVICE))), _values(FFTS[name](x)),
                               rtol=1e-5, atol=1e-5)


def test_copies_of_conjugate_and_negative_views():
    x = torch.randn(5, 3, dtype=torch.complex64, generator=torch.Generator().manual_seed(2))
    d = x.to(DEVICE)
    assert d.conj().is_conj()
    assert torch.equal(d.conj().cpu().resolve_conj(), x.conj().resolve_conj())  # device -> host
    assert torch.equal(torch._neg_view(d).cpu().resolve_neg(), -x)
    into_conj = torch.empty(5, 3, dtype=torch.complex64, device=DEVICE)
    into_conj.conj().copy_(x)  # host -> a conjugate view on the device
    assert torch.equal(into_conj.cpu(), x.conj().resolve_conj())
    on_device = torch.empty(5, 3, dtype=torch.complex64, device=DEVICE)
    on_device.copy_(d.t().conj().t())  # device -> device, strided and conjugated
    assert torch.equal(on_device.cpu(), x.conj().resolve_conj())
    host = torch.empty(3, 5, dtype=torch.complex64)
    host.conj().copy_(d.t())  # device -> a conjugate view on the host
    assert torch.equal(host, x.t().conj().resolve_conj())
    assert torch.equal((d.conj() + 1).cpu(), x.conj() + 1)


def test_view_as_real_and_complex_alias_device_memory():
    x = torch.randn(4, 2, generator=torch.Generator().manual_seed(3))
    d = x.to(DEVICE)
    c = torch.view_as_complex(d)
    assert c.dtype == torch.complex64 and c.shape == (4,)
    r = torch.view_as_real(c)
    assert r.data_ptr() == d.data_ptr() and torch.equal(r.cpu(), x)
    r[0, 1] = 5.0
    assert c.cpu()[0].imag == 5.0
