"""MTIA_EMU_WAIT: how threads wait for the device (docs/architecture.md, "Waiting: the wait
policy"). Each policy runs a training step on the device with the CPU's results; a bad value
is a clear RuntimeError at the first use, not a crash. Each case opens its own device."""
import pytest

from conftest import run_child

STEP = """
    import torch, torch_mtia_emu
    torch.manual_seed(0)
    x = torch.randn(32, 48)
    w = torch.randn(48, 16, requires_grad=True)
    wd = w.detach().to("mtia").requires_grad_()
    loss = (x @ w).tanh().sum()
    loss.backward()
    dloss = (x.to("mtia") @ wd).tanh().sum()
    dloss.backward()
    torch.mtia.synchronize()
    assert abs(loss.item() - dloss.item()) < 1e-4, (loss.item(), dloss.item())
    assert torch.allclose(w.grad, wd.grad.cpu(), atol=1e-5)
    assert torch_mtia_emu.fallback_counts() == {}, torch_mtia_emu.fallback_counts()
    print("ok")
"""


@pytest.mark.parametrize("policy", ["auto", "spin", "yield", "block"])
def test_each_policy_runs_a_step_like_the_cpu(policy):
    r = run_child(STEP, env={"MTIA_EMU_WAIT": policy, "MTIA_EMU_FALLBACK": "error"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["ok"]


def test_a_bad_value_is_a_clear_error():
    r = run_child("""
        import torch
        try:
            torch.ones(2, device="mtia")
        except RuntimeError as e:
            print("RuntimeError:", e)
    """, env={"MTIA_EMU_WAIT": "hurry"})
    assert r.returncode == 0, r.stderr
    assert "RuntimeError:" in r.stdout
    assert "MTIA_EMU_WAIT=hurry is not a wait policy" in r.stdout
    assert "auto" in r.stdout and "block" in r.stdout
