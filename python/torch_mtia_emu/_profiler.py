"""torch.profiler on the emulated device: the Python half (docs/profiling.md).

The device's activities reach the profiler through Kineto (the native module registers an
activity profiler for ProfilerActivity.MTIA at import). PyTorch 2.13's post-processing
(``torch.autograd.profiler.profile._parse_kineto_results``) attributes device kernels and
device memory to the operators that issued them for CUDA, XPU and PrivateUse1 devices but not
for MTIA. This module adds the same attribution for MTIA device activities, so that
``key_averages()`` shows each operator's device time (``device_time_total``,
``self_device_time_total``) and, with ``profile_memory=True``, its device memory. It changes
nothing for profiles of other devices, and nothing where PyTorch already attributed them. It
also makes the end of a profile wait for every open device, not only the current one.
"""

import bisect

import torch
from torch.autograd import DeviceType

_MEMORY_EVENT_NAME = "[memory]"


def _attach_device_time(events):
    """Appends each MTIA device activity to the operator it is linked to, as a kernel."""
    by_op = {}
    for e in events:
        if e.device_type == DeviceType.MTIA and e.linked_correlation_id > 0:
            by_op.setdefault(e.linked_correlation_id, []).append(e)
    if not by_op:
        return
    for op in events:
        if op.device_type != DeviceType.CPU or op.is_async or op.linked_correlation_id != 0:
            continue
        device_events = by_op.get(op.id)
        if not device_events or len(op.kernels) >= len(device_events):
            continue
        for d in device_events:
            op.append_kernel(d.name, d.device_index, d.time_range.end - d.time_range.start)


def _attach_device_memory(events, result):
    """Adds the MTIA allocations and frees made inside each operator to its device memory."""
    records = [
        (r.start_ns(), r.nbytes())
        for r in result.events()
        if r.name() == _MEMORY_EVENT_NAME and r.device_type() == DeviceType.MTIA
    ]
    if not records:
        return
    records.sort()
    starts = [t for t, _ in records]
    prefix = [0]
    for _, n in records:
        prefix.append(prefix[-1] + n)
    origin = result.trace_start_ns()
    for op in events:
        if op.device_type != DeviceType.CPU or op.name == _MEMORY_EVENT_NAME:
            continue
        lo = bisect.bisect_left(starts, origin + int(op.time_range.start * 1000))
        hi = bisect.bisect_right(starts, origin + int(op.time_range.end * 1000))
        if hi > lo:
            op.device_memory_usage += prefix[hi] - prefix[lo]


def _install():
    profile = torch.autograd.profiler.profile
    original = profile._parse_kineto_results
    if getattr(original, "_mtia_emu", False):
        return

    def _parse_kineto_results(self, result, timeout_s=None):
        events = original(self, result, timeout_s=timeout_s)
        if self.use_device == "mtia":
            _attach_device_time(events)
            if self.profile_memory:
                _attach_device_memory(events, result)
        return events

    _parse_kineto_results._mtia_emu = True
    _parse_kineto_results.__doc__ = original.__doc__
    profile._parse_kineto_results = _parse_kineto_results

    # Before it stops, the profiler synchronizes the current device and stops nothing if that
    # raises, leaving PyTorch's profiler half enabled. Here every open device is synchronized
    # (their work belongs to the profile too), the profiler always stops, and a device error
    # is raised afterwards; devices closed by shutdown() are skipped.
    original_exit = profile.__exit__

    def __exit__(self, exc_type, exc_val, exc_tb):
        if not (self.enabled and self.use_device == "mtia"):
            return original_exit(self, exc_type, exc_val, exc_tb)
        from . import _C

        error = _C._profiler_synchronize()
        self.use_device = None
        try:
            result = original_exit(self, exc_type, exc_val, exc_tb)
        finally:
            self.use_device = "mtia"
        if error and exc_type is None:
            raise RuntimeError(error)
        return result

    __exit__._mtia_emu = True
    __exit__.__doc__ = original_exit.__doc__
    profile.__exit__ = __exit__


def profiler_counts():
    """What the device's activity profiler holds: (recording, device activities, runtime calls,
    dropped records) of the profile that records now, else of the latest one."""
    from . import _C

    return _C._profiler_counts()
