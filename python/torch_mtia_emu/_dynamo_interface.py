"""TorchDynamo's and TorchInductor's device interface for "mtia", backed by the emulator.

PyTorch 2.13 ships ``torch._dynamo.device_interface.MtiaInterface`` for a Triton-based MTIA
stack: it claims Triton support, imports ``triton`` to check for it and hands out the property
dict of ``torch.mtia.get_device_properties()``, which Inductor reads as attributes
(``props.multi_processor_count``, ``props.name``). The emulator has no Triton, so
``register()`` replaces it with ``MtiaEmuInterface``: the same ``torch.mtia`` calls, properties
that read as attributes and as a dict, argument checks with clear errors, and no Triton.

Importing torch._dynamo runs the hook that calls register() (torch_mtia_emu._compiler), so this
module imports it only inside register() and interface(): at the top it would call register()
on this module before it has one.
"""

from typing import Any, Dict, Optional

import torch

__all__ = ["MtiaEmuInterface", "MtiaDeviceProperties", "interface", "register"]

# The dtypes the device kernels take; the others run on the CPU fallback.
_KERNEL_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16, torch.int8,
                            torch.int32, torch.int64, torch.bool})


class MtiaDeviceProperties(dict):
    """torch.mtia.get_device_properties()'s dict, also readable as attributes
    (``props.name``, ``props.multi_processor_count``), as Inductor reads CUDA's properties."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"mtia device properties have no {name!r}; they have "
                                 f"{', '.join(sorted(self))}") from None


def _device_index(device: Any, what: str) -> int:
    """The mtia device index that `device` names (None, "mtia", torch.device("mtia"): the
    current one), checked against the device count, or an error saying what was wrong."""
    if isinstance(device, torch.mtia.device):
        device = device.idx
    if isinstance(device, str):
        try:
            device = torch.device(device)
        except RuntimeError as e:
            raise ValueError(f"{what}: {device!r} is not a device name; pass an mtia device "
                             f"such as 'mtia', 'mtia:0' or an index") from e
    if isinstance(device, torch.device):
        if device.type != "mtia":
            raise ValueError(f"{what}: expected an mtia device, got {device}; pass 'mtia', "
                             f"'mtia:N' or an index")
        device = device.index
    if device is None:
        return torch.mtia.current_device()
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"{what}: expected an mtia device (a torch.device, 'mtia:N' or an "
                        f"index), got {device!r}")
    count = torch.mtia.device_count()
    if not 0 <= device < count:
        # A RuntimeError, as torch.mtia's own calls raise for an index out of range.
        have = "mtia:0" if count == 1 else f"mtia:0 .. mtia:{count - 1}"
        raise RuntimeError(f"{what}: mtia:{device} does not exist: this process has {count} "
                           f"MTIA device{'s' if count != 1 else ''} ({have}); start it with "
                           f"MTIA_EMU_DEVICES=N for N devices")
    return device


def _properties(index: int) -> MtiaDeviceProperties:
    return MtiaDeviceProperties(torch.mtia.get_device_properties(index))


class _Worker:
    """The queries Inductor makes where it should not reach the device again (its compile
    workers): the current device it was told, and properties cached per device. Only the
    devices asked about are opened (each served device is a process of its own)."""

    _current: Optional[int] = None
    _properties: Dict[int, MtiaDeviceProperties] = {}

    @staticmethod
    def set_device(device: int) -> None:
        _Worker._current = _device_index(device, "Worker.set_device")

    @staticmethod
    def current_device() -> int:
        return _Worker._current if _Worker._current is not None else torch.mtia.current_device()

    @staticmethod
    def get_device_properties(device: Any = None) -> MtiaDeviceProperties:
        if device is None:
            index = _Worker.current_device()
        else:
            index = _device_index(device, "Worker.get_device_properties")
        if index not in _Worker._properties:
            _Worker._properties[index] = _properties(index)
        return _Worker._properties[index]


class _Methods:
    """MtiaEmuInterface's own attributes, ahead of PyTorch's MtiaInterface (interface())."""

    # The torch.mtia objects themselves, as in PyTorch's MtiaInterface: Dynamo matches calls
    # against the registered interfaces' `stream`, `current_stream` and `Event` by identity.
    device = torch.mtia.device
    Event = torch.mtia.Event
    Stream = torch.mtia.Stream
    stream = staticmethod(torch.mtia.stream)
    current_stream = staticmethod(torch.mtia.current_stream)
    set_stream = staticmethod(torch.mtia.set_stream)
    _set_stream_by_id = staticmethod(torch.mtia._set_stream_by_id)
    current_device = staticmethod(torch.mtia.current_device)
    device_count = staticmethod(torch.mtia.device_count)
    memory_allocated = staticmethod(torch.mtia.memory_allocated)
    Worker = _Worker

    @staticmethod
    def is_available() -> bool:
        return torch.mtia.is_available()

    @staticmethod
    def set_device(device: Any) -> None:
        torch.mtia.set_device(_device_index(device, "set_device"))

    # DeviceGuard's pair: exchange_device on entry, maybe_exchange_device with the previous
    # index on exit. A negative index (no device) changes nothing and gives -1, as CUDA's.
    @staticmethod
    def exchange_device(device: int) -> int:
        """Makes `device` current; returns the device that was current."""
        if isinstance(device, int) and device < 0:
            return -1
        return torch.mtia._exchange_device(_device_index(device, "exchange_device"))

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        """As exchange_device; DeviceGuard restores the previous device with it."""
        if isinstance(device, int) and device < 0:
            return -1
        return torch.mtia._maybe_exchange_device(_device_index(device, "maybe_exchange_device"))

    @staticmethod
    def synchronize(device: Any = None) -> None:
        """Waits for the work queued on every stream of the device (the current one)."""
        torch.mtia.synchronize(_device_index(device, "synchronize"))

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        """The id of the device's current stream, as Inductor's generated code passes it."""
        return torch._C._mtia_getCurrentRawStream(_device_index(device_idx, "get_raw_stream"))

    @staticmethod
    def get_device_properties(device: Any = None) -> MtiaDeviceProperties:
        return _properties(_device_index(device, "get_device_properties"))

    @staticmethod
    def get_compute_capability(device: Any = None) -> Any:
        """(major, minor) of the chip generation, e.g. (2, 0) for mtia-v2, as
        torch.mtia.get_device_capability() and PyTorch's own MtiaInterface give it."""
        return torch.mtia.get_device_capability(_device_index(device, "get_compute_capability"))

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @classmethod
    def is_dtype_supported(cls, dtype: torch.dtype, including_emulation: bool = False) -> bool:
        """Whether the device kernels take `dtype`; with including_emulation, every dtype (the
        others run on the CPU fallback)."""
        return including_emulation or dtype in _KERNEL_DTYPES

    @staticmethod
    def is_triton_capable(device: Any = None) -> bool:
        """False: the emulator runs no Triton kernels."""
        return False

    @staticmethod
    def raise_if_triton_unavailable(device: Any = None) -> None:
        """Nothing to raise: what torch.compile runs on this device are the emulator's own
        kernels, not Triton's, so a missing `triton` package is no obstacle (PyTorch's
        MtiaInterface would import triton here and fail)."""
        _device_index(device, "raise_if_triton_unavailable")


_interface: Optional[type] = None


def interface() -> type:
    """MtiaEmuInterface: a subclass of PyTorch's MtiaInterface with _Methods' attributes."""
    global _interface
    if _interface is None:
        from torch._dynamo import device_interface  # may call register() on its way
        if _interface is None:
            _interface = type("MtiaEmuInterface", (_Methods, device_interface.MtiaInterface),
                              {"__doc__": "The device interface of the emulated MTIA device.",
                               "__module__": __name__})
    return _interface


def __getattr__(name: str) -> Any:
    if name == "MtiaEmuInterface":
        return interface()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register() -> None:
    """Registers MtiaEmuInterface for "mtia" and "mtia:0" .. "mtia:N-1". Idempotent."""
    from torch._dynamo import device_interface

    cls = interface()
    # PyTorch registers its own MtiaInterface on the first lookup; letting that happen first
    # keeps it from replacing this one later. A device count that cannot be read (a malformed
    # MTIA_EMU_DEVICES) is reported by the first torch.mtia call that needs it.
    try:
        device_interface.get_registered_device_interfaces()
        count = torch.mtia.device_count()
    except RuntimeError:
        count = 0
    device_interface.register_interface_for_device("mtia", cls)
    for i in range(count):
        device_interface.register_interface_for_device(f"mtia:{i}", cls)
