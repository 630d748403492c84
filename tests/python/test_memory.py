"""The caching allocator and memory_stats(): counts after allocations and frees, reuse
without driver calls, empty_cache, peaks, out of memory."""
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
        try:
            torch.empty(60 << 20, dtype=torch.uint8, device=d)
        except torch.cuda.OutOfMemoryError as e:
            print("OOM:", e)
    """, env={"MTIA_EMU_SET": "dram_bytes=67108864"})
    assert r.returncode == 0, r.stderr
    assert "OOM: torch_mtia_emu: out of device memory: tried to allocate 62914560 bytes" \
        in r.stdout
