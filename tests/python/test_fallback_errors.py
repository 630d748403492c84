"""The CPU fallback (on, counted, warned once; off: an error naming the op) and the errors
that reach Python: out of memory, a kernel fault, an unsupported dtype."""
import warnings

import pytest
import torch
import torch_mtia_emu

from conftest import DEVICE, run_child


@pytest.fixture(autouse=True)
def restore_mode():
    mode = torch_mtia_emu.get_fallback_mode()
    torch_mtia_emu.reset_fallback_counts()
    yield
    torch_mtia_emu.set_fallback_mode(mode)


def test_op_without_kernel_runs_on_cpu_counts_and_warns_once():
    torch_mtia_emu.set_fallback_mode("warn")
    x = torch.tensor([[0.5, -1.5, 2.25], [3.0, -0.25, 1.0]])
    d = x.to(DEVICE)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        a = torch.digamma(d)
        b = torch.digamma(d)
    assert a.device == DEVICE and torch.equal(a.cpu(), torch.digamma(x)) and torch.equal(b.cpu(), a.cpu())
    msgs = [str(m.message) for m in w if "digamma" in str(m.message)]
    assert len(msgs) == 1 and "runs on the CPU" in msgs[0]
    assert torch_mtia_emu.fallback_counts() == {"aten::digamma.out": 2}


def test_fallback_keeps_in_place_and_out_semantics():
    torch_mtia_emu.set_fallback_mode("silent")
    x = torch.tensor([1.2, -3.7, 4.5, -0.1])
    d = x.to(DEVICE)
    view = d[1:3]
    r = view.digamma_()                     # in place through a view
    assert r is view
    want = x.clone()
    want[1:3].digamma_()
    assert torch.equal(d.cpu(), want)
    out = torch.empty(0, device=DEVICE)
    torch.remainder(d, 1.0, out=out)        # out= is resized and written on the device
    torch.testing.assert_close(out.cpu(), torch.remainder(d.cpu(), 1.0))
    vals, idx = torch.mode(d)               # several results, all moved to the device
    assert vals.device == DEVICE and idx.device == DEVICE
    assert torch.equal(idx.cpu(), torch.mode(d.cpu())[1])
    assert torch.equal(torch.nonzero(d > 0).cpu(), torch.nonzero(d.cpu() > 0))
    assert torch.equal(torch.randperm(5, generator=torch.Generator().manual_seed(0),
                                      device=DEVICE).cpu(),
                       torch.randperm(5, generator=torch.Generator().manual_seed(0)))
    assert torch_mtia_emu.fallback_counts()["aten::digamma.out"] == 1  # digamma_ goes through digamma.out


def test_fallback_for_a_dtype_the_kernels_lack():
    torch_mtia_emu.set_fallback_mode("silent")
    x = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    got = (x.to(DEVICE) * 2.5 + 1).cpu()
    assert got.dtype == torch.float64 and torch.equal(got, x * 2.5 + 1)
    counts = torch_mtia_emu.fallback_counts()
    assert counts["aten::mul.out (dtype Double)"] == 1
    assert counts["aten::add.out (dtype Double)"] == 1


def test_error_mode_names_the_op():
    torch_mtia_emu.set_fallback_mode("error")
    d = torch.randn(3, 4, device=DEVICE)
    with pytest.raises(NotImplementedError, match="aten::cumprod.out.*no device kernel"):
        torch.cumprod(d, 1)
    # Ops with kernels still run.
    assert torch.softmax(d, 1).sum().item() == pytest.approx(3.0, rel=1e-5)
    assert torch_mtia_emu.fallback_counts() == {}


def test_unsupported_dtype_is_a_clear_error_in_error_mode():
    torch_mtia_emu.set_fallback_mode("error")
    d = torch.ones(4, dtype=torch.float64, device=DEVICE)  # storage and copies: any dtype
    assert d.cpu().sum().item() == 4.0
    with pytest.raises(RuntimeError, match=r"aten::add.out.*dtype Double is not supported by "
                                           r"the device kernels.*float32, float16, bfloat16"):
        d + 1
    with pytest.raises(RuntimeError, match="aten::mm.out.*dtype Long"):
        torch.ones(2, 2, dtype=torch.long, device=DEVICE) @ torch.ones(2, 2, dtype=torch.long,
                                                                        device=DEVICE)


def test_environment_variable_turns_fallback_into_an_error():
    r = run_child("""
        import torch, torch_mtia_emu
        print(torch_mtia_emu.get_fallback_mode())
        try:
            torch.digamma(torch.ones(2, device="mtia"))
        except NotImplementedError as e:
            print("refused:", e)
    """, env={"MTIA_EMU_FALLBACK": "error"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("error\nrefused: torch_mtia_emu: aten::digamma.out has no device")
    bad = run_child("import torch_mtia_emu", env={"MTIA_EMU_FALLBACK": "sometimes"})
    assert bad.returncode != 0 and "is not one of warn, silent, error" in bad.stderr


def test_printing_does_not_count_as_fallback():
    torch_mtia_emu.set_fallback_mode("error")
    text = repr(torch.tensor([1.5, -2.0, 3.25]).to(DEVICE))
    assert "device='mtia:0'" in text and "1.5000" in text
    assert torch_mtia_emu.fallback_counts() == {}


def test_view_ops_never_fall_back():
    torch_mtia_emu.set_fallback_mode("silent")
    d = torch.randn(4, 2, device=DEVICE)
    # A view op the device has no kernel for (every strided view has one): its result must
    # alias device memory, which a CPU copy cannot.
    with pytest.raises(RuntimeError, match="aten::_indices is a view op without a device"):
        torch.ops.aten._indices(d)


def test_kernel_fault_names_the_kernel_and_the_reason():
    x = torch.zeros(16, device=DEVICE)
    torch.mtia.synchronize()
    # The fill kernel told to write far outside device memory: the PE's DMA faults.
    bad = ("ptr", 1 << 45)
    torch_mtia_emu.launch_kernel("fill", [bad, torch.float32, 0, 1, 1, 1, 16, 0, 0, 0, 1])
    with pytest.raises(RuntimeError) as e:
        torch.mtia.synchronize()
    msg = str(e.value)
    assert "kernel 'fill'" in msg and "device address fault" in msg
    # The error was reported once; the device keeps working.
    torch.mtia.synchronize()
    assert (x + 2).sum().item() == 32.0


def test_kernel_argument_checks_are_errors_before_launch():
    with pytest.raises(RuntimeError, match="fill"):
        torch_mtia_emu.launch_kernel("fill", [1, 2])
    with pytest.raises(RuntimeError, match="no_such_kernel"):
        torch_mtia_emu.launch_kernel("no_such_kernel", [])


def test_cpu_tensor_mixed_with_device_tensor_is_an_error():
    with pytest.raises(RuntimeError, match="same device|mtia"):
        torch.ones(3, device=DEVICE) + torch.ones(3)


def test_std_terminate_reports_the_native_stack():
    """A C++ abort (std::terminate: a joinable thread destroyed, an exception out of a noexcept
    function) writes the native stack to stderr before the process ends, so the report says
    where it happened."""
    r = run_child("""
        import ctypes
        import torch_mtia_emu
        ctypes.CDLL("libstdc++.so.6")._ZSt9terminatev()  # std::terminate()
    """)
    assert r.returncode == -6, r.stderr[-2000:]
    assert "torch_mtia_emu: std::terminate called; native stack:" in r.stderr
    assert "libstdc++" in r.stderr  # the frames, named by their objects
    assert "terminate called without an active exception" in r.stderr  # the previous handler ran
