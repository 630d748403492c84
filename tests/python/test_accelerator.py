"""torch.accelerator and torch.mtia on the emulated device: every public function of both
modules (enumerated from the installed PyTorch, so a function added to either fails
test_every_public_function_has_a_call until it is covered), the pinned-memory cache behind
torch.accelerator.empty_host_cache(), the device capability, and torch.accelerator.Graph
(capture and replay against eager and CPU results, pools, keep_graph, reset, capture modes,
and a capture on a stream of another device)."""
import gc
import json

import pytest
import torch
import torch_mtia_emu  # noqa: F401

from conftest import DEVICE, run_child


@pytest.fixture(autouse=True)
def settle():
    torch.accelerator.synchronize()
    yield
    torch.accelerator.synchronize()


def public_functions(module):
    """The callables `module` defines itself (not what it imports)."""
    out = set()
    for name in dir(module):
        obj = getattr(module, name)
        if name.startswith("_") or not callable(obj):
            continue
        if (getattr(obj, "__module__", None) or "").startswith(module.__name__):
            out.add(name)
    return out


# One call of each public function, run in a fresh interpreter, once after it has used the
# device (a tensor and a pinned copy) and once before anything else. Each must return normally or raise NotImplementedError naming the function;
# what it returned is printed and checked by test_every_public_function_has_a_call.
CALLS = {
    "torch.accelerator": {
        "Graph": "torch.accelerator.Graph()",
        "current_accelerator": "torch.accelerator.current_accelerator()",
        "current_device_idx": "torch.accelerator.current_device_idx()",
        "current_device_index": "torch.accelerator.current_device_index()",
        "current_stream": "torch.accelerator.current_stream()",
        "device_count": "torch.accelerator.device_count()",
        "device_index": "torch.accelerator.device_index(0).__enter__()",
        "empty_cache": "torch.accelerator.empty_cache()",
        "empty_host_cache": "torch.accelerator.empty_host_cache()",
        "get_device_capability": "torch.accelerator.get_device_capability()",
        "get_memory_info": "torch.accelerator.get_memory_info()",
        "is_available": "torch.accelerator.is_available()",
        "max_memory_allocated": "torch.accelerator.max_memory_allocated()",
        "max_memory_reserved": "torch.accelerator.max_memory_reserved()",
        "memory_allocated": "torch.accelerator.memory_allocated()",
        "memory_reserved": "torch.accelerator.memory_reserved()",
        "memory_stats": "torch.accelerator.memory_stats()",
        "reset_accumulated_memory_stats": "torch.accelerator.reset_accumulated_memory_stats()",
        "reset_peak_memory_stats": "torch.accelerator.reset_peak_memory_stats()",
        "set_device_idx": "torch.accelerator.set_device_idx(0)",
        "set_device_index": "torch.accelerator.set_device_index(0)",
        "set_stream": "torch.accelerator.set_stream(torch.accelerator.current_stream())",
        "synchronize": "torch.accelerator.synchronize()",
    },
    "torch.mtia": {
        "DeferredMtiaCallError": "torch.mtia.DeferredMtiaCallError('x')",
        "MTIAGraph": "torch.mtia.MTIAGraph()",
        "StreamContext": "torch.mtia.StreamContext(torch.mtia.current_stream())",
        "attach_out_of_memory_observer": "torch.mtia.attach_out_of_memory_observer(print)",
        "current_device": "torch.mtia.current_device()",
        "current_stream": "torch.mtia.current_stream()",
        "default_stream": "torch.mtia.default_stream()",
        "device": "torch.mtia.device(0).__enter__()",
        "device_count": "torch.mtia.device_count()",
        "empty_cache": "torch.mtia.empty_cache()",
        "get_device_capability": "torch.mtia.get_device_capability()",
        "get_device_properties": "torch.mtia.get_device_properties()['name']",
        "get_rng_state": "torch.mtia.get_rng_state().shape",
        "get_rng_state_all": "len(torch.mtia.get_rng_state_all())",
        "graph": "torch.mtia.graph(torch.mtia.MTIAGraph())",
        "graph_pool_handle": "torch.mtia.graph_pool_handle()",
        "init": "torch.mtia.init()",
        "initial_seed": "torch.mtia.initial_seed()",
        "is_available": "torch.mtia.is_available()",
        "is_bf16_supported": "torch.mtia.is_bf16_supported()",
        "is_initialized": "torch.mtia.is_initialized()",
        "manual_seed": "torch.mtia.manual_seed(1)",
        "manual_seed_all": "torch.mtia.manual_seed_all(1)",
        "max_memory_allocated": "torch.mtia.max_memory_allocated()",
        "memory_allocated": "torch.mtia.memory_allocated()",
        "memory_stats": "sorted(torch.mtia.memory_stats())[:2]",
        "reset_peak_memory_stats": "torch.mtia.reset_peak_memory_stats()",
        "seed": "torch.mtia.seed()",
        "seed_all": "torch.mtia.seed_all()",
        "set_device": "torch.mtia.set_device(0)",
        "set_rng_state": "torch.mtia.set_rng_state(torch.mtia.get_rng_state())",
        "set_rng_state_all": "torch.mtia.set_rng_state_all(torch.mtia.get_rng_state_all())",
        "set_stream": "torch.mtia.set_stream(torch.mtia.current_stream())",
        "snapshot": "sorted(torch.mtia.snapshot())",
        "stream": "torch.mtia.stream(torch.mtia.Stream()).__enter__()",
        "synchronize": "torch.mtia.synchronize()",
        # Added by the package (PyTorch 2.13's torch.mtia lacks them).
        "is_current_stream_capturing": "torch.mtia.is_current_stream_capturing()",
        "max_memory_reserved": "torch.mtia.max_memory_reserved()",
        "memory_reserved": "torch.mtia.memory_reserved()",
        "memory_summary": "len(torch.mtia.memory_summary()) > 0",
        "record_memory_history": "torch.mtia.record_memory_history(None)",
    },
}

CALL_EVERYTHING = """
import json, sys, torch
calls = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
if USE_FIRST:
    x = torch.ones(1000, device="mtia") * 2     # the device has been used
    p = torch.ones(1000).pin_memory()
    y = p.to("mtia", non_blocking=True)
    del p
out = {}
for module, table in CALLS.items():
    for name, expr in table.items():
        try:
            out[module + "." + name] = ["ok", repr(eval(expr))[:200]]
        except NotImplementedError as e:
            out[module + "." + name] = ["notimpl", str(e)]
        except Exception as e:
            out[module + "." + name] = ["error", type(e).__name__ + ": " + str(e)]
torch.accelerator.synchronize()
print(json.dumps(out))
"""


def test_every_public_function_has_a_call():
    assert set(CALLS["torch.accelerator"]) == public_functions(torch.accelerator)
    missing = public_functions(torch.mtia) - set(CALLS["torch.mtia"])
    assert not missing and set(torch.mtia.__all__) <= set(CALLS["torch.mtia"]), missing


@pytest.mark.parametrize("use_first", [True, False], ids=["used", "fresh"])
def test_every_public_function_works(use_first):
    r = run_child(f"CALLS = {json.dumps(CALLS)}\nUSE_FIRST = {use_first}\n" + CALL_EVERYTHING,
                  timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]  # a crash (signal) fails here
    results = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(results) == sum(len(t) for t in CALLS.values())
    for name, (status, text) in results.items():
        short = name.rsplit(".", 1)[1]
        if status == "notimpl":
            assert short in text, (name, text)  # the error names what is missing
        else:
            assert status == "ok", (name, text)
    assert results["torch.accelerator.current_accelerator"][1] == "device(type='mtia')"
    assert results["torch.accelerator.device_count"][1] == "1"
    assert results["torch.accelerator.is_available"][1] == "True"


# --- devices and streams ----------------------------------------------------------------


def test_devices_and_indices():
    assert torch.accelerator.current_accelerator() == torch.device("mtia")
    assert torch.accelerator.device_count() == torch.mtia.device_count()
    assert torch.accelerator.current_device_index() == torch.mtia.current_device()
    with torch.accelerator.device_index(DEVICE.index):
        assert torch.accelerator.current_device_index() == DEVICE.index
    count = torch.accelerator.device_count()
    with pytest.raises(RuntimeError, match="device"):
        torch.accelerator.set_device_index(count)
    with pytest.raises(RuntimeError, match="device"):
        with torch.accelerator.device_index(count):
            pass


def test_streams_and_synchronize():
    before = torch.accelerator.current_stream(DEVICE)
    s = torch.Stream(DEVICE)
    torch.accelerator.set_stream(s)
    try:
        assert torch.accelerator.current_stream(DEVICE) == s
        a = torch.arange(4096, dtype=torch.float32, device=DEVICE)
        b = (a * 3 - 1).sum()
        torch.accelerator.synchronize(DEVICE)
        assert s.query()
        assert b.item() == (torch.arange(4096, dtype=torch.float32) * 3 - 1).sum().item()
    finally:
        torch.accelerator.set_stream(before)
    assert torch.accelerator.current_stream(DEVICE) == before


# --- memory -----------------------------------------------------------------------------


@pytest.mark.caching
def test_memory_counters_follow_the_tensors():
    torch.accelerator.empty_cache()
    torch.accelerator.reset_peak_memory_stats(DEVICE)
    base = torch.accelerator.memory_allocated(DEVICE)
    t = torch.empty(1 << 20, dtype=torch.uint8, device=DEVICE)  # 1 MiB, a multiple of 512
    assert torch.accelerator.memory_allocated(DEVICE) == base + (1 << 20)
    assert torch.accelerator.max_memory_allocated(DEVICE) >= base + (1 << 20)
    assert torch.accelerator.memory_reserved(DEVICE) >= base + (1 << 20)
    stats = torch.accelerator.memory_stats(DEVICE)
    assert stats["allocated_bytes.all.current"] == base + (1 << 20)
    assert stats == torch.accelerator.memory_stats(DEVICE.index)
    free, total = torch.accelerator.get_memory_info(DEVICE)
    assert total == torch.mtia.get_device_properties(DEVICE)["total_memory"]
    assert 0 < free <= total - (1 << 20)
    del t
    assert torch.accelerator.memory_allocated(DEVICE) == base
    assert torch.accelerator.max_memory_allocated(DEVICE) >= base + (1 << 20)
    reserved = torch.accelerator.memory_reserved(DEVICE)
    torch.accelerator.empty_cache()
    assert torch.accelerator.memory_reserved(DEVICE) <= reserved - (1 << 20)
    torch.accelerator.reset_peak_memory_stats(DEVICE)
    assert torch.accelerator.max_memory_allocated(DEVICE) == base
    torch.accelerator.reset_accumulated_memory_stats(DEVICE)
    assert torch.accelerator.memory_stats(DEVICE)["allocated_bytes.all.allocated"] == 0


def pinned_bytes():
    torch.ones(1, device=DEVICE)  # the device is open (its statistics exist)
    return torch.mtia.memory_stats(DEVICE)["dram"]["pinned_host_bytes"]


def test_empty_host_cache_returns_the_cached_pinned_memory():
    with torch.accelerator.device_index(DEVICE.index):
        torch.accelerator.empty_host_cache()
        start = pinned_bytes()
        p = torch.arange(100_000, dtype=torch.float32).pin_memory()
        assert p.is_pinned()
        address = p.data_ptr()
        held = pinned_bytes()
        assert held >= start + p.nbytes
        del p
        # Freed into the cache: still pinned, and the next pinned tensor of its size reuses it.
        assert pinned_bytes() == held
        q = torch.empty(100_000, dtype=torch.float32).pin_memory()
        assert q.data_ptr() == address and pinned_bytes() == held
        del q
        torch.accelerator.empty_host_cache()
        assert pinned_bytes() == start
        # Still usable afterwards.
        r = torch.full((1000,), 7.0).pin_memory()
        torch.testing.assert_close(r.to(DEVICE, non_blocking=True).cpu(), torch.full((1000,), 7.0))


def test_a_pinned_block_is_not_reused_before_its_copy_has_run():
    # A non_blocking copy from pinned memory reads it when the stream reaches it. The tensor is
    # freed at once and a new pinned tensor of its size is written: if the cache handed out the
    # block before the copy ran, the device would receive the new values.
    with torch.accelerator.device_index(DEVICE.index):
        a = torch.randn(256, 256, device=DEVICE)
        for _ in range(20):  # work queued ahead of the copy
            a = (a @ a).tanh()
        src = torch.arange(200_000, dtype=torch.float32)
        p = src.pin_memory()
        y = p.to(DEVICE, non_blocking=True)
        del p
        q = torch.empty(200_000, dtype=torch.float32).pin_memory()
        q.fill_(-1.0)
        torch.accelerator.synchronize(DEVICE)
        assert torch.equal(y.cpu(), src)
        # The same the other way: a non_blocking copy into pinned memory.
        d = torch.arange(200_000, dtype=torch.float32, device=DEVICE) * 2
        for _ in range(20):
            a = (a @ a).tanh()
        host = torch.empty(200_000, dtype=torch.float32).pin_memory()
        host.copy_(d, non_blocking=True)
        torch.accelerator.synchronize(DEVICE)
        assert torch.equal(host, torch.arange(200_000, dtype=torch.float32) * 2)
        del q, host
        torch.accelerator.empty_host_cache()


def test_empty_host_cache_before_the_device_is_used():
    r = run_child("""
        import torch
        torch.accelerator.empty_host_cache()
        print(torch.accelerator.get_device_capability()["supported_dtypes"] is not None)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True"]


# --- device capability --------------------------------------------------------------------


def test_capability_lists_the_dtypes_that_round_trip_and_convert():
    cap = torch.accelerator.get_device_capability(DEVICE)
    dtypes = set(cap["supported_dtypes"])
    for t in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8,
              torch.int32, torch.int64, torch.bool, torch.complex64, torch.uint8):
        assert t in dtypes, t
    for t in (torch.qint8, torch.quint8, torch.qint32):
        assert t not in dtypes, t
    src = torch.tensor([0.0, 1.0, -2.0, 3.0, 0.5, -0.25, 100.0, 7.0])
    for t in dtypes:
        host = src.to(t)
        on_device = host.to(DEVICE)
        assert on_device.dtype == t
        back = on_device.cpu()
        # Bitwise round trip (float8 included: compare the bytes).
        assert torch.equal(back.view(torch.uint8), host.view(torch.uint8)), t
        if not t.is_complex:
            torch.testing.assert_close(on_device.to(torch.float32).cpu(), host.to(torch.float32))
            torch.testing.assert_close(src.to(DEVICE).to(t).cpu().view(torch.uint8),
                                       host.view(torch.uint8))
    with pytest.raises(RuntimeError, match="device"):
        torch.accelerator.get_device_capability(torch.accelerator.device_count())


# --- torch.accelerator.Graph ----------------------------------------------------------------


def step(x, w):
    return (x @ w + 1).relu().sum(1) * 0.5


def test_graph_replays_like_eager_and_the_cpu():
    x = torch.zeros(32, 64, device=DEVICE)
    w = torch.randn(64, 16).to(DEVICE)
    s = torch.Stream(DEVICE)
    with s:
        step(x, w)  # warm up
    g = torch.accelerator.Graph()
    with s, g:
        y = step(x, w)
    for seed in range(3):
        new = torch.randn(32, 64, generator=torch.Generator().manual_seed(seed))
        x.copy_(new.to(DEVICE))
        g.replay()
        eager = step(x, w)
        torch.testing.assert_close(y, eager)
        torch.testing.assert_close(y.cpu(), step(new, w.cpu()))
    g.reset()
    with pytest.raises(RuntimeError, match="captured"):
        g.replay()


def test_graph_capture_begin_end_keep_graph_and_instantiate():
    x = torch.ones(1024, device=DEVICE)
    g = torch.accelerator.Graph(keep_graph=True)
    s = torch.Stream(DEVICE)
    with s:
        g.capture_begin()
        x.mul_(2).add_(1)
        g.capture_end()
    torch.accelerator.synchronize()
    assert torch.equal(x.cpu(), torch.ones(1024))  # captured, not run
    g.instantiate()
    with pytest.raises(RuntimeError, match="already instantiated"):
        g.instantiate()
    g.replay()
    g.replay()
    assert torch.equal(x.cpu(), torch.full((1024,), 7.0))  # (1*2+1)*2+1
    # reset, then capture again into the same object.
    g.reset()
    with s:
        g.capture_begin()
        x.sub_(3)
        g.capture_end()
    g.replay()  # keep_graph: instantiated by the first replay
    assert torch.equal(x.cpu(), torch.full((1024,), 4.0))


def test_graphs_share_a_pool():
    s = torch.Stream(DEVICE)
    x = torch.arange(256, dtype=torch.float32, device=DEVICE)
    with s:
        (x * 2).sum()
    g1 = torch.accelerator.Graph()
    with s, g1:
        a = x * 2
    g2 = torch.accelerator.Graph(pool=g1.pool())
    with s, g2:
        b = a + x
    assert g2.pool() == g1.pool()
    g3 = torch.accelerator.Graph(pool=torch.mtia.graph_pool_handle())
    with s, g3:
        c = x - 1
    assert g3.pool() != g1.pool()
    x.copy_(torch.full((256,), 3.0).to(DEVICE))
    g1.replay()
    g2.replay()
    g3.replay()
    assert torch.equal(b.cpu(), torch.full((256,), 9.0))
    assert torch.equal(c.cpu(), torch.full((256,), 2.0))


def test_graph_capture_modes():
    x = torch.ones(64, device=DEVICE)
    s = torch.Stream(DEVICE)
    for mode in ("default", "global"):
        g = torch.accelerator.Graph(capture_error_mode=mode)
        with s, g:
            x.add_(1)
        g.replay()
    assert torch.equal(x.cpu(), torch.full((64,), 3.0))
    for mode in ("thread_local", "relaxed"):
        g = torch.accelerator.Graph(capture_error_mode=mode)
        with pytest.raises(NotImplementedError, match=mode):
            with s, g:
                x.add_(1)
        assert not torch.mtia.is_current_stream_capturing()
    assert torch.equal(x.cpu(), torch.full((64,), 3.0))


def test_graph_debug_mode_and_dump():
    g = torch.accelerator.Graph()
    g.enable_debug_mode()
    s = torch.Stream(DEVICE)
    x = torch.ones(8, device=DEVICE)
    with s, g:
        x.add_(1)
    with pytest.raises(NotImplementedError, match="debug_dump"):
        g.debug_dump("/tmp/never-written.dot")
    g.replay()
    assert torch.equal(x.cpu(), torch.full((8,), 2.0))


def test_graph_refuses_what_cannot_be_captured_and_stays_usable():
    x = torch.ones(64, device=DEVICE)
    s = torch.Stream(DEVICE)
    g = torch.accelerator.Graph()
    with pytest.raises(RuntimeError, match="cannot be captured"):
        with s, g:
            x.add_(1)
            x.cpu()
    assert not torch.mtia.is_current_stream_capturing()
    with pytest.raises(RuntimeError, match="captured"):
        g.replay()
    g.reset()
    with s, g:
        x.add_(1)
    g.replay()
    assert torch.equal(x.cpu(), torch.full((64,), 2.0))  # the first capture ran nothing


def test_graph_pool_before_capture_and_a_freed_input():
    g = torch.accelerator.Graph()
    with pytest.raises(RuntimeError, match="pool"):
        g.pool()
    x = torch.ones(4096, device=DEVICE)
    s = torch.Stream(DEVICE)
    with s, g:
        x.mul_(2)
    del x
    gc.collect()
    with pytest.raises(RuntimeError, match="freed"):
        g.replay()


def test_destroying_a_graph_during_its_capture_ends_the_capture():
    x = torch.ones(128, device=DEVICE)
    s = torch.Stream(DEVICE)
    with s:
        g = torch.accelerator.Graph()
        g.capture_begin()
        x.mul_(3)
        del g
        gc.collect()
        assert not torch.mtia.is_current_stream_capturing()
        assert x.sum().item() == 128.0  # the captured mul_ was discarded, never run
        g2 = torch.accelerator.Graph()  # the stream can capture again
        g2.capture_begin()
        x.mul_(3)
        g2.capture_end()
    g2.replay()
    assert torch.equal(x.cpu(), torch.full((128,), 3.0))


TWO_DEVICES = {"MTIA_EMU_DEVICES": "2", "MTIA_EMU_FALLBACK": "error"}


def test_graphs_on_a_stream_of_another_device():
    r = run_child("""
        import gc, torch
        # Captured on mtia:1's stream while mtia:0 is current: it captures on mtia:1 and
        # replays there, whatever device is current at replay.
        x1 = torch.ones(128, device="mtia:1")
        s1 = torch.Stream("mtia:1")
        g = torch.accelerator.Graph()
        with s1, g:
            print("capturing on", torch.accelerator.current_device_index())
            x1.mul_(3)
        print("current", torch.accelerator.current_device_index())
        g.replay()
        with torch.accelerator.device_index(1):
            g.replay()
        torch.accelerator.synchronize(1)
        print("replayed", x1.cpu()[0].item())

        # One pool handle on two devices is a pool in each; both go when their graphs do.
        x0 = torch.ones(1 << 16, device="mtia:0")
        x1 = torch.ones(1 << 16, device="mtia:1")
        s0 = torch.Stream("mtia:0")
        ga = torch.accelerator.Graph()
        with s0, ga:
            y0 = x0 * 2
        gb = torch.accelerator.Graph(pool=ga.pool())
        with s1, gb:
            y1 = x1 * 5
        ga.replay()
        gb.replay()
        print("results", y0.sum().item(), y1.sum().item())
        del ga, gb, y0, y1
        gc.collect()
        for d in (0, 1):
            torch.accelerator.synchronize(d)
            torch.accelerator.empty_cache()
            print("reserved", d, torch.accelerator.memory_reserved(d) - x0.nbytes)
    """, env=TWO_DEVICES, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert lines[:3] == ["capturing on 1", "current 0", "replayed 9.0"], lines
    assert lines[3] == f"results {2.0 * (1 << 16)} {5.0 * (1 << 16)}", lines
    # Only x0 (and x1) are left: the pools' blocks went back to each device.
    assert lines[4:] == ["reserved 0 0", "reserved 1 0"], lines
