"""TorchInductor's MTIA guardrails, set from the emulated device's launch limits.

PyTorch 2.13's torch._inductor.config has two limits that exist for MTIA:
``combo_kernel_max_num_args`` (the most buffers one combo kernel takes) and
``max_fusion_unique_io_buffers`` (the most unique input/output buffers a fused kernel may
touch). The emulator enforces the device's own limits on every launch (too many arguments or
buffers is an error for that launch), so Inductor should be told the same numbers:

    with torch._inductor.config.patch(torch_mtia_emu.inductor_config()):
        fn = torch.compile(model)
"""

from typing import Dict

from . import _C


def inductor_config() -> Dict[str, int]:
    """The torch._inductor.config values for the open device (opens it): its kernels take at
    most ``max_kernel_args`` arguments that point into at most ``max_kernel_buffers`` distinct
    allocations (torch.mtia.get_device_properties())."""
    p = _C._properties()
    return {
        "combo_kernel_max_num_args": int(p["max_kernel_args"]),
        "max_fusion_unique_io_buffers": int(p["max_kernel_buffers"]),
    }
