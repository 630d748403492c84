"""torch.save / torch.load of device tensors through CPU storages, with map_location."""
import io

import pytest
import torch
import torch_mtia_emu  # noqa: F401  (registers the backend and its serialization)

from conftest import DEVICE, run_child


def _roundtrip(obj, **load_args):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_args)


def test_device_tensors_come_back_on_the_device_with_their_layout():
    x = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    d = x.to(DEVICE)
    views = {"full": d, "slice": d[1:, 2:7:2], "t": d.t(), "row": d[3]}
    back = _roundtrip(views)
    for k, v in views.items():
        assert back[k].device == DEVICE, k
        assert back[k].shape == v.shape and back[k].stride() == v.stride(), k
        assert back[k].storage_offset() == v.storage_offset(), k
        assert torch.equal(back[k].cpu(), v.cpu()), k
    # Views saved together still share one device storage.
    assert back["slice"].data_ptr() - back["full"].data_ptr() == \
        views["slice"].storage_offset() * 4
    back["full"][1, 2] = -1.0
    assert back["slice"][0, 0].item() == -1.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int8, torch.int64,
                                   torch.bool, torch.float64])
def test_dtypes_roundtrip(dtype):
    x = (torch.arange(10) % 3).to(dtype)
    back = _roundtrip(x.to(DEVICE))
    assert back.device == DEVICE and back.dtype == dtype and torch.equal(back.cpu(), x)


def test_map_location_cpu_and_device():
    x = torch.randn(3, 5)
    on_cpu = _roundtrip({"w": x.to(DEVICE)}, map_location="cpu")
    assert on_cpu["w"].device.type == "cpu" and torch.equal(on_cpu["w"], x)
    as_dict = _roundtrip(x.to(DEVICE), map_location={"mtia:0": "cpu"})
    assert as_dict.device.type == "cpu"
    to_dev = _roundtrip(x, map_location="mtia")
    assert to_dev.device == DEVICE and torch.equal(to_dev.cpu(), x)
    to_dev2 = _roundtrip(x, map_location=torch.device("mtia"))
    assert to_dev2.device == DEVICE
    with pytest.raises(RuntimeError, match="device_count\(\) is 1"):
        _roundtrip(x, map_location="mtia:1")


def test_state_dict_roundtrip_and_requires_grad():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    model.to(DEVICE)
    sd = _roundtrip(model.state_dict())
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    fresh.to(DEVICE).load_state_dict(sd)
    x = torch.randn(5, 4).to(DEVICE)
    torch.testing.assert_close(fresh(x).cpu(), model(x).cpu())
    p = _roundtrip(torch.nn.Parameter(torch.ones(2).to(DEVICE)))
    assert p.requires_grad and p.device == DEVICE


def test_file_saved_on_device_loads_without_the_backend(tmp_path):
    path = tmp_path / "t.pt"
    torch.save({"a": torch.arange(5.).to(DEVICE)}, path)
    r = run_child(f"""
        import torch
        t = torch.load({str(path)!r}, map_location="cpu")
        print(t["a"].device, t["a"].tolist())
    """, env={"PYTHONPATH": ""})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "cpu [0.0, 1.0, 2.0, 3.0, 4.0]"


def test_deepcopy_of_device_tensors_and_models():
    import copy
    x = torch.arange(6.).reshape(2, 3).t().to(DEVICE).requires_grad_()
    x.grad = torch.ones(3, 2, device=DEVICE)
    y = copy.deepcopy(x)
    assert y.device == DEVICE and y.requires_grad and torch.equal(y.detach().cpu(),
                                                                  x.detach().cpu())
    assert y.data_ptr() != x.data_ptr() and torch.equal(y.grad.cpu(), torch.ones(3, 2))
    model = torch.nn.Sequential(torch.nn.Linear(3, 2)).to(DEVICE)
    twin = copy.deepcopy(model)
    inp = torch.randn(4, 3).to(DEVICE)
    torch.testing.assert_close(twin(inp).cpu(), model(inp).cpu())
