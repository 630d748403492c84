"""Shared setup for the torch_mtia_emu tests.

Run with Debian's python3 against the build tree:
    PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/python
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

DEVICE = torch.device("privateuseone", 0)


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
    """Runs `code` in a fresh interpreter with this one's PYTHONPATH (its own device)."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e,
                          capture_output=True, text=True, timeout=timeout)
