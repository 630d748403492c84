"""Device memory statistics, shaped like torch.mtia's: ``memory_stats()["dram"]``.

Counts come from the backend's caching allocator (tensors' blocks, rounded to 512 bytes, and
the free blocks it keeps for reuse) and from the device (what is free in DRAM).
"""

from typing import Any, Dict

from . import _C


def memory_stats(device=None) -> Dict[str, Any]:
    """{"dram": {...}} with, in bytes unless named num_*:

    allocated_bytes (blocks tensors hold), peak_bytes (highest allocated_bytes since start or
    reset_peak_memory_stats), requested_bytes (what the tensors asked for), cached_bytes (free
    blocks kept for reuse), reserved_bytes (allocated + cached), num_allocs, num_frees,
    num_cache_hits (allocations served without a driver call), num_device_mallocs,
    num_device_frees, num_ooms, live_blocks, cached_blocks, and once the device is open
    device_free_bytes, device_largest_free_bytes, device_total_bytes, pinned_host_bytes.
    """
    del device
    return {"dram": dict(_C._memory_stats())}


def memory_allocated(device=None) -> int:
    """Bytes in blocks that tensors hold now."""
    return memory_stats(device)["dram"]["allocated_bytes"]


def max_memory_allocated(device=None) -> int:
    """The peak of memory_allocated() since start or reset_peak_memory_stats()."""
    return memory_stats(device)["dram"]["peak_bytes"]


def memory_reserved(device=None) -> int:
    """Bytes the allocator holds from the device: tensors' blocks plus the cache."""
    return memory_stats(device)["dram"]["reserved_bytes"]


def reset_peak_memory_stats(device=None) -> None:
    del device
    _C._reset_peak_memory_stats()


def empty_cache() -> None:
    """Waits for the device, then returns every cached free block to the device."""
    _C._empty_cache()
