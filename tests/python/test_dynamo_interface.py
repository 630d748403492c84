"""TorchDynamo's device interface for "mtia" (torch_mtia_emu._dynamo_interface).

Each answer of the interface is checked against an independent source: torch.mtia's own calls,
the preset's properties, results on the CPU, the order of work on streams. Also: it survives
PyTorch's lazy registration of its own MtiaInterface, Inductor's readers of device properties
get the emulator's, it needs no Triton, compiled code with streams and events runs as eager
code does, and bad devices give clear errors.
"""
import gc

import pytest
import torch
import torch._dynamo
from torch._dynamo import device_interface as di
from torch._dynamo.utils import counters

from torch_mtia_emu import _dynamo_interface
from torch_mtia_emu._dynamo_interface import MtiaEmuInterface

from conftest import DEVICE, run_child


@pytest.fixture(autouse=True)
def registered():
    _dynamo_interface.register()


@pytest.fixture
def iface():
    return di.get_interface_for_device("mtia")


# --- registration ----------------------------------------------------------------------------

def test_the_interface_for_mtia_is_the_emulators(iface):
    _dynamo_interface.register()  # again: idempotent
    assert iface is MtiaEmuInterface
    assert issubclass(iface, di.MtiaInterface)
    assert di.get_interface_for_device(torch.device("mtia", 0)) is MtiaEmuInterface
    names = [name for name, i in di.get_registered_device_interfaces() if i is MtiaEmuInterface]
    assert sorted(names) == ["mtia"] + [f"mtia:{i}" for i in range(torch.mtia.device_count())]
    # The other devices keep PyTorch's interfaces.
    assert di.get_interface_for_device("cpu") is di.CpuInterface


def test_registration_survives_pytorchs_lazy_registration():
    # In a fresh interpreter, PyTorch's own MtiaInterface is registered by the first lookup;
    # register() must come out on top whatever ran first. This module first: importing it
    # must not import torch._dynamo, whose import registers the interface.
    r = run_child("""
        import sys, torch
        from torch_mtia_emu._dynamo_interface import MtiaEmuInterface, register
        from torch._dynamo import device_interface as di
        register()
        di.init_device_reg()  # what a lookup would run if it had not run yet
        register()
        print(di.get_interface_for_device("mtia").__name__,
              di.get_interface_for_device("mtia:0") is MtiaEmuInterface)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["MtiaEmuInterface", "True"]


def test_two_devices():
    r = run_child("""
        import torch
        from torch._dynamo import device_interface as di
        from torch_mtia_emu import _dynamo_interface as m
        m.register()
        i = di.get_interface_for_device("mtia:1")
        assert i is m.MtiaEmuInterface and i.device_count() == 2
        assert i.exchange_device(1) == 0 and torch.mtia.current_device() == 1
        assert i.maybe_exchange_device(0) == 1 and torch.mtia.current_device() == 0
        with di.DeviceGuard(i, 1):
            assert i.current_device() == 1
            assert torch.ones(1, device="mtia").device == torch.device("mtia", 1)
        assert i.current_device() == 0
        s1 = torch.mtia.Stream(device="mtia:1")
        with i.stream(s1):
            assert i.get_raw_stream(1) == s1.stream_id != i.get_raw_stream(0)
            assert i.current_stream("mtia:1") == s1
        assert i.get_device_properties(1) == torch.mtia.get_device_properties(1)
        # The worker's queries open only the devices asked about.
        i.Worker.set_device(1)
        assert i.Worker.current_device() == 1
        assert i.Worker.get_device_properties() == torch.mtia.get_device_properties(1)
        x = torch.randn(1000, device="mtia:1")
        i.synchronize("mtia:1")
        print(i.memory_allocated(1) >= 4000, i.memory_allocated(0))
    """, env={"MTIA_EMU_DEVICES": "2"}, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split() == ["True", "0"]


# --- devices, synchronize, memory ------------------------------------------------------------

def test_devices_are_torch_mtias(iface):
    assert iface.is_available() is True
    assert iface.device_count() == torch.mtia.device_count() >= 1
    assert iface.current_device() == torch.mtia.current_device()
    index = DEVICE.index
    iface.set_device(DEVICE)
    assert torch.mtia.current_device() == index
    assert iface.exchange_device(index) == index
    assert iface.maybe_exchange_device(index) == index
    assert iface.exchange_device(-1) == -1 == iface.maybe_exchange_device(-1)
    assert torch.mtia.current_device() == index
    with di.DeviceGuard(iface, index):
        assert torch.mtia.current_device() == index
    with iface.device(index):
        assert torch.ones(1, device="mtia").device == DEVICE


def test_synchronize_waits_for_every_stream_of_the_device(iface):
    g = torch.Generator().manual_seed(1)
    a = torch.randn(192, 192, generator=g)
    want = torch.softmax(a @ a, dim=1)
    ad = a.to(DEVICE)
    torch.mtia.synchronize()
    s = torch.mtia.Stream(device=DEVICE)
    with torch.mtia.stream(s):
        b = torch.softmax(ad @ ad, dim=1)
        e = torch.mtia.Event()
        e.record()
    # Nothing orders the current stream after s; only synchronize() makes b safe to read.
    iface.synchronize(DEVICE)
    assert e.query() and s.query()
    torch.testing.assert_close(b.cpu(), want, rtol=1e-4, atol=1e-5)
    iface.synchronize()  # the current device
    iface.synchronize(f"mtia:{DEVICE.index}")


def test_memory_allocated_is_the_allocators(iface):
    gc.collect()
    torch.mtia.synchronize()
    before = iface.memory_allocated(DEVICE)
    x = torch.empty(1 << 20, dtype=torch.uint8, device=DEVICE)
    assert iface.memory_allocated(DEVICE) == torch.mtia.memory_allocated(DEVICE)
    assert iface.memory_allocated(DEVICE) - before >= x.numel()
    del x


# --- streams and events ----------------------------------------------------------------------

def test_streams_are_torch_mtias(iface):
    # Dynamo recognises stream calls in compiled code by these objects' identity.
    assert iface.stream is torch.mtia.stream
    assert iface.current_stream is torch.mtia.current_stream
    assert iface.Stream is torch.mtia.Stream and iface.Event is torch.mtia.Event
    default = torch.mtia.default_stream(DEVICE)
    s = torch.mtia.Stream(device=DEVICE)
    assert iface.current_stream(DEVICE) == torch.mtia.current_stream(DEVICE) == default
    with iface.stream(s):
        assert torch.mtia.current_stream(DEVICE) == s
        assert iface.get_raw_stream(DEVICE.index) == s.stream_id
    assert torch.mtia.current_stream(DEVICE) == default
    assert iface.get_raw_stream(DEVICE.index) == default.stream_id
    iface.set_stream(s)
    assert torch.mtia.current_stream(DEVICE) == s
    iface._set_stream_by_id(default.stream_id, default.device_index, default.device_type)
    assert torch.mtia.current_stream(DEVICE) == default


def test_events_order_streams(iface):
    g = torch.Generator().manual_seed(2)
    a = torch.randn(128, 128, generator=g)
    ad = a.to(DEVICE)
    torch.mtia.synchronize()
    s = iface.Stream(device=DEVICE)
    e = iface.Event()
    with iface.stream(s):
        b = (ad @ ad).relu()
        e.record()
    iface.current_stream(DEVICE).wait_event(e)
    c = b * 2  # on the current stream, after s's matmul
    e.synchronize()
    assert e.query()
    torch.testing.assert_close(c.cpu(), (a @ a).relu() * 2, rtol=1e-4, atol=1e-4)


# --- device properties -----------------------------------------------------------------------

def test_properties_are_torch_mtias_and_read_as_attributes(iface):
    want = torch.mtia.get_device_properties(DEVICE)
    p = iface.get_device_properties(DEVICE)
    assert p == want and dict(p) == want
    assert p.name == want["name"] and p.multi_processor_count == want["pe_rows"] * want["pe_cols"]
    assert iface.get_device_properties() == torch.mtia.get_device_properties()
    assert iface.Worker.get_device_properties(DEVICE) == want
    assert iface.Worker.get_device_properties(f"mtia:{DEVICE.index}").name == want["name"]
    assert iface.Worker.current_device() == torch.mtia.current_device()
    with pytest.raises(AttributeError, match="mtia device properties have no 'gcnArchName'"):
        p.gcnArchName


def test_inductor_reads_the_emulators_properties():
    # Inductor's own readers: a PE grid other than the 64 PEs it assumes for an mtia device
    # whose properties it cannot read.
    r = run_child("""
        import torch
        from torch_mtia_emu import _dynamo_interface as m
        m.register()
        from torch._inductor.runtime.hints import DeviceProperties
        from torch._inductor.utils import decode_device
        from torch._inductor.async_compile import caching_device_properties
        caching_device_properties()
        p = DeviceProperties.create(torch.device("mtia", 0))
        print(p.multi_processor_count, *p.cc, p.major, decode_device("mtia"))
    """, env={"MTIA_EMU_SET": "pe_rows=2,pe_cols=4"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["8", "2", "0", "2", "mtia:0"]


def test_compute_capability_follows_the_preset():
    code = """
        import torch
        from torch._dynamo import device_interface as di
        from torch_mtia_emu import _dynamo_interface as m
        m.register()
        i = di.get_interface_for_device("mtia")
        p = torch.mtia.get_device_properties()
        assert i.get_compute_capability() == torch.mtia.get_device_capability() \\
            == (p["generation"], 0) == (p["major"], p["minor"])
        print(p["name"], *i.get_compute_capability())
    """
    for preset, want in (("mtia-v1", "1 0"), ("mtia-v2", "2 0")):
        r = run_child(code, env={"MTIA_EMU_PRESET": preset})
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == [preset] + want.split()


def test_dtypes_and_no_triton(iface):
    assert iface.is_bf16_supported() and iface.is_bf16_supported(including_emulation=True)
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int32,
                  torch.int64, torch.bool):
        assert iface.is_dtype_supported(dtype)
    # float64 and complex have no device kernels; with emulation they run on the CPU fallback.
    assert not iface.is_dtype_supported(torch.float64)
    assert not iface.is_dtype_supported(torch.complex64)
    assert iface.is_dtype_supported(torch.float64, including_emulation=True)
    assert iface.is_triton_capable() is False
    iface.raise_if_triton_unavailable()  # no triton installed, and none needed
    iface.raise_if_triton_unavailable(DEVICE)


# --- Dynamo ----------------------------------------------------------------------------------

def _side_stream_step(x, s):
    cur = torch.mtia.current_stream()
    with torch.mtia.stream(s):
        y = x * 2 + 1
    e = torch.mtia.Event()
    e.record(s)
    e.synchronize()
    cur.wait_stream(s)
    return y.relu() - x


def _side_stream_step_accelerator(x, s):
    cur = torch.accelerator.current_stream()
    with s:
        y = x * 2 + 1
    e = torch.Event()
    e.record(s)
    e.synchronize()
    cur.wait_stream(s)
    return y.relu() - x


def test_compiled_streams_and_events_run_as_eager():
    x = torch.randn(4096, device=DEVICE)
    s = torch.mtia.Stream(device=DEVICE)
    with torch.mtia.device(DEVICE):
        want = _side_stream_step(x, s).cpu()
        # PyTorch 2.13's Dynamo does not trace into torch.mtia (it skips the module): its
        # current_stream and stream break the graph there and run eagerly.
        torch._dynamo.reset()
        counters.clear()
        got = torch.compile(_side_stream_step, backend="aot_eager")(x, s)
        assert torch.equal(got.cpu(), want)
        assert counters["stats"]["unique_graphs"] >= 1
        # The device-generic calls trace into one graph.
        torch._dynamo.reset()
        counters.clear()
        fn = torch.compile(_side_stream_step_accelerator, backend="aot_eager", fullgraph=True)
        assert torch.equal(fn(x, s).cpu(), want)
        assert torch.equal(_side_stream_step_accelerator(x, s).cpu(), want)
        assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]


# --- errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("call", ["synchronize", "get_device_properties", "set_device",
                                  "get_compute_capability", "exchange_device"])
def test_a_cpu_device_is_refused(iface, call):
    with pytest.raises(ValueError, match=f"{call}: expected an mtia device, got cpu"):
        getattr(iface, call)("cpu")


@pytest.mark.parametrize("call", ["synchronize", "get_device_properties", "set_device",
                                  "get_raw_stream", "exchange_device", "maybe_exchange_device"])
def test_an_index_out_of_range_is_refused(iface, call):
    count = torch.mtia.device_count()
    with pytest.raises(RuntimeError, match=f"{call}: mtia:{count + 4} does not exist: this "
                       f"process has {count} MTIA device"):
        getattr(iface, call)(count + 4)
    assert torch.mtia.current_device() == DEVICE.index


def test_other_bad_devices_are_refused(iface):
    with pytest.raises(ValueError, match="'gpu0' is not a device name"):
        iface.synchronize("gpu0")
    with pytest.raises(TypeError, match="expected an mtia device .* got 1.5"):
        iface.get_device_properties(1.5)
    with pytest.raises(RuntimeError, match="Worker.get_device_properties: mtia:9 does not"):
        iface.Worker.get_device_properties(9)
