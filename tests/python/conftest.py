"""Shared setup for the tests of PyTorch's mtia device on the emulator.

Run with the project's interpreter, where scripts/build installed the backend:
    .venv/bin/python -m pytest -q tests/python
The whole suite shares one emulated device (one per process); tests that need another
configuration (timing on, a tiny DRAM) run a child interpreter.
"""
import os
import subprocess
import sys
import textwrap

# Functional mode unless a test asks otherwise: same results, faster (the timing model is
# checked by tests that start their own interpreter).
os.environ.setdefault("MTIA_EMU_TIMING", "0")
os.environ.setdefault("MTIA_EMU_FALLBACK", "warn")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch_mtia_emu  # noqa: E402

# The device the suite's tests use: mtia:0, or $MTIA_EMU_TEST_DEVICE (test_multi_device.py runs
# tests of the suite on mtia:1 of two devices that way).
DEVICE = torch.device("mtia", int(os.environ.get("MTIA_EMU_TEST_DEVICE", "0")))

# `import torch` loaded the backend (its torch.backends entry point), not the import above.
assert torch.mtia.is_available()

# The CPU references are computed on one thread: PyTorch's CPU kernels split their sums by
# thread count, and an ill-conditioned model (MobileNetV2's ReLU6 masks) turns that into
# gradient differences larger than the tests' tolerances, from one machine to the next.
torch.set_num_threads(1)


# The suite runs under the sanitizer's checks too ($MTIA_EMU_SANITIZE, inherited by the child
# interpreters; `scripts/test sanitize`). Two kinds of tests cannot: those that check the caching
# allocator (memcheck and initcheck turn caching off) and those whose devices share a server
# among several clients (such a server does not run the checks). Their markers say which they
# are; they are skipped then.
SANITIZE = {c for c in os.environ.get("MTIA_EMU_SANITIZE", "").split(",") if c and c != "off"}


def pytest_collection_modifyitems(config, items):
    if not SANITIZE:
        return
    for item in items:
        if item.get_closest_marker("shared_server"):
            item.add_marker(pytest.mark.skip(
                reason="a server of several clients does not run the sanitizer"))
        elif item.get_closest_marker("caching") and SANITIZE & {"memcheck", "initcheck"}:
            item.add_marker(pytest.mark.skip(
                reason="the sanitizer's memcheck and initcheck turn the caching allocator off"))


@pytest.fixture
def dev():
    return DEVICE


@pytest.fixture
def no_fallback():
    """Fails the test if any op ran on the CPU fallback inside it."""
    torch_mtia_emu.reset_fallback_counts()
    yield
    counts = torch_mtia_emu.fallback_counts()
    assert counts == {}, f"ops fell back to the CPU: {counts}"


def run_child(code: str, env=None, timeout=120) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter of this one (its own device)."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e,
                          capture_output=True, text=True, timeout=timeout)


# Element types of the device's float kernels, and the tolerances against a float32 CPU
# reference rounded once to each.
FLOATS = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3),
       torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


def layout_input(shape, layout, seed=0):
    """A seeded random CPU tensor in a layout: "contiguous", "channels_last" (4-D or 5-D) or
    "strided" (every other element of the last dimension)."""
    g = torch.Generator().manual_seed(seed)
    if layout == "strided":  # every other column of a wider tensor
        big = list(shape)
        big[-1] *= 2
        return torch.randn(big, generator=g)[..., ::2]
    x = torch.randn(shape, generator=g)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last if x.dim() == 4
                         else torch.channels_last_3d)
    return x
