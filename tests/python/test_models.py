"""The model zoo (torch_mtia_emu.zoo) trains on the device as on the CPU, with no op on the
CPU fallback: ResNet, MobileNetV2 and a VisionTransformer, BERT and GPT-2 (transformers
configs), nn.TransformerEncoder, an LSTM and a DLRM-style recommender.

For each, two SGD steps (with momentum) from the same weights on the same batches: every
step's loss, every gradient of the first step and every parameter after the second must
match the CPU's."""
import copy

import pytest
import torch
import torch_mtia_emu
import torch_mtia_emu.zoo as zoo

from conftest import DEVICE


@pytest.fixture
def fallback_is_an_error():
    mode = torch_mtia_emu.get_fallback_mode()
    torch_mtia_emu.set_fallback_mode("error")
    torch_mtia_emu.reset_fallback_counts()
    yield
    torch_mtia_emu.set_fallback_mode(mode)


def _close(got, want, tol, what):
    # Relative to the tensor's largest magnitude: deep nets (batch norm over a few values, a
    # first layer summing everything) condition some elements badly, and the CPU's own
    # float32 gradients then differ from a float64 reference by as much as the device's.
    # The floor: gradients that are 0 in exact arithmetic (a bias before batch norm) are noise.
    scale = want.detach().abs().max().item()
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=0,
                               atol=tol * scale + 5e-5, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_model_trains_like_the_cpu(name, fallback_is_an_error):
    entry = zoo.get(name)
    cpu_model = entry.build(0)
    dev_model = copy.deepcopy(cpu_model).to(DEVICE)
    cpu_model.train()
    dev_model.train()
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=entry.lr, momentum=0.9)
    dev_opt = torch.optim.SGD(dev_model.parameters(), lr=entry.lr, momentum=0.9)
    for step in range(2):
        x, y = entry.batch(step)
        cpu_opt.zero_grad()
        dev_opt.zero_grad()
        cpu_loss = entry.loss(cpu_model, x, y)
        dev_loss = entry.loss(dev_model, zoo.to_device(x, DEVICE), y.to(DEVICE))
        cpu_loss.backward()
        dev_loss.backward()
        tol = entry.tolerance if step == 0 else entry.step_tolerance
        assert abs(dev_loss.item() - cpu_loss.item()) <= tol * max(
            1.0, abs(cpu_loss.item())), f"{name} step {step}: {dev_loss.item()} vs {cpu_loss.item()}"
        if step == 0:
            for (n, pc), (_, pd) in zip(cpu_model.named_parameters(),
                                        dev_model.named_parameters()):
                if pc.grad is None:
                    assert pd.grad is None, n
                    continue
                _close(pd.grad, pc.grad, entry.grad_tolerance, f"{name} grad of {n}")
        cpu_opt.step()
        dev_opt.step()
    for (n, pc), (_, pd) in zip(cpu_model.named_parameters(), dev_model.named_parameters()):
        _close(pd, pc, entry.grad_tolerance, f"{name} {n} after two steps")
    for (n, bc), (_, bd) in zip(cpu_model.named_buffers(), dev_model.named_buffers()):
        if bc.is_floating_point():  # batch norm's running statistics
            _close(bd, bc, entry.grad_tolerance, f"{name} buffer {n}")
    assert torch_mtia_emu.fallback_counts() == {}


def test_unknown_model_is_a_clear_error():
    with pytest.raises(ValueError, match="no model 'alexnet' in the zoo"):
        zoo.get("alexnet")
