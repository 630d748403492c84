"""PyTorch's torch.mtia on the emulator: devices, properties, streams, events, the device guard,
and what torch_mtia_emu adds (init, traces)."""
import pytest
import torch
import torch_mtia_emu

from conftest import DEVICE, run_child


def test_device_queries():
    assert torch.mtia.is_available()
    assert torch.mtia.device_count() == 1
    assert torch.mtia.current_device() == 0
    torch.mtia.set_device(0)
    torch.mtia.set_device("mtia:0")
    with torch.mtia.device(0):
        assert torch.zeros(2, device="mtia").device == DEVICE
    for bad in (1, "mtia:1"):
        with pytest.raises(RuntimeError, match="device index 1 does not exist"):
            torch.mtia.set_device(bad)
    with pytest.raises(ValueError):
        torch.mtia.set_device(torch.device("cpu"))
    assert torch.device(torch_mtia_emu.DEVICE_TYPE) == torch.device("mtia")


def test_device_properties_describe_the_preset():
    torch.zeros(1, device=DEVICE)
    assert torch_mtia_emu.is_initialized()
    p = torch.mtia.get_device_properties()
    assert p["name"] == "mtia-v2" and p["generation"] == 2
    assert p["total_memory"] == 128 << 30
    assert (p["pe_rows"], p["pe_cols"]) == (8, 8) and p["multi_processor_count"] == 64
    assert p["max_kernel_buffers"] == 32 and p["timing"] is False  # conftest: timing off
    assert torch.mtia.get_device_capability() == (2, 0)
    assert torch.mtia.get_device_capability("mtia:0") == (2, 0)
    assert "matmul" in torch_mtia_emu.kernel_names()


def test_init_after_first_use_is_refused():
    torch.zeros(1, device=DEVICE)
    with pytest.raises(RuntimeError, match="already open"):
        torch_mtia_emu.init(preset="mtia-v1")


def test_init_chooses_the_preset_in_a_new_process():
    r = run_child("""
        import torch, torch_mtia_emu
        torch_mtia_emu.init(preset="mtia-v1", timing=True)
        p = torch.mtia.get_device_properties()
        print(p["name"], p["generation"], p["timing"], torch.mtia.get_device_capability())
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["mtia-v1", "1", "True", "(1,", "0)"]


def test_streams_run_work_in_order_and_events_order_streams():
    s1, s2 = torch.mtia.Stream(), torch.mtia.Stream()
    assert s1 != s2 and torch.mtia.default_stream().stream_id == 0
    assert torch.mtia.current_stream() == torch.mtia.default_stream()
    x = torch.randn(256, 256).to(DEVICE)
    with torch.mtia.stream(s1):
        assert torch.mtia.current_stream() == s1
        y = x @ x
        done = s1.record_event()
    assert torch.mtia.current_stream().stream_id == 0
    s2.wait_event(done)
    with torch.mtia.stream(s2):
        z = y + 1
    s2.synchronize()
    assert s2.query() and done.query()
    torch.testing.assert_close(z.cpu(), x.cpu() @ x.cpu() + 1, rtol=1e-4, atol=1e-4)
    s1.wait_stream(s2)
    s1.synchronize()


def test_record_stream_delays_reuse_until_the_stream_is_done():
    s = torch.mtia.Stream()
    assert isinstance(s, torch.Stream) and s.device == DEVICE
    x = torch.ones(100, device=DEVICE)  # filled on the default stream
    s.wait_stream(torch.mtia.current_stream())  # as with CUDA: order the streams
    with torch.mtia.stream(s):
        x.record_stream(s)
        y = x * 3
    del x  # its block is reused only after s has passed its uses
    torch.mtia.current_stream().wait_stream(s)
    assert y.sum().item() == 300.0


def test_event_elapsed_time_is_simulated_time_with_timing_on():
    r = run_child("""
        import torch, torch_mtia_emu
        d = torch.device("mtia")
        a = torch.randn(512, 512).to(d)
        start = torch.mtia.Event(enable_timing=True)
        end = torch.mtia.Event(enable_timing=True)
        start.record()
        b = a @ a
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end)
        t0 = torch_mtia_emu.simulated_time_ns()
        print(ms > 0, ms < 1000, t0 > 0)
    """, env={"MTIA_EMU_TIMING": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True", "True"]


def test_events_report_zero_time_with_timing_off():
    start, end = torch.mtia.Event(enable_timing=True), torch.mtia.Event(enable_timing=True)
    start.record()
    torch.ones(1000, device=DEVICE).sum()
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) == 0.0
    with pytest.raises(ValueError, match="recorded"):
        torch.mtia.Event(enable_timing=True).elapsed_time(end)


def test_autograd_runs_backward_on_the_device_guard_streams():
    # The autograd engine runs device backward passes on its own thread, through the guard.
    x = torch.randn(8, 8).to(DEVICE).requires_grad_()
    (x * x).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), 2 * x.detach().cpu())


def test_write_artifacts_gives_a_trace(tmp_path):
    r = run_child(f"""
        import json, torch, torch_mtia_emu
        x = torch.randn(64, 64).to("mtia")
        (x @ x + 1).sum().item()
        torch_mtia_emu.write_artifacts({str(tmp_path)!r})
        trace = json.load(open({str(tmp_path / "trace.json")!r}))
        names = {{e.get("name", "") for e in trace["traceEvents"]}}
        print(any("matmul" in n for n in names))
    """, env={"MTIA_EMU_TIMING": "1", "MTIA_EMU_TRACE": "kernels"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"
    assert (tmp_path / "config.json").exists()
