"""What PyTorch's device-type tests skip on the emulated MTIA device, each with its reason.

The one list the MTIA test base (device_type_tests.py) reads; docs/device-type-tests.md shows
it. Entries name generic tests (no `_mtia` or dtype suffix) and OpInfo full names
(`OpInfo.full_name`: the op's name and variant, e.g. "div.floor_rounding").
"""

# Whole test classes or single tests left out of instantiation: (class, test or "*", reason).
TEST_SKIPS = []

_UNINITIALIZED = "returns uninitialized memory: its values cannot be compared with the CPU's"
_SPARSE = ("sparse layouts are not supported on mtia (no SparseMTIA kernels); the op raises "
           "NotImplementedError or RuntimeError saying so")

# Ops skipped in some or all tests: (op full name, class or None for every class, test or
# None for every test, dtypes or None for every dtype, reason).
OP_SKIPS = [
    ("empty", None, "test_compare_cpu", None, _UNINITIALIZED),
    ("empty_like", None, "test_compare_cpu", None, _UNINITIALIZED),
    ("empty_permuted", None, "test_compare_cpu", None, _UNINITIALIZED),
    ("empty_strided", None, "test_compare_cpu", None, _UNINITIALIZED),
    ("new_empty", None, "test_compare_cpu", None, _UNINITIALIZED),
    ("new_empty_strided", None, "test_compare_cpu", None, _UNINITIALIZED),
    ("as_strided.partial_views", None, None, None,
     "reads storage outside the input view (storage_offset), which a copy of the view to the "
     "CPU does not carry"),
    ("linalg.eig", None, "test_backward_compare_cpu", None,
     "the test's fixed upstream gradient makes the loss depend on the eigenvectors' phase, "
     "which linalg_eig_backward refuses on every device"),
    ("nn.functional.embedding_bag", None, None, None,
     "its samples with sparse=True need sparse gradients, which mtia does not support (a "
     "RuntimeError says so)"),
    ("sparse.sampled_addmm", None, None, None, _SPARSE),
    ("to_sparse", None, None, None, _SPARSE),
]
