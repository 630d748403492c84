"""PyTorch's own torch.mtia, torch.accelerator and device-module API, driven by the emulator.

What a backend's code expects of an MTIA device: a plain `import torch` finds it, streams and
devices behave as context managers, torch.get_device_module and torch.accelerator reach it,
generators and RNG states work, and what the emulator does not do yet says so clearly.
"""
import gc
import pathlib

import pytest
import torch
import torch_mtia_emu

from conftest import DEVICE, run_child


def test_plain_import_torch_loads_the_emulator():
    r = run_child("""
        import sys, torch
        print(torch.mtia.is_available(), "torch_mtia_emu" in sys.modules)
        print(torch.randn(3, device="mtia").device, torch.mtia.device_count())
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True", "mtia:0", "1"]


def test_importing_the_package_first_also_works():
    r = run_child("""
        import torch_mtia_emu, torch
        print(torch.mtia.is_available(), torch.ones(2, device="mtia").sum().item())
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "2.0"]


def test_autoload_can_be_turned_off():
    # PyTorch's switch: without the extension there is no MTIA device behind torch.mtia.
    r = run_child("""
        import sys, torch
        print(torch.mtia.is_available(), "torch_mtia_emu" in sys.modules)
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]


def test_the_package_reads_settings_through_the_emulators_table(monkeypatch):
    from torch_mtia_emu import _C
    monkeypatch.setenv("MTIA_EMU_MAX_PES", "3")
    assert _C._setting("MTIA_EMU_MAX_PES") == "3"
    monkeypatch.setenv("MTIA_EMU_MAX_PES", "")
    assert _C._setting("MTIA_EMU_MAX_PES") is None  # empty is unset
    with pytest.raises(ValueError, match="MTIA_EMU_NO_SUCH is not a setting"):
        _C._setting("MTIA_EMU_NO_SUCH")
    # The package's presets() follows MTIA_EMU_PRESET_DIR through it.
    monkeypatch.setenv("MTIA_EMU_PRESET_DIR", str(pathlib.Path(__file__).parent / "no-such-dir"))
    with pytest.raises(FileNotFoundError):
        torch_mtia_emu.presets()


def test_get_device_module_is_torch_mtia():
    assert torch.get_device_module("mtia") is torch.mtia
    assert torch.get_device_module(torch.device("mtia:0")) is torch.mtia
    assert torch.get_device_module(DEVICE).current_device() == 0


def test_torch_accelerator_is_the_emulated_device():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("mtia")
    assert torch.accelerator.device_count() == 1
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(0)
    s = torch.mtia.Stream()
    torch.accelerator.set_stream(s)
    assert torch.accelerator.current_stream() == s == torch.mtia.current_stream()
    torch.accelerator.set_stream(torch.mtia.default_stream())
    # Device tensors of earlier tests caught in reference cycles go now: a collection between
    # the two statistics reads below would free one and make them differ.
    gc.collect()
    x = torch.full((1000,), 2.0, device=DEVICE)
    torch.accelerator.synchronize()
    assert torch.accelerator.memory_allocated() == torch.mtia.memory_allocated() > 0
    stats = torch.accelerator.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.mtia.memory_stats()["dram"][
        "allocated_bytes"]
    free, total = torch.accelerator.get_memory_info()
    assert total == torch.mtia.get_device_properties()["total_memory"] and 0 < free < total
    del x


def test_stream_contexts_nest_and_restore():
    default = torch.mtia.default_stream()
    s1, s2 = torch.mtia.Stream(), torch.Stream(device="mtia")
    assert len({default.stream_id, s1.stream_id, s2.stream_id}) == 3
    assert s1.device == s2.device == DEVICE
    with torch.mtia.stream(s1):
        assert torch.mtia.current_stream() == s1
        with torch.mtia.stream(s2):
            assert torch.mtia.current_stream() == s2
        assert torch.mtia.current_stream() == s1
        with torch.mtia.stream(None):  # no-op
            assert torch.mtia.current_stream() == s1
    assert torch.mtia.current_stream() == default
    with pytest.raises(KeyError):
        with torch.mtia.stream(s1):
            raise KeyError("leaves the context")
    assert torch.mtia.current_stream() == default
    with s2:  # torch.Stream is a context manager too
        assert torch.mtia.current_stream() == s2
    assert torch.mtia.current_stream() == default
    torch.mtia.set_stream(s1)
    assert torch.mtia.current_stream() == s1
    torch.mtia.set_stream(default)


def test_work_queued_in_a_stream_context_runs_on_that_stream():
    s = torch.mtia.Stream()
    a = torch.randn(64, 64).to(DEVICE)
    torch.mtia.synchronize()
    with torch.mtia.stream(s):
        b = (a @ a).relu()
        e = torch.mtia.Event()
        e.record()
    torch.mtia.current_stream().wait_event(e)
    e.synchronize()
    assert e.query() and s.query()
    torch.testing.assert_close(b.cpu(), (a.cpu() @ a.cpu()).relu(), rtol=1e-4, atol=1e-4)


def test_device_contexts():
    with torch.mtia.device(0):
        assert torch.mtia.current_device() == 0
        assert torch.ones(1, device="mtia").device == DEVICE
    with torch.mtia.device("mtia:0"), torch.mtia.device(DEVICE):
        assert torch.mtia.current_device() == 0
    with torch.mtia.device(-1):  # no-op
        assert torch.mtia.current_device() == 0
    with pytest.raises(RuntimeError, match="device index 1 does not exist"):
        with torch.mtia.device(1):
            pass
    with pytest.raises(RuntimeError, match="device index 3 does not exist"):
        torch.ones(1, device="mtia:3")


def test_device_information():
    torch.ones(1, device=DEVICE)
    p = torch.mtia.get_device_properties(DEVICE)
    assert p == torch.mtia.get_device_properties(0)
    assert torch.mtia.get_device_capability() == (p["major"], p["minor"]) == (2, 0)
    assert torch.mtia.is_bf16_supported()
    assert torch.mtia.is_initialized()


def test_generators_draw_the_cpu_numbers_for_a_seed():
    g = torch.Generator(device="mtia")
    assert g.device == DEVICE
    g.manual_seed(11)
    got = torch.randn(50, generator=g, device=DEVICE).cpu()
    want = torch.randn(50, generator=torch.Generator().manual_seed(11))
    assert torch.equal(got, want)
    torch.mtia.manual_seed(5)
    assert torch.mtia.initial_seed() == 5
    a = torch.rand(7, device=DEVICE).cpu()
    torch.manual_seed(5)
    assert torch.equal(a, torch.rand(7))
    # A CPU generator may draw for the device too, as it did before mtia generators existed.
    x = torch.empty(50, device=DEVICE).normal_(generator=torch.Generator().manual_seed(11))
    assert torch.equal(x.cpu(), want)


def test_rng_state_restores_the_sequence():
    torch.mtia.manual_seed_all(3)
    state = torch.mtia.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    first = torch.randn(20, device=DEVICE).cpu()
    torch.mtia.set_rng_state(state)
    assert torch.equal(torch.randn(20, device=DEVICE).cpu(), first)
    states = torch.mtia.get_rng_state_all()
    assert len(states) == 1
    second = torch.randn(20, device=DEVICE).cpu()
    torch.mtia.set_rng_state_all(states)
    assert torch.equal(torch.randn(20, device=DEVICE).cpu(), second)
    assert not torch.equal(first, second)
    # The device's generator is its own: drawing on it leaves the CPU's alone.
    torch.manual_seed(9)
    cpu_state = torch.get_rng_state()
    torch.randn(5, device=DEVICE)
    assert torch.equal(torch.get_rng_state(), cpu_state)


def test_rng_states_of_every_device():
    torch.mtia.manual_seed(5)
    states = torch.mtia.get_rng_state_all()
    assert len(states) == torch.mtia.device_count() == 1
    draws = [torch.rand(8, device=DEVICE).cpu(), torch.randint(0, 100, (8,), device=DEVICE).cpu(),
             torch.nn.functional.dropout(torch.ones(16, device=DEVICE), 0.5).cpu()]
    torch.mtia.set_rng_state_all(states)
    again = [torch.rand(8, device=DEVICE).cpu(), torch.randint(0, 100, (8,), device=DEVICE).cpu(),
             torch.nn.functional.dropout(torch.ones(16, device=DEVICE), 0.5).cpu()]
    for a, b in zip(draws, again):
        assert torch.equal(a, b)
    # The state is the CPU generator's: the same seed gives the CPU's numbers.
    torch.manual_seed(5)
    assert torch.equal(draws[0], torch.rand(8))
    with pytest.raises(RuntimeError, match="size 5056 but found the input RNG state size to be 10"):
        torch.mtia.set_rng_state_all([torch.zeros(10, dtype=torch.uint8)])
    with pytest.raises(IndexError):  # a state for mtia:1: PyTorch's own error, no such device
        torch.mtia.set_rng_state_all(states + states)
    torch.mtia.set_rng_state_all(states)
    assert torch.equal(torch.rand(8, device=DEVICE).cpu(), draws[0])


def test_pinned_memory_goes_through_the_hooks():
    x = torch.randn(256)
    p = x.pin_memory()
    assert p.is_pinned() and not x.is_pinned()
    d = p.to(DEVICE, non_blocking=True)
    back = torch.empty(256).pin_memory()
    back.copy_(d, non_blocking=True)
    torch.mtia.synchronize()
    assert torch.equal(back, x)


def test_memory_functions():
    torch.mtia.empty_cache()
    torch.mtia.reset_peak_memory_stats()
    before = torch.mtia.memory_allocated()
    x = torch.empty(1 << 20, device=DEVICE)
    assert torch.mtia.memory_allocated() == before + (4 << 20)
    assert torch.mtia.max_memory_allocated() >= before + (4 << 20)
    dram = torch.mtia.memory_stats()["dram"]
    assert dram["reserved_bytes"] >= dram["allocated_bytes"]
    assert dram["device_total_bytes"] == torch.mtia.get_device_properties()["total_memory"]
    del x
    assert torch.mtia.memory_allocated() == before
    torch.mtia.empty_cache()
    assert torch.mtia.memory_stats()["dram"]["cached_bytes"] == 0


def test_inductor_config_gives_the_device_launch_limits():
    import torch._inductor.config as inductor
    cfg = torch_mtia_emu.inductor_config()
    p = torch.mtia.get_device_properties()
    assert cfg == {"combo_kernel_max_num_args": p["max_kernel_args"],
                   "max_fusion_unique_io_buffers": p["max_kernel_buffers"]}
    assert cfg == {"combo_kernel_max_num_args": 64, "max_fusion_unique_io_buffers": 32}
    with inductor.patch(cfg):
        assert inductor.combo_kernel_max_num_args == 64
        assert inductor.max_fusion_unique_io_buffers == 32


def test_presets_lists_the_preset_files():
    assert {"mtia-v1", "mtia-v2"} <= set(torch_mtia_emu.presets())
