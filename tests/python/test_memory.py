"""The caching allocator and memory_stats(): counts after allocations and frees, reuse
without driver calls, empty_cache, peaks, out of memory; the statistics under CUDA's names,
memory_summary(), memory history and snapshots (read by PyTorch's own _memory_viz), the
out-of-memory observer."""
import pytest
import torch
import torch_mtia_emu

from conftest import DEVICE, run_child

GRANULE = 512


def dram():
    return torch.mtia.memory_stats()["dram"]


@pytest.fixture(autouse=True)
def clean_cache():
    torch.mtia.synchronize()
    torch.mtia.empty_cache()
    yield


@pytest.mark.caching
def test_stats_follow_allocations_and_frees():
    before = dram()
    a = torch.empty(1000, dtype=torch.float32, device=DEVICE)  # 4000 bytes -> 4096
    b = torch.empty(3, dtype=torch.int8, device=DEVICE)        # 3 bytes -> 512
    s = dram()
    assert s["allocated_bytes"] - before["allocated_bytes"] == 4096 + 512
    assert s["requested_bytes"] - before["requested_bytes"] == 4000 + 3
    assert s["num_allocs"] - before["num_allocs"] == 2
    assert s["live_blocks"] - before["live_blocks"] == 2
    assert torch.mtia.memory_allocated() == s["allocated_bytes"]
    assert s["reserved_bytes"] == s["allocated_bytes"] + s["cached_bytes"]
    del a
    s2 = dram()
    assert s2["allocated_bytes"] == s["allocated_bytes"] - 4096
    assert s2["cached_bytes"] == s["cached_bytes"] + 4096
    assert s2["reserved_bytes"] == s["reserved_bytes"]  # kept, not returned
    assert s2["num_frees"] - s["num_frees"] == 1
    del b


@pytest.mark.caching
def test_freed_blocks_are_reused_without_a_driver_call():
    x = torch.empty(10_000, device=DEVICE)
    address = x.data_ptr()
    del x
    before = dram()
    y = torch.empty(10_000, device=DEVICE)
    after = dram()
    assert y.data_ptr() == address
    assert after["num_device_mallocs"] == before["num_device_mallocs"]
    assert after["num_cache_hits"] == before["num_cache_hits"] + 1
    # A much smaller request does not take the big block (at most 2x waste).
    z = torch.empty(100, device=DEVICE)
    assert z.data_ptr() != address


@pytest.mark.caching
def test_empty_cache_returns_blocks_to_the_device():
    xs = [torch.empty(1 << 20, device=DEVICE) for _ in range(4)]  # 4 x 4 MiB
    del xs
    s = dram()
    assert s["cached_bytes"] >= 4 * (4 << 20)
    torch.mtia.empty_cache()
    e = dram()
    assert e["cached_bytes"] == 0 and e["cached_blocks"] == 0
    assert e["reserved_bytes"] == s["reserved_bytes"] - s["cached_bytes"]
    assert e["num_device_frees"] - s["num_device_frees"] == s["cached_blocks"]
    assert e["device_free_bytes"] - s["device_free_bytes"] >= 4 * (4 << 20)


def test_peak_and_reset():
    torch.mtia.reset_peak_memory_stats()
    base = torch.mtia.memory_allocated()
    assert torch.mtia.max_memory_allocated() == base
    x = torch.empty(1 << 18, device=DEVICE)  # 1 MiB
    del x
    assert torch.mtia.max_memory_allocated() == base + (1 << 20)
    assert torch.mtia.memory_allocated() == base
    torch.mtia.reset_peak_memory_stats()
    assert torch.mtia.max_memory_allocated() == base


def test_tensors_of_ops_are_counted_and_released():
    base = torch.mtia.memory_allocated()
    a = torch.randn(256, 256).to(DEVICE)
    b = a @ a + 1
    assert torch.mtia.memory_allocated() == base + 2 * 256 * 256 * 4
    del a, b
    assert torch.mtia.memory_allocated() == base


@pytest.mark.caching
def test_blocks_stay_with_their_stream():
    s = torch.mtia.Stream()
    with torch.mtia.stream(s):
        x = torch.empty(5000, device=DEVICE)
        address = x.data_ptr()
        del x
    y = torch.empty(5000, device=DEVICE)  # default stream: must not take s's block
    assert y.data_ptr() != address
    with torch.mtia.stream(s):
        z = torch.empty(5000, device=DEVICE)
        assert z.data_ptr() == address


def test_out_of_memory_names_the_request_and_what_is_free():
    before = dram()
    with pytest.raises(torch.cuda.OutOfMemoryError) as e:
        torch.empty(1 << 40, dtype=torch.uint8, device=DEVICE)
    msg = str(e.value)
    assert "out of device memory" in msg
    assert str(1 << 40) in msg and "bytes free" in msg
    assert dram()["num_ooms"] == before["num_ooms"] + 1
    assert isinstance(e.value, RuntimeError)
    # The device is still usable.
    assert torch.ones(3, device=DEVICE).sum().item() == 3.0


@pytest.mark.caching
def test_out_of_memory_retries_after_returning_the_cache():
    r = run_child("""
        import torch, torch_mtia_emu
        d = torch.device("mtia")
        a = torch.empty(20 << 20, dtype=torch.uint8, device=d)
        b = torch.empty(20 << 20, dtype=torch.uint8, device=d)
        del a, b
        s = torch.mtia.memory_stats()["dram"]
        assert s["cached_bytes"] == 40 << 20, s
        c = torch.empty(48 << 20, dtype=torch.uint8, device=d)  # fits only without the cache
        s2 = torch.mtia.memory_stats()["dram"]
        assert s2["cached_bytes"] == 0 and s2["num_device_frees"] == 2, s2
        assert s2["num_alloc_retries"] == 1 and s2["num_ooms"] == 0, s2
        assert torch.mtia.memory_stats()["num_alloc_retries"] == 1
        try:
            torch.empty(60 << 20, dtype=torch.uint8, device=d)
        except torch.cuda.OutOfMemoryError as e:
            print("OOM:", e)
    """, env={"MTIA_EMU_SET": "dram_bytes=67108864"})
    assert r.returncode == 0, r.stderr
    assert "OOM: torch_mtia_emu: out of device memory: tried to allocate 62914560 bytes" \
        in r.stdout


# --- statistics as CUDA's caching allocator reports them -------------------------------------

STATS = ("allocated_bytes", "requested_bytes", "active_bytes", "reserved_bytes", "allocation",
         "active", "segment")


def flat():
    s = torch.mtia.memory_stats()
    return {k: v for k, v in s.items() if k != "dram"}


def delta(after, before):
    return {k: after[k] - before[k] for k in after if isinstance(after[k], int)}


@pytest.mark.caching
def test_cuda_style_stats_follow_an_allocation_and_its_free():
    torch.mtia.reset_peak_memory_stats()
    before = flat()
    x = torch.empty(700, dtype=torch.uint8, device=DEVICE)  # 700 bytes -> one 1024-byte block
    mid = flat()
    d = delta(mid, before)
    # A new driver allocation: every byte counter moves by the rounded size.
    for name in ("allocated_bytes", "active_bytes", "reserved_bytes"):
        assert d[f"{name}.all.current"] == 1024 and d[f"{name}.all.allocated"] == 1024, name
        assert mid[f"{name}.all.peak"] >= mid[f"{name}.all.current"]
    assert d["requested_bytes.all.current"] == 700
    for name in ("allocation", "active", "segment"):
        assert d[f"{name}.all.current"] == 1 and d[f"{name}.all.allocated"] == 1, name
    assert d["num_device_alloc"] == 1
    del x
    after = flat()
    d = delta(after, mid)
    # Freed into the cache: no longer allocated or active, still reserved.
    assert d["allocated_bytes.all.current"] == -1024 and d["allocated_bytes.all.freed"] == 1024
    assert d["active_bytes.all.current"] == -1024 and d["active_bytes.all.freed"] == 1024
    assert d["requested_bytes.all.freed"] == 700
    assert d["reserved_bytes.all.current"] == 0 and d["reserved_bytes.all.freed"] == 0
    assert d["allocation.all.freed"] == 1 and d["segment.all.current"] == 0
    assert after["allocated_bytes.all.peak"] == mid["allocated_bytes.all.peak"]
    # The same block again: a cache hit, allocated again but no new segment.
    y = torch.empty(600, dtype=torch.uint8, device=DEVICE)
    again = delta(flat(), after)
    assert again["allocated_bytes.all.allocated"] == 1024 and again["segment.all.allocated"] == 0
    assert again["reserved_bytes.all.allocated"] == 0
    del y
    torch.mtia.empty_cache()
    emptied = delta(flat(), after)
    assert emptied["reserved_bytes.all.freed"] >= 1024 and emptied["segment.all.freed"] >= 1
    assert flat()["reserved_bytes.all.current"] == dram()["reserved_bytes"]


def test_accelerator_and_torch_mtia_report_the_same_stats():
    x = torch.empty(3000, device=DEVICE)
    acc = torch.accelerator.memory_stats()
    mine = flat()
    for name in STATS:
        for field in ("current", "peak", "allocated", "freed"):
            key = f"{name}.all.{field}"
            assert acc[key] == mine[key], key
    assert acc["num_ooms"] == mine["num_ooms"]
    assert acc["num_alloc_retries"] == mine["num_alloc_retries"]
    assert torch.mtia.memory_reserved() == dram()["reserved_bytes"] == \
        torch.accelerator.memory_reserved()
    assert torch.mtia.max_memory_reserved() == dram()["peak_reserved_bytes"]
    del x


def test_reset_accumulated_and_peak():
    x = torch.empty(5000, device=DEVICE)
    del x
    torch.accelerator.reset_accumulated_memory_stats()
    torch.mtia.reset_peak_memory_stats()
    s = flat()
    for name in STATS:
        assert s[f"{name}.all.allocated"] == 0 and s[f"{name}.all.freed"] == 0, name
        assert s[f"{name}.all.peak"] == s[f"{name}.all.current"], name
    assert s["num_ooms"] == 0 and s["num_alloc_retries"] == 0
    assert torch.mtia.max_memory_reserved() == torch.mtia.memory_reserved()


def test_memory_summary_shows_the_stats():
    torch.accelerator.reset_accumulated_memory_stats()
    torch.mtia.reset_peak_memory_stats()
    base = torch.mtia.memory_allocated()
    x = torch.empty(1 << 18, device=DEVICE)  # 1 MiB
    text = torch.mtia.memory_summary()
    lines = text.splitlines()
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in lines if line.count("|") >= 3 and not set(line) <= set("|-= ")}
    assert rows["Metric"] == ["Now", "Peak", "Tot alloc", "Tot freed"]
    now_mib = (base + (1 << 20)) / (1 << 20)
    assert rows["Allocated memory"][0] == f"{now_mib:.2f} MiB"
    assert rows["Allocated memory"][2] == "1.00 MiB"  # allocated since the reset
    assert rows["Allocated memory"][3] == "0 B"
    assert rows["Allocations"][2] == "1"
    assert rows["Out-of-memory errors"] == ["0"]
    assert len({len(line) for line in lines}) == 1  # a rectangular table
    del x
    assert torch.mtia.memory_summary(0) != text
    with pytest.raises((ValueError, RuntimeError)):
        torch.mtia.memory_summary("cpu")


# --- memory history and snapshots ------------------------------------------------------------

def allocate_in_a_named_function(n):
    return torch.empty(n, dtype=torch.uint8, device=DEVICE)


@pytest.fixture
def history():
    torch.mtia.record_memory_history("all", "python", 0)
    yield
    torch.mtia.record_memory_history(None)


def entries(snapshot):
    (trace,) = snapshot["device_traces"]
    return trace


@pytest.mark.caching
def test_snapshot_segments_and_blocks_match_the_allocator(history):
    x = allocate_in_a_named_function(100_000)  # -> 100352
    y = allocate_in_a_named_function(2000)     # -> 2048
    del y
    snap = torch.mtia.snapshot()
    by_address = {seg["address"]: seg for seg in snap["segments"]}
    seg = by_address[x.data_ptr()]
    assert seg["total_size"] == 100352 and seg["allocated_size"] == 100352
    assert seg["active_size"] == 100352 and seg["requested_size"] == 100_000
    assert seg["stream"] == 0 and seg["segment_type"] == "small"
    (block,) = seg["blocks"]
    assert block == {**block, "address": x.data_ptr(), "size": 100352,
                     "requested_size": 100_000, "state": "active_allocated"}
    names = [f["name"] for f in block["frames"]]
    assert "allocate_in_a_named_function" in names
    assert any(f["filename"].endswith("test_memory.py") for f in block["frames"])
    inactive = [s for s in snap["segments"] if s["blocks"][0]["state"] == "inactive"]
    assert any(s["total_size"] == 2048 for s in inactive)
    assert all(s["allocated_size"] == 0 and s["blocks"][0]["frames"] == [] for s in inactive)
    # Segments are the reserved memory.
    assert sum(s["total_size"] for s in snap["segments"]) == torch.mtia.memory_reserved()
    assert sum(s["allocated_size"] for s in snap["segments"]) == torch.mtia.memory_allocated()
    del x


def test_history_records_each_action_in_order(history):
    torch.mtia.empty_cache()
    x = allocate_in_a_named_function(3000)  # a new segment: 3072 bytes
    address = x.data_ptr()
    del x
    torch.mtia.empty_cache()
    trace = entries(torch.mtia.snapshot())
    mine = [(e["action"], e["size"]) for e in trace if e["addr"] == address]
    assert mine == [("segment_alloc", 3072), ("alloc", 3072), ("free_requested", 3072),
                    ("free_completed", 3072), ("segment_free", 3072)]
    assert trace[-1]["action"] == "snapshot"
    alloc = next(e for e in trace if e["action"] == "alloc" and e["addr"] == address)
    assert "allocate_in_a_named_function" in [f["name"] for f in alloc["frames"]]
    assert alloc["stream"] == 0 and alloc["time_us"] > 0
    times = [e["time_us"] for e in trace]
    assert times == sorted(times)


def test_history_of_an_out_of_memory_error(history):
    with pytest.raises(torch.OutOfMemoryError):
        allocate_in_a_named_function(1 << 40)
    (oom,) = [e for e in entries(torch.mtia.snapshot()) if e["action"] == "oom"]
    assert oom["size"] == 1 << 40
    assert oom["device_free"] == dram()["device_free_bytes"]


def test_state_mode_keeps_stacks_but_no_history():
    torch.mtia.record_memory_history("state")
    try:
        x = allocate_in_a_named_function(4096)
        snap = torch.mtia.snapshot()
    finally:
        torch.mtia.record_memory_history(None)
    assert entries(snap) == []
    seg = next(s for s in snap["segments"] if s["address"] == x.data_ptr())
    assert "allocate_in_a_named_function" in [f["name"] for f in seg["blocks"][0]["frames"]]


def test_stopping_keeps_the_history_and_restarting_clears_it():
    torch.mtia.record_memory_history("all")
    x = allocate_in_a_named_function(512)
    torch.mtia.record_memory_history(None)
    y = allocate_in_a_named_function(512)
    kept = [e["addr"] for e in entries(torch.mtia.snapshot()) if e["action"] == "alloc"]
    assert x.data_ptr() in kept and y.data_ptr() not in kept
    torch.mtia.record_memory_history("all")
    try:
        assert [e["action"] for e in entries(torch.mtia.snapshot())] == ["snapshot"]
    finally:
        torch.mtia.record_memory_history(None)


def test_max_entries_keeps_the_newest():
    torch.mtia.record_memory_history("all", max_entries=3)
    try:
        xs = [allocate_in_a_named_function(512) for _ in range(5)]
        trace = entries(torch.mtia.snapshot())
    finally:
        torch.mtia.record_memory_history(None)
    assert len(trace) == 3
    assert [e["action"] for e in trace][-1] == "snapshot"
    assert trace[-2]["addr"] == xs[-1].data_ptr()


def test_cpp_stacks():
    torch.mtia.record_memory_history("all", stacks="cpp")
    try:
        x = allocate_in_a_named_function(512)
        snap = torch.mtia.snapshot()
    finally:
        torch.mtia.record_memory_history(None)
    alloc = next(e for e in entries(snap) if e["action"] == "alloc"
                 and e["addr"] == x.data_ptr())
    names = [f["name"] for f in alloc["frames"]]
    assert "allocate_in_a_named_function" not in names
    assert any("DeviceAllocator" in n for n in names), names


def test_bad_history_arguments():
    with pytest.raises(ValueError, match="enabled must be"):
        torch.mtia.record_memory_history("everything")
    with pytest.raises(ValueError, match="stacks must be"):
        torch.mtia.record_memory_history("all", stacks="java")


def test_memory_viz_reads_the_snapshot(tmp_path, history):
    import pickle
    import subprocess
    import sys
    from torch.cuda import _memory_viz
    x = allocate_in_a_named_function(1 << 20)
    y = allocate_in_a_named_function(5000)
    del y
    snap = torch.mtia.snapshot()
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps(snap))
    stats = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "stats", str(path)],
                           capture_output=True, text=True, timeout=60)
    assert stats.returncode == 0, stats.stderr
    assert f"segments: {len(snap['segments'])}" in stats.stdout
    trace = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace", str(path)],
                           capture_output=True, text=True, timeout=60)
    assert trace.returncode == 0, trace.stderr
    # Its replay of the history: two driver allocations, a block of each, one freed.
    lines = trace.stdout.splitlines()
    i = lines.index(f"a = cudaMalloc({x.data_ptr()}, 1.0MiB)")
    assert lines[i + 1:i + 6] == ["b = a[0:1.0MiB]", lines[i + 2], "d = c[0:5.0KiB]",
                                  "del d # 5.0KiB", "# free completed for d 5.0KiB"]
    assert lines[i + 2].startswith("c = cudaMalloc(") and lines[i + 2].endswith(", 5.0KiB)")
    # The HTML pages of the memory_viz viewer embed the snapshot.
    assert "<html>" in _memory_viz.trace_plot(snap).lower()
    assert "<html>" in _memory_viz.segment_plot(snap).lower()
    flame = _memory_viz.memory(snap, format_flamegraph=lambda lines: lines)
    assert "allocate_in_a_named_function" in flame
    del x


# --- the out-of-memory observer --------------------------------------------------------------

def test_out_of_memory_observer_is_called_before_the_error():
    r = run_child("""
        import torch, torch_mtia_emu
        d = torch.device("mtia")
        torch.ones(1, device=d)
        calls = []
        torch.mtia.attach_out_of_memory_observer(lambda *a: calls.append(a))
        def bad_observer(*a):
            raise KeyError("observer failed")
        torch.mtia.attach_out_of_memory_observer(bad_observer)
        torch.mtia.attach_out_of_memory_observer(lambda *a: calls.append(("second",) + a))
        try:
            torch.empty(100 << 20, dtype=torch.uint8, device=d)
        except torch.OutOfMemoryError:
            pass
        free = torch.mtia.memory_stats()["dram"]["device_free_bytes"]  # the cache went back
        print("CALLS", calls, free)
        assert calls == [(0, 100 << 20, 64 << 20, free), ("second", 0, 100 << 20, 64 << 20, free)]
        torch.empty(1 << 20, dtype=torch.uint8, device=d)  # no OOM, no call
        assert len(calls) == 2
        try:
            torch.mtia.attach_out_of_memory_observer(42)
        except TypeError as e:
            print("TYPE", e)
    """, env={"MTIA_EMU_SET": "dram_bytes=67108864"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "observer failed" in r.stderr  # reported, not swallowed silently
    assert "TYPE" in r.stdout and "Callable" in r.stdout  # PyTorch's binding checks the type
