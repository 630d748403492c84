"""torch_mtia_emu: PyTorch's own MTIA device, on the mtia-emu emulated MTIA accelerator.

PyTorch 2.13 has the ``mtia`` device type, the ``torch.mtia`` module and the ``MTIA`` dispatch
keys, but no device behind them. This package supplies one: importing it registers the MTIA
hooks, the device guard (streams, events), the caching allocator, the generator, the device
kernels under the MTIA dispatch key and a CPU fallback for the ops without a kernel. It is
installed with a ``torch.backends`` entry point, so a plain ``import torch`` loads it, and then

    torch.randn(3, device="mtia"), torch.mtia.synchronize(), torch.mtia.memory_stats(), ...

run on the emulator. What is here is what is emulator-specific: opening the device with a
chip preset (``init``), the CPU fallback's counts and mode, kernel launches and counts,
simulated time, traces, and TorchInductor's launch limits for the device. The device opens on
first use, configured by ``init()`` or the environment (MTIA_EMU_PRESET, MTIA_EMU_TIMING,
MTIA_EMU_SET, MTIA_EMU_KERNELS, MTIA_EMU_FALLBACK, MTIA_EMU_TRACE); see docs/tensor-layer.md.
"""

import atexit
import os
from typing import Any, Dict, List, Optional

import torch

from . import _C
from ._compiler import compile_stats, kernel_cache_dir, reset_compile_stats
from ._compiler import register as _register_compiler
from ._inductor import inductor_config
from ._profiler import _install as _install_profiler
from ._profiler import profiler_counts
from ._serialization import register as _register_serialization

__all__ = [
    "DEVICE_TYPE", "init", "is_initialized", "presets", "fallback_counts",
    "reset_fallback_counts", "set_fallback_mode", "get_fallback_mode", "launch_kernel",
    "kernel_names", "kernel_launch_counts", "reset_kernel_launch_counts", "simulated_time_ns",
    "trace_level", "set_trace_level", "write_artifacts", "config_json", "inductor_config",
    "shutdown", "memory_reserved", "max_memory_reserved", "memory_summary", "compile_stats",
    "reset_compile_stats", "kernel_cache_dir",
]

#: The PyTorch device type of the emulated device.
DEVICE_TYPE = "mtia"


# --- the device ------------------------------------------------------------------------------

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


def is_initialized() -> bool:
    """True once the emulated device has been opened (by init() or the first use)."""
    return _C._is_initialized()


def presets() -> List[str]:
    """The chip presets that init(preset=...) and MTIA_EMU_PRESET accept by name: the preset
    files in $MTIA_EMU_PRESET_DIR, else in the installation's share/mtia-emu/presets (an
    installed package) or the source tree's presets/."""
    directory = _C._setting("MTIA_EMU_PRESET_DIR") or _C._preset_dir()
    return sorted(f[:-len(".json")] for f in os.listdir(directory) if f.endswith(".json"))


def shutdown() -> None:
    """Waits for the device, then closes it. Runs at interpreter exit; after it the device
    cannot be used again in this process."""
    _C._shutdown()


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


# --- memory: what torch.cuda has and torch.mtia lacks ---------------------------------------
# torch.mtia of PyTorch 2.13 has memory_stats/memory_allocated/max_memory_allocated; these
# three complete the set and are also installed into torch.mtia (_register).

def _memory_stats(device) -> Dict[str, Any]:
    torch.mtia._utils._get_device_index(device, optional=True)  # validates the argument
    return torch.mtia.memory_stats(device)


def memory_reserved(device=None) -> int:
    """Bytes the caching allocator holds from the device now: in tensors and in its cache."""
    return _memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None) -> int:
    """The highest memory_reserved() since the start or reset_peak_memory_stats()."""
    return _memory_stats(device).get("reserved_bytes.all.peak", 0)


def _format_bytes(n: int) -> str:
    for unit in ("B  ", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:7d} {unit}" if unit == "B  " else f"{n:7.2f} {unit}"
        n /= 1024.0
    raise AssertionError("unreachable")


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """The caching allocator's statistics as a table, like torch.cuda.memory_summary(): for
    memory in bytes (allocated, active, requested, reserved) and counts (allocations, active
    blocks, segments), each now, at its peak, and in total allocated and freed. The allocator
    has one pool, so `abbreviated` (which leaves out CUDA's per-pool rows) changes nothing."""
    del abbreviated
    s = _memory_stats(device)
    index = torch.mtia._utils._get_device_index(device, optional=True)
    width = 77
    rule = "|" + "-" * (width - 2) + "|"
    double = "|" + "=" * (width - 2) + "|"
    lines = [double,
             "|" + f" mtia-emu caching allocator, mtia:{index if index is not None else 0}"
             .center(width - 2) + "|",
             rule,
             "| " + f"{'Metric':<22}|{'Now':^12}|{'Peak':^12}|{'Tot alloc':^12}|{'Tot freed':^12}"
             + "|"]
    rows = [("Allocated memory", "allocated_bytes", True),
            ("Active memory", "active_bytes", True),
            ("Requested memory", "requested_bytes", True),
            ("Reserved memory", "reserved_bytes", True),
            ("Allocations", "allocation", False),
            ("Active allocations", "active", False),
            ("Segments", "segment", False)]
    for title, key, is_bytes in rows:
        if title == "Allocations":
            lines.append(rule)
        cells = []
        for field in ("current", "peak", "allocated", "freed"):
            v = int(s.get(f"{key}.all.{field}", 0))
            cells.append(_format_bytes(v) if is_bytes else f"{v:11d}")
        lines.append("| " + f"{title:<22}|" + "|".join(f"{c:>11} " for c in cells) + "|")
    lines.append(rule)
    dram = s.get("dram", {})
    for title, value in (("Cache hits", dram.get("num_cache_hits", 0)),
                         ("Alloc retries", s.get("num_alloc_retries", 0)),
                         ("Out-of-memory errors", s.get("num_ooms", 0))):
        lines.append("| " + f"{title:<22}|" + f"{int(value):>11} ".ljust(width - 26) + "|")
    lines.append(double)
    return "\n".join(lines) + "\n"


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


def config_json() -> str:
    """The effective chip configuration of the open device, as JSON text."""
    return _C._config_json()


# --- registration ----------------------------------------------------------------------------

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


def _install_record_memory_history() -> None:
    """torch.mtia.record_memory_history of PyTorch 2.13 does nothing while the device is not
    open yet, so recording before the first device op silently recorded nothing. Here it opens
    the device first, as torch.cuda's does."""
    original = torch.mtia.record_memory_history

    def record_memory_history(enabled="all", stacks="python", max_entries=0):
        torch.mtia.init()
        original(enabled, stacks, max_entries)

    record_memory_history.__doc__ = (
        "Starts (enabled=\"all\": stacks and the history of allocator actions; \"state\": "
        "stacks of the blocks held only) or stops (None) recording for torch.mtia.snapshot(). "
        "stacks: \"python\", \"cpp\" or \"all\". max_entries bounds the history (oldest "
        "dropped first); 0 keeps all. Opens the device.")
    torch.mtia.record_memory_history = record_memory_history


def is_current_stream_capturing() -> bool:
    """True while the current stream of the current MTIA device is capturing a graph: it
    began the capture, or it joined one by waiting for an event recorded in it (a side stream
    forked off the capturing stream). As torch.cuda.is_current_stream_capturing."""
    return _C._is_current_stream_capturing()


def _register_distributed() -> None:
    import torch.distributed as dist
    if dist.is_available():  # PyTorch built with distributed support (the PyPI builds are)
        from . import _distributed
        _distributed.register()


def _register() -> None:
    # torch.mtia seeds, reads and restores torch.mtia.default_generators[i], one per device;
    # they exist before the devices open, so seeding first and opening later works. A device
    # count that cannot be read (a malformed MTIA_EMU_DEVICES) is reported by the first
    # torch.mtia call that needs it, not by `import torch`.
    if not torch.mtia.default_generators:
        try:
            count = _C._device_count()
        except RuntimeError:
            count = 1
        torch.mtia.default_generators = tuple(_C._default_generator(i) for i in range(count))
    _install_record_memory_history()
    if not hasattr(torch.mtia, "is_current_stream_capturing"):
        torch.mtia.is_current_stream_capturing = is_current_stream_capturing
    for name in ("memory_reserved", "max_memory_reserved", "memory_summary"):
        for module in (torch.mtia, torch.mtia.memory):
            if not hasattr(module, name):
                setattr(module, name, globals()[name])
    _C._set_fallback_mode(_C._setting("MTIA_EMU_FALLBACK") or "warn")
    _register_serialization()
    _install_quiet_printing()
    _install_profiler()  # torch.profiler: device time and memory per op (docs/profiling.md)
    _register_distributed()  # the c10d backend "mtia_emu"
    _register_compiler()  # torch.compile: Inductor's backend and Dynamo's device interface
    atexit.register(_C._shutdown)


_register()
