"""PyTorch's device-type test machinery on the emulated device: OpInfo tests instantiated for
mtia by torch_mtia_emu.device_type_tests (the test base PyTorch also takes through
TORCH_TEST_DEVICES), each comparing the device's results with the CPU's on the op's own sample
inputs, forward and backward.

By default a chosen subset of op_db runs (OPS below: about a minute on two cores);
MTIA_EMU_DEVICE_TYPE_OPS=REGEX runs the ops whose full name matches instead, e.g. "." for all
of them (docs/device-type-tests.md)."""
import os
import re
import subprocess
import sys
import unittest

import torch
import torch_mtia_emu  # noqa: F401
from torch.testing._internal.common_device_type import (
    OpDTypes,
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase
from torch.utils._pytree import tree_map

from torch_mtia_emu import device_type_tests

MTIATestBase = device_type_tests.register()

# Ops chosen to cover the device's kernel families: pointwise (unary, binary, ternary,
# comparison), reductions, matmul, normalization, activation, softmax, indexing, shape ops and
# the CPU fallback (an op without a device kernel still answers like the CPU).
OPS = {
    "abs", "neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "sin", "erf",
    "add", "sub", "mul", "div.no_rounding_mode", "maximum", "minimum", "pow", "fmod",
    "addcmul", "where", "clamp", "lerp",
    "eq", "lt", "ge", "logical_and",
    "sum", "mean", "amax", "argmax", "var", "cumsum",
    "mm", "bmm", "addmm", "matmul",
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu",
    "softmax", "log_softmax", "nn.functional.layer_norm", "nn.functional.linear",
    "nn.functional.cross_entropy",
    "cat", "stack", "transpose", "permute", "index_select", "gather", "masked_fill",
    "flip", "sort", "topk",
    "linalg.det",  # no device kernel: the CPU fallback
}

_selected = os.environ.get("MTIA_EMU_DEVICE_TYPE_OPS")
if _selected:
    SELECTED = [op for op in op_db if re.search(_selected, op.full_name)]
else:
    SELECTED = [op for op in op_db if op.full_name in OPS]

# float32 for every op; the integer dtypes for the ops that take them.
DTYPES = (torch.float32, torch.int64, torch.int32, torch.bool)


def to_cpu(x):
    return x.detach().cpu() if isinstance(x, torch.Tensor) else x


def cpu_sample(sample):
    """The sample with its tensors copied to the CPU (requires_grad kept), and a `device`
    argument made the CPU."""
    cpu = sample.transform(lambda x: to_cpu(x).requires_grad_(x.requires_grad)
                           if isinstance(x, torch.Tensor) else x)
    if "device" in cpu.kwargs:
        cpu.kwargs = dict(cpu.kwargs, device="cpu")
    # A device among the arguments (x.to("mtia:0")) becomes the CPU.
    cpu.args = tuple("cpu" if isinstance(a, (str, torch.device)) and str(a).startswith("mtia")
                     else a for a in cpu.args)
    return cpu


def tolerance(dtype):
    """float32 results: 1e-4 (sums and dot products accumulate in another order than the
    CPU's); others: assertEqual's own (exact for integers and bool)."""
    return {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {}


# Ops returning (values, indices) whose indices may pick any of several equal values: the
# values must be equal, and the indices must point at them.
TIED_INDICES = {"topk": 1, "sort": 0, "kthvalue": 1}  # the position of `dim` in the args


def check_tied_indices(test, op, cpu, actual, expected):
    values, indices = actual
    test.assertEqual(values, expected[0], exact_device=True)
    position = TIED_INDICES[op.full_name]
    dim = cpu.args[position] if len(cpu.args) > position else cpu.kwargs.get("dim", -1)
    source = cpu.input if cpu.input.dim() > 0 else cpu.input.reshape(1)
    dim = dim % source.dim()
    index = indices.reshape(values.shape) if values.dim() > 0 else indices.reshape(1)
    if index.dim() < source.dim():  # a reduction without keepdim
        index = index.unsqueeze(dim)
    gathered = source.gather(dim, index)
    test.assertEqual(gathered.reshape(values.shape), values, exact_device=True)


def result_device_type(sample):
    """Where the op's results belong: the `device` it is given, else the device its tensors
    are on; None when the sample says neither (a factory without `device`, a `.to(device)`)."""
    if "device" in sample.kwargs:
        return torch.device(sample.kwargs["device"]).type
    if any(isinstance(a, (str, torch.device)) for a in sample.args):
        return None
    found = []
    tree_map(lambda t: found.append(t.device.type) if isinstance(t, torch.Tensor) else None,
             (sample.input, sample.args, sample.kwargs))
    return "mtia" if "mtia" in found else None


def compare_with_cpu(test, device, dtype, op):
    """Runs every sample of `op` on the device and on the CPU; the results must be equal
    (TestCase.assertEqual's tolerance for the dtype) and stay on the device."""
    samples = list(op.sample_inputs(device, dtype, requires_grad=False))
    test.assertTrue(samples, f"{op.full_name} has no samples for {dtype}")
    for sample in samples:
        cpu = cpu_sample(sample)
        expected = op(cpu.input, *cpu.args, **cpu.kwargs)
        actual = op(sample.input, *sample.args, **sample.kwargs)
        where = result_device_type(sample)
        if where is not None:
            devices = []
            tree_map(lambda t: devices.append(t.device) if isinstance(t, torch.Tensor)
                     else None, actual)
            test.assertTrue(all(d.type == where for d in devices),
                            f"{op.full_name} left the device: {devices}")
        actual = tree_map(to_cpu, actual)
        if op.full_name in TIED_INDICES:
            check_tied_indices(test, op, cpu, actual, expected)
        else:
            test.assertEqual(actual, expected, exact_device=True, **tolerance(dtype))


def compare_backward_with_cpu(test, device, op):
    """The gradients of every float32 sample's inputs, on the device and on the CPU, for the
    same upstream gradient."""
    dtype = torch.float32
    if dtype not in op.supported_backward_dtypes("cpu"):
        raise unittest.SkipTest(f"{op.full_name} has no float32 backward")
    for sample in op.sample_inputs(device, dtype, requires_grad=True):
        results = []
        for s in (sample, cpu_sample(sample)):
            out = op(s.input, *s.args, **s.kwargs)
            outs = [t for t in (out if isinstance(out, (tuple, list)) else (out,))
                    if isinstance(t, torch.Tensor) and t.requires_grad]
            inputs = [t for t in (s.input, *s.args)
                      if isinstance(t, torch.Tensor) and t.requires_grad]
            if not outs or not inputs:
                break
            # A fixed, non-uniform upstream gradient (the same values on both devices).
            grads = [torch.linspace(-1, 1, o.numel()).to(o.dtype).reshape(o.shape)
                     .to(o.device) for o in outs]
            results.append(torch.autograd.grad(outs, inputs, grads, allow_unused=True))
        if len(results) == 2:
            # Gradients sum over other orders than the CPU's, and ill-conditioned samples
            # (layer_norm over one element) magnify rounding: 1e-4 for float32.
            test.assertEqual(tree_map(to_cpu, results[0]), results[1], exact_device=True,
                             atol=1e-4, rtol=1e-4)


class TestMTIAOps(TestCase):
    @ops(SELECTED, allowed_dtypes=DTYPES)
    def test_compare_cpu(self, device, dtype, op):
        compare_with_cpu(self, device, dtype, op)

    @ops([op for op in SELECTED if op.supports_autograd], dtypes=OpDTypes.none)
    def test_backward_compare_cpu(self, device, op):
        compare_backward_with_cpu(self, device, op)


instantiate_device_type_tests(TestMTIAOps, globals(), only_for=("mtia",))


def run_template(op):
    """Instantiates a one-op copy of the forward template for mtia and runs it."""
    class TestOne(TestCase):
        @ops([op], allowed_dtypes=(torch.float32,))
        def test_compare_cpu(self, device, dtype, op):
            compare_with_cpu(self, device, dtype, op)

    scope = {"TestOne": TestOne}
    instantiate_device_type_tests(TestOne, scope, only_for=("mtia",))
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(scope["TestOneMTIA"]).run(result)
    return result


def test_the_comparison_fails_on_a_wrong_device_result():
    # The template with one op answering wrongly on the device only must fail: a device kernel
    # that disagrees with the CPU cannot pass unnoticed.
    import copy

    add = next(op for op in op_db if op.full_name == "add")
    result = run_template(add)
    assert result.testsRun == 1 and result.wasSuccessful(), (result.failures, result.errors)

    wrong = copy.copy(add)

    def off_by_one_on_the_device(*args, **kwargs):
        out = add.op(*args, **kwargs)
        return out + 1 if out.device.type == "mtia" else out

    wrong.op = off_by_one_on_the_device
    result = run_template(wrong)
    assert result.testsRun == 1 and len(result.failures) == 1, (result.failures, result.errors)
    assert "not close" in result.failures[0][1] or "not equal" in result.failures[0][1], \
        result.failures[0][1]


def test_the_skip_list_skips_with_its_reason(monkeypatch):
    # A base whose lists skip `add` for a reason and leave one test out: instantiated through
    # PyTorch's own machinery, `add` is skipped with that reason, `mul` runs, the excluded
    # test does not exist.
    class Base(MTIATestBase):
        op_overrides = device_type_tests.build_op_overrides(
            [("add", None, None, None, "a reason to skip add")])
        test_exclusions = device_type_tests.build_test_exclusions(
            [("TestSkips", "test_left_out", "a reason to leave it out")])

    from torch.testing._internal import common_device_type
    monkeypatch.setattr(common_device_type, "device_type_test_bases", [Base])
    chosen = [op for op in op_db if op.full_name in ("add", "mul")]

    class TestSkips(TestCase):
        @ops(chosen, allowed_dtypes=(torch.float32,))
        def test_compare_cpu(self, device, dtype, op):
            compare_with_cpu(self, device, dtype, op)

        def test_left_out(self, device):
            raise AssertionError("excluded, never run")

    scope = {"TestSkips": TestSkips}
    instantiate_device_type_tests(TestSkips, scope, only_for=("mtia",))
    cls = scope["TestSkipsMTIA"]
    assert not hasattr(cls, "test_left_out_mtia")
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(cls).run(result)
    assert result.testsRun == 2 and result.wasSuccessful(), (result.failures, result.errors)
    assert [(t.id().rsplit(".", 1)[1], why) for t, why in result.skipped] == [
        ("test_compare_cpu_add_mtia_float32", "mtia: a reason to skip add")]


UPSTREAM_STYLE_SUITE = '''
import torch
from torch.testing._internal.common_device_type import (
    dtypes, instantiate_device_type_tests, ops)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests


class TestSuite(TestCase):
    @dtypes(torch.float32, torch.int64)
    def test_arange_twice(self, device, dtype):
        a = torch.arange(10, device=device, dtype=dtype)
        self.assertEqual(str(a.device), device)
        self.assertEqual((a + a).cpu(), torch.arange(10, dtype=dtype) * 2)

    @ops([op for op in op_db if op.name in ("abs", "exp")], allowed_dtypes=(torch.float32,))
    def test_ops(self, device, dtype, op):
        for s in op.sample_inputs(device, dtype):
            self.assertEqual(op(s.input, *s.args, **s.kwargs).cpu(),
                             op(s.input.cpu(), *s.args, **s.kwargs))


instantiate_device_type_tests(TestSuite, globals())

if __name__ == "__main__":
    run_tests()
'''


def test_an_upstream_style_suite_runs_on_mtia_through_torch_test_devices(tmp_path):
    # What docs/device-type-tests.md tells users to do with PyTorch's own test files.
    suite = tmp_path / "test_suite.py"
    suite.write_text(UPSTREAM_STYLE_SUITE)
    env = dict(os.environ, PYTORCH_TESTING_DEVICE_ONLY_FOR="mtia",
               TORCH_TEST_DEVICES=device_type_tests.__file__)
    # Under CI=..., run_tests() writes JUnit XML through the optional xmlrunner package.
    env.pop("CI", None)
    r = subprocess.run([sys.executable, str(suite), "-v"], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ran = sorted(re.findall(r"^(test_\w+) \(", r.stderr, re.M))
    assert ran == ["test_arange_twice_mtia_float32", "test_arange_twice_mtia_int64",
                   "test_ops_abs_mtia_float32", "test_ops_exp_mtia_float32"], r.stderr
    assert "Ran 4 tests" in r.stderr and "OK" in r.stderr


def test_every_skip_names_a_real_op_and_is_documented():
    from torch_mtia_emu import device_type_skips

    names = {op.full_name for op in op_db}
    docs = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs",
                             "device-type-tests.md")).read()
    for op, cls, test, dtypes, reason in device_type_skips.OP_SKIPS:
        assert op in names, f"OP_SKIPS names {op!r}, which is no OpInfo's full name"
        assert reason and f"| `{op}` |" in docs, f"{op} is not in docs/device-type-tests.md"
    for cls, test, reason in device_type_skips.TEST_SKIPS:
        assert reason and f"`{cls}.{test}`" in docs, f"{cls}.{test} is not documented"
