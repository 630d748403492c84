"""What PyTorch's device-type tests skip on the emulated MTIA device, each with its reason.

The one list the MTIA test base (device_type_tests.py) reads; docs/device-type-tests.md shows
it. Entries name generic tests (no `_mtia` or dtype suffix) and OpInfo full names
(`OpInfo.full_name`: the op's name and variant, e.g. "div.floor_rounding").
"""

# Whole test classes or single tests left out of instantiation: (class, test or "*", reason).
TEST_SKIPS = []

# Ops skipped in some or all tests: (op full name, class or None for every class, test or
# None for every test, dtypes or None for every dtype, reason).
OP_SKIPS = []
