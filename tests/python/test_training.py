"""A small model trained on the device follows the CPU's loss curve: forward, backward and
the optimizer step all on device kernels, no CPU fallback."""
import pytest
import torch
import torch_mtia_emu

from conftest import DEVICE


def make_mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 64), torch.nn.Tanh(),
        torch.nn.Linear(64, 64), torch.nn.SiLU(),
        torch.nn.LayerNorm(64),
        torch.nn.Linear(64, 10))


def data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(128, 32, generator=g)
    y = torch.randint(0, 10, (128,), generator=g)
    return x, y


def train(device, optimizer, steps):
    model = make_mlp().to(device)
    opt = optimizer(model.parameters())
    x, y = (t.to(device) for t in data())
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


OPTIMIZERS = {
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "adam_foreach": lambda p: torch.optim.Adam(p, lr=3e-3, foreach=True),
    "adamw": lambda p: torch.optim.AdamW(p, lr=3e-3, weight_decay=0.01),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_mlp_training_follows_the_cpu_loss_curve(name, no_fallback):
    steps = 15
    cpu_losses, cpu_params = train("cpu", OPTIMIZERS[name], steps)
    dev_losses, dev_params = train(DEVICE, OPTIMIZERS[name], steps)
    assert cpu_losses[-1] < cpu_losses[0] * 0.9  # the model does learn
    for step, (c, d) in enumerate(zip(cpu_losses, dev_losses)):
        assert d == pytest.approx(c, rel=1e-4, abs=1e-5), f"step {step}"
    for c, d in zip(cpu_params, dev_params):
        torch.testing.assert_close(d, c, rtol=1e-3, atol=1e-4)


def test_mixed_precision_forward_stays_close(no_fallback):
    model = make_mlp()
    x, _ = data()
    ref = model(x)
    half = model.to(DEVICE, torch.bfloat16)
    got = half(x.to(DEVICE, torch.bfloat16)).float().cpu()
    torch.testing.assert_close(got, ref, rtol=0.1, atol=0.1)
