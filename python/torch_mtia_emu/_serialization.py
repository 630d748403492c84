"""torch.save, torch.load and copy.deepcopy of mtia tensors through their storages.

PyTorch 2.13 treats an mtia tensor as one without a storage: it pickles a CPU copy of the
tensor alone and deep-copies by clone(), so views of one storage come back as separate
tensors. The emulated device has real storages, so mtia tensors take PyTorch's ordinary
storage path instead: a tensor pickles as (storage, offset, size, stride) over its whole
storage, which torch.save writes as the bytes of a CPU copy tagged "mtia:0"; torch.load
restores each storage once on the device (or where map_location says), so views saved
together stay views of one storage, and deepcopy copies each storage once per memo.
"""

import copy
from collections import OrderedDict

import torch

_DEVICE = "mtia"


def _plain(t: torch.Tensor) -> bool:
    return (t.device.type == _DEVICE and type(t) is torch.Tensor and t.layout == torch.strided
            and not t.is_quantized and not t.is_nested)


def _install() -> None:
    original_reduce = torch.Tensor._reduce_ex_internal
    original_deepcopy = torch.Tensor.__deepcopy__

    def _reduce_ex_internal(self, proto):
        if not _plain(self) or torch.serialization._serialization_tls.skip_data:
            return original_reduce(self, proto)
        torch.utils.hooks.warn_if_has_hooks(self)
        metadata = torch._utils.get_tensor_metadata(self)
        if self.dtype in torch.storage._new_dtypes():
            return (torch._utils._rebuild_tensor_v3,
                    (self.untyped_storage(), self.storage_offset(), tuple(self.size()),
                     self.stride(), self.requires_grad, OrderedDict(), self.dtype, metadata))
        storage = torch.storage.TypedStorage(wrap_storage=self.untyped_storage(),
                                             dtype=self.dtype, _internal=True)
        return (torch._utils._rebuild_tensor_v2,
                (storage, self.storage_offset(), tuple(self.size()), self.stride(),
                 self.requires_grad, OrderedDict(), metadata))

    def __deepcopy__(self, memo):
        if not _plain(self):
            return original_deepcopy(self, memo)
        if id(self) in memo:
            return memo[id(self)]
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) "
                               "support the deepcopy protocol at the moment")
        with torch.no_grad():
            storage = self._typed_storage()._deepcopy(memo)
            new = torch.empty(0, dtype=self.dtype, device=self.device)
            new.set_(storage._untyped_storage, self.storage_offset(), self.size(), self.stride())
        new.requires_grad_(self.requires_grad)
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        new.__dict__ = copy.deepcopy(self.__dict__, memo)
        memo[id(self)] = new
        return new

    torch.Tensor._reduce_ex_internal = _reduce_ex_internal
    torch.Tensor.__deepcopy__ = __deepcopy__


def register() -> None:
    _install()
