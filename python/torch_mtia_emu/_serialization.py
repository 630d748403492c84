"""torch.save / torch.load (and copy.deepcopy) of device tensors, through CPU storages.

PyTorch 1.13's Python layer cannot handle a privateuseone storage (copying one, or building a
tensor on one, fails with "Invalid device for storage"), so device tensors never put a device
storage into the pickle:

* saving: a device tensor pickles as PyTorch's usual (storage, offset, size, stride) record,
  but its storage is a CPU copy of the whole device storage, tagged "privateuseone:0" in the
  file. Views of one device storage saved together share one CPU copy, so they still share
  storage after loading.
* loading: a storage tagged "privateuseone:0" (or any storage, with
  map_location="privateuseone") is restored on the CPU and marked; the tensor built on it is
  then moved to the device with its sizes, strides and storage offset. map_location="cpu" (or
  a dict / function choosing the CPU) leaves it on the CPU, so files load without this package.

The file format is PyTorch's own zip format: no NumPy, no extra files.

copy.deepcopy of a device tensor hits the same limitation (it copies the storage from Python);
device tensors are deep-copied with a device clone instead (views deep-copied together do not
share storage afterwards).
"""

import copy
import weakref
from collections import OrderedDict

import torch
import torch._utils
import torch.serialization

_DEVICE = "privateuseone"
_TAG = f"{_DEVICE}:0"

# CPU storages that stand for device storages while a torch.save runs: data_ptr -> weakref.
_saved_from_device = {}
# device storage data_ptr -> weakref to its CPU copy, so views of one storage share the copy.
_host_copies = {}
# CPU storages (data_ptr) that torch.load restored for the device.
_restore_on_device = set()


def _host_storage(t: torch.Tensor) -> torch.storage.TypedStorage:
    """The whole device storage of `t`, copied to a CPU storage (one copy per storage)."""
    device_storage = t.storage()
    key = device_storage.data_ptr()
    ref = _host_copies.get(key)
    untyped = ref() if ref is not None else None
    if untyped is None or untyped.nbytes() != device_storage.nbytes():
        _forget_dead(_host_copies)
        _forget_dead(_saved_from_device)
        n = device_storage.nbytes() // t.element_size()
        flat = t.detach().as_strided((n,), (1,), 0).cpu()
        untyped = flat.storage().untyped()
        _host_copies[key] = weakref.ref(untyped)
        _saved_from_device[untyped.data_ptr()] = weakref.ref(untyped)
    return torch.storage.TypedStorage(wrap_storage=untyped, dtype=t.dtype)


def _forget_dead(refs: dict) -> None:
    for k in [k for k, r in refs.items() if r() is None]:
        del refs[k]


def _tag(storage):
    ref = _saved_from_device.get(storage.data_ptr())
    if ref is not None and ref() is not None:
        return _TAG
    if storage.device.type == _DEVICE:
        return _TAG
    return None


def _deserialize(storage, location: str):
    if not location.startswith(_DEVICE):
        return None
    index = location[len(_DEVICE):].lstrip(":")
    if index not in ("", "0"):
        raise RuntimeError(f"torch_mtia_emu: cannot restore a storage on '{location}': the "
                           f"in-process emulator has one device, {_TAG}; use "
                           f"map_location='{_DEVICE}' or 'cpu'")
    _restore_on_device.add(storage.data_ptr())
    return storage


def _install(original_reduce, original_rebuild):
    def _reduce_ex_internal(self, proto):
        if self.device.type != _DEVICE:
            return original_reduce(self, proto)
        torch._tensor.check_serializing_named_tensor(self)
        torch.utils.hooks.warn_if_has_hooks(self)
        args = (_host_storage(self), self.storage_offset(), tuple(self.size()), self.stride(),
                self.requires_grad, OrderedDict())
        return (torch._utils._rebuild_tensor_v2, args)

    def _rebuild_tensor(storage, storage_offset, size, stride):
        host = original_rebuild(storage, storage_offset, size, stride)
        # One device copy per restored storage, kept on the storage object for the load (so
        # views stay views of one device storage).
        flat = getattr(storage, "_mtia_device_copy", None)
        if flat is None:
            untyped = storage.untyped() if hasattr(storage, "untyped") else storage
            if untyped.device.type != "cpu" or untyped.data_ptr() not in _restore_on_device:
                return host
            _restore_on_device.discard(untyped.data_ptr())
            n = untyped.nbytes() // host.element_size()
            flat = torch.empty(0, dtype=host.dtype).set_(untyped, 0, (n,), (1,)).to(_DEVICE)
            storage._mtia_device_copy = flat
        return flat.as_strided(size, stride, storage_offset)

    original_deepcopy = torch.Tensor.__deepcopy__

    def __deepcopy__(self, memo):
        if self.device.type != _DEVICE or type(self) is not torch.Tensor:
            return original_deepcopy(self, memo)
        if id(self) in memo:
            return memo[id(self)]
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) "
                               "support the deepcopy protocol at the moment")
        with torch.no_grad():
            new = self.clone()
        new.requires_grad_(self.requires_grad)
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        new.__dict__ = copy.deepcopy(self.__dict__, memo)
        memo[id(self)] = new
        return new

    torch.Tensor._reduce_ex_internal = _reduce_ex_internal
    torch._utils._rebuild_tensor = _rebuild_tensor
    torch.Tensor.__deepcopy__ = __deepcopy__


def register() -> None:
    # Ahead of the CPU tagger (priority 10): CPU copies of device storages are tagged as such.
    torch.serialization.register_package(5, _tag, _deserialize)
    _install(torch.Tensor._reduce_ex_internal, torch._utils._rebuild_tensor)
