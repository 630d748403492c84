"""torch_mtia_emu: PyTorch on the mtia-emu emulated MTIA device.

Importing this package registers a PyTorch 1.13 backend on the PrivateUse1 device type:
tensors on ``torch.device("privateuseone")`` (index 0: the in-process emulator hosts one
device) live in the emulated device's memory, ops run on the device kernel library
(docs/kernels.md) or, when there is no kernel, on the CPU fallback. The functions here mirror
``torch.mtia``. The device opens on first use, configured by ``init()`` or the environment
(MTIA_EMU_PRESET, MTIA_EMU_TIMING, MTIA_EMU_SET, MTIA_EMU_KERNELS, MTIA_EMU_FALLBACK); see
docs/tensor-layer.md.
"""

import atexit
import os
from collections import namedtuple
from typing import Any, Dict, List, Optional, Union

import torch

from . import _C
from ._memory import (empty_cache, max_memory_allocated, memory_allocated, memory_reserved,
                      memory_stats, reset_peak_memory_stats)
from ._serialization import register as _register_serialization
from ._streams import (Event, Stream, current_stream, default_stream, set_stream, stream)

__all__ = [
    "DEVICE_TYPE", "device_type", "init", "is_available", "is_initialized", "device_count",
    "current_device", "set_device", "device", "synchronize", "Stream", "Event", "stream",
    "current_stream", "default_stream", "set_stream", "memory_stats", "memory_allocated",
    "max_memory_allocated", "memory_reserved", "reset_peak_memory_stats", "empty_cache",
    "get_device_properties", "get_device_capability", "get_device_name", "is_bf16_supported",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
    "set_rng_state", "fallback_counts", "reset_fallback_counts", "set_fallback_mode",
    "get_fallback_mode", "launch_kernel", "kernel_names", "kernel_launch_counts",
    "reset_kernel_launch_counts", "simulated_time_ns", "trace_level", "set_trace_level",
    "write_artifacts", "shutdown",
]

#: The PyTorch device type the emulated device appears as (1.13 has no "mtia" type).
DEVICE_TYPE = "privateuseone"

_DeviceLike = Union[None, int, str, torch.device]


def device_type(index: int = 0) -> torch.device:
    """The torch.device of the emulated device: ``privateuseone:0``."""
    return torch.device(DEVICE_TYPE, _device_index(index))


def _device_index(device: _DeviceLike) -> int:
    if device is None:
        return 0
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != DEVICE_TYPE:
            raise ValueError(f"torch_mtia_emu: expected a {DEVICE_TYPE} device, got {device}")
        index = 0 if device.index is None else device.index
    elif isinstance(device, int):
        index = device
    else:
        raise TypeError(f"torch_mtia_emu: cannot use {device!r} as a device")
    if index != 0:
        raise ValueError(f"torch_mtia_emu: device index {index} does not exist: the in-process "
                         f"emulator has one device, {DEVICE_TYPE}:0")
    return 0


# --- device --------------------------------------------------------------------------------

def init(preset: Optional[str] = None, timing: Optional[bool] = None,
         overrides: Optional[List[str]] = None, kernels: Optional[str] = None,
         trace: Optional[str] = None) -> None:
    """Opens the device now, with these settings instead of the environment's.

    preset: chip preset name or file ("mtia-v2", "mtia-v1"); timing: False runs functional
    only (simulated times stay 0); overrides: "key=value" preset overrides; kernels: path of
    the kernel library; trace: "off", "kernels" (copies and launches) or "units" (every PE
    unit operation too), else $MTIA_EMU_TRACE. Must come before the first use of the device.
    """
    env_preset, env_timing, env_overrides, env_kernels = _C._default_options()
    _C._init(preset if preset is not None else env_preset,
             timing if timing is not None else env_timing,
             list(overrides) if overrides is not None else list(env_overrides),
             kernels if kernels is not None else env_kernels,
             trace if trace is not None else "")


def is_available() -> bool:
    """True: the in-process emulator is always there once the package imports."""
    return True


def is_initialized() -> bool:
    """True once the device has been opened (by init() or the first use)."""
    return _C._is_initialized()


def device_count() -> int:
    """1: the in-process simulator hosts exactly one device per process."""
    return 1


def current_device() -> int:
    return 0


def set_device(device: _DeviceLike) -> None:
    _device_index(device)


class device:
    """Context manager that selects a device (only device 0 exists)."""

    def __init__(self, device: _DeviceLike):
        self.idx = _device_index(device)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False


def synchronize(device: _DeviceLike = None) -> None:
    """Waits for all work queued on every stream; raises a pending device error."""
    _device_index(device)
    if _C._is_initialized():
        _C._synchronize()


_DeviceProperties = namedtuple(
    "_DeviceProperties",
    ["name", "total_memory", "generation", "major", "minor", "multi_processor_count",
     "pe_rows", "pe_cols", "clock_hz", "sram_bytes", "local_store_bytes", "dma_engines",
     "hardware_queues", "max_kernel_args", "max_kernel_buffers", "timing", "firmware_version",
     "backend", "kernel_library"])


def get_device_properties(device: _DeviceLike = None) -> _DeviceProperties:
    """The emulated chip: preset name, DRAM (total_memory), PE grid, clock, limits."""
    _device_index(device)
    p = _C._properties()
    return _DeviceProperties(
        name=p["name"], total_memory=p["total_memory"], generation=p["generation"],
        major=p["generation"], minor=0, multi_processor_count=p["pe_rows"] * p["pe_cols"],
        pe_rows=p["pe_rows"], pe_cols=p["pe_cols"], clock_hz=p["clock_hz"],
        sram_bytes=p["sram_bytes"], local_store_bytes=p["local_store_bytes"],
        dma_engines=p["dma_engines"], hardware_queues=p["hardware_queues"],
        max_kernel_args=p["max_kernel_args"], max_kernel_buffers=p["max_kernel_buffers"],
        timing=p["timing"], firmware_version=p["firmware_version"], backend=p["backend"],
        kernel_library=p["kernel_library"])


def get_device_capability(device: _DeviceLike = None) -> tuple:
    """(generation, 0): (2, 0) for mtia-v2, (1, 0) for mtia-v1."""
    p = get_device_properties(device)
    return (p.major, p.minor)


def get_device_name(device: _DeviceLike = None) -> str:
    return get_device_properties(device).name


def is_bf16_supported() -> bool:
    return True


# --- random numbers --------------------------------------------------------------------------

def manual_seed(seed: int) -> None:
    """Seeds the device's generator (rand, randn, normal_, uniform_, bernoulli_ ... on the
    device). After the same seed, the device draws the numbers the CPU draws."""
    _C._manual_seed(int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


manual_seed_all = manual_seed


def seed() -> None:
    """Seeds the device's generator with a non-deterministic number."""
    _C._seed()


seed_all = seed


def initial_seed() -> int:
    return _C._initial_seed()


def get_rng_state(device: _DeviceLike = None) -> torch.Tensor:
    _device_index(device)
    return torch.frombuffer(bytearray(_C._get_rng_state()), dtype=torch.uint8)


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = None) -> None:
    _device_index(device)
    _C._set_rng_state(bytes(new_state.cpu().to(torch.uint8).numpy().tobytes()))


# --- CPU fallback ----------------------------------------------------------------------------

def fallback_counts() -> Dict[str, int]:
    """How often each op ran on the CPU fallback since the last reset, e.g.
    {"aten::nll_loss_forward": 3, "aten::add.out (dtype Double)": 1}."""
    return dict(_C._fallback_counts())


def reset_fallback_counts() -> None:
    """Clears the counts (and re-arms the once-per-op warnings)."""
    _C._reset_fallback_counts()


def set_fallback_mode(mode: str) -> None:
    """"warn" (run on the CPU, warn once per op), "silent", or "error" (raise instead)."""
    _C._set_fallback_mode(mode)


def get_fallback_mode() -> str:
    return _C._fallback_mode()


# --- kernels and diagnostics -----------------------------------------------------------------

def kernel_names() -> List[str]:
    """The kernels of the loaded kernel library (docs/kernels.md)."""
    return list(_C._kernel_names())


def launch_kernel(name: str, args: List[Any], grid=(1, 1)) -> None:
    """Launches library kernel `name` on the current stream with `args`, one per parameter of
    its signature (docs/kernels.md): a device tensor passes its data pointer, a Python int an
    i64, a float an f32, a torch.dtype a dtype code, and ("ptr"|"i64"|"f32"|"f64"|"dtype",
    value) pairs pass exactly that. A kernel fault is raised by the next synchronize()."""
    codes = {torch.float32: 1, torch.float16: 2, torch.bfloat16: 3, torch.int8: 4,
             torch.int32: 5, torch.int64: 6, torch.bool: 7}
    packed = []
    for a in args:
        if isinstance(a, torch.Tensor):
            if a.device.type != DEVICE_TYPE:
                raise ValueError(f"launch_kernel: tensor argument on {a.device}, not the device")
            packed.append(("ptr", a.data_ptr()))
        elif isinstance(a, torch.dtype):
            if a not in codes:
                raise TypeError(f"launch_kernel: the kernels take no {a}")
            packed.append(("dtype", codes[a]))
        elif isinstance(a, bool):
            packed.append(("i64", int(a)))
        elif isinstance(a, int):
            packed.append(("i64", a))
        elif isinstance(a, float):
            packed.append(("f32", a))
        elif isinstance(a, tuple) and len(a) == 2:
            packed.append((str(a[0]), a[1]))
        else:
            raise TypeError(f"launch_kernel: cannot pass {a!r} as a kernel argument")
    rows, cols = grid
    _C._launch(name, int(rows), int(cols), packed)


def kernel_launch_counts() -> Dict[str, int]:
    """Kernel launches per library kernel since the last reset_kernel_launch_counts()."""
    return dict(_C._launch_counts())


def reset_kernel_launch_counts() -> None:
    _C._reset_launch_counts()


def simulated_time_ns() -> float:
    """The device's simulated time now, nanoseconds (0 with timing off)."""
    return _C._now_ps() / 1000.0


def trace_level() -> str:
    """What the device's trace records now: "off", "kernels" or "units"."""
    return _C._trace_level()


def set_trace_level(level: str) -> None:
    """Records "off", "kernels" (copies and launches) or "units" (every PE unit operation
    too) from now on; write_artifacts() writes what was recorded."""
    _C._set_trace_level(level)


def write_artifacts(directory: str) -> None:
    """Writes the device's Chrome trace (trace.json), statistics and configuration into
    `directory`; open trace.json in ui.perfetto.dev."""
    _C._write_artifacts(os.fspath(directory))


def shutdown() -> None:
    """Waits for the device, then closes it. Runs at interpreter exit; after it the device
    cannot be used again in this process."""
    _C._shutdown()


_register_serialization()
_C._set_fallback_mode(os.environ.get("MTIA_EMU_FALLBACK", "warn") or "warn")
atexit.register(_C._shutdown)


def _install_quiet_printing() -> None:
    """PyTorch formats a tensor for printing with tensor ops (masked_select, ceil, float64
    math); on a device tensor some of those have no device kernel. They are not the user's
    workload, so while printing they fall back to the CPU without being counted, warned about
    or refused (also under MTIA_EMU_FALLBACK=error)."""
    import torch._tensor_str as tensor_str
    original = tensor_str._str

    def _str(self, *, tensor_contents=None):
        if self.device.type != DEVICE_TYPE:
            return original(self, tensor_contents=tensor_contents)
        previous = _C._set_quiet_fallbacks(True)
        try:
            return original(self, tensor_contents=tensor_contents)
        finally:
            _C._set_quiet_fallbacks(previous)

    tensor_str._str = _str


_install_quiet_printing()
