"""PyTorch's device-type tests on the emulated MTIA device.

`torch.testing._internal.common_device_type` instantiates device-generic tests once per device
type it knows; this module adds "mtia". Two ways to use it:

* upstream suites, unchanged: name this file in TORCH_TEST_DEVICES (PyTorch runs it with
  runpy and takes TEST_CLASS), and keep only the mtia variants:

      PYTORCH_TESTING_DEVICE_ONLY_FOR=mtia \\
      TORCH_TEST_DEVICES=$(python -c "import torch_mtia_emu.device_type_tests as m; print(m.__file__)") \\
      python test/test_ops.py -k TestCommon

* in a test file: call register() before instantiate_device_type_tests(...).

The tests skipped on the device, each with its reason, are in device_type_skips.py
(docs/device-type-tests.md).
"""
import unittest

import torch
from torch.testing._internal import common_device_type
from torch.testing._internal.common_device_type import DeviceTypeTestBase

from torch_mtia_emu import device_type_skips


def build_op_overrides(entries):
    """DeviceTypeTestBase.op_overrides from OP_SKIPS-style entries: a skip, with its reason,
    for each (op full name, class, test, dtypes)."""
    from torch.testing._internal.opinfo.core import DecorateInfo

    overrides = {}
    for name, cls, test, dtypes, reason in entries:
        overrides.setdefault(name, []).append(
            DecorateInfo(unittest.skip(f"mtia: {reason}"), cls, test, dtypes=dtypes))
    return overrides


def build_test_exclusions(entries):
    """DeviceTypeTestBase.test_exclusions from TEST_SKIPS-style entries."""
    exclusions = {}
    for cls, test, _reason in entries:
        if test == "*":
            exclusions[cls] = "*"
        elif exclusions.get(cls) != "*":
            exclusions.setdefault(cls, []).append(test)
    return exclusions


class _OpOverrides:
    """MTIATestBase.op_overrides, made from the skip list on first use: the OpInfo module
    imports common_device_type, which runs this file while it is itself being imported."""

    def __init__(self):
        self._value = None

    def __get__(self, obj, owner):
        if self._value is None:
            self._value = build_op_overrides(device_type_skips.OP_SKIPS)
        return self._value


class MTIATestBase(DeviceTypeTestBase):
    """The emulated MTIA device as a device type of PyTorch's device-generic tests."""

    device_type = "mtia"
    primary_device = "mtia:0"
    op_overrides = _OpOverrides()
    test_exclusions = build_test_exclusions(device_type_skips.TEST_SKIPS)

    @classmethod
    def get_primary_device(cls):
        return cls.primary_device

    @classmethod
    def get_all_devices(cls):
        primary = cls.get_primary_device()
        others = [f"mtia:{i}" for i in range(torch.mtia.device_count())
                  if f"mtia:{i}" != primary]
        return [primary] + others

    @classmethod
    def setUpClass(cls):
        if not torch.mtia.is_available():
            raise unittest.SkipTest("the emulated MTIA device is not loaded (torch_mtia_emu)")
        cls.primary_device = f"mtia:{torch.mtia.current_device()}"

    # A device error ends the test that caused it, not the suite: the emulator reports errors
    # per call and stays usable.
    def _should_stop_test_suite(self):
        return False


def register():
    """Makes instantiate_device_type_tests() instantiate tests for mtia too (once)."""
    bases = common_device_type.device_type_test_bases
    if not any(getattr(b, "device_type", None) == "mtia" for b in bases):
        bases.append(MTIATestBase)
    return MTIATestBase


# What PyTorch takes from a file named in TORCH_TEST_DEVICES.
TEST_CLASS = MTIATestBase
