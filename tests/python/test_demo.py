"""The README's main job (python -m torch_mtia_emu.demo) and the trace options it uses.

Each test runs its own interpreter: the demo opens the device with its own preset, timing and
trace level, which the suite's shared device cannot change.
"""
import json
import os

from conftest import run_child


def run_demo(out, *args, env=None):
    code = ("import sys, torch_mtia_emu.demo as d; "
            f"sys.exit(d.main({[ '--out', str(out), *args]!r}))")
    return run_child(code, env=env, timeout=300)


def slices(trace, cat=None):
    return [e for e in trace["traceEvents"] if e.get("ph") == "X"
            and (cat is None or e.get("cat") == cat)]


def test_demo_trains_like_the_cpu_and_writes_its_trace(tmp_path):
    r = run_demo(tmp_path, "--steps", "3", "--hidden", "32", "--trace", "units",
                 env={"MTIA_EMU_TIMING": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "demo: PASS" in r.stdout
    losses = json.loads((tmp_path / "losses.json").read_text())
    assert len(losses["device"]) == 3
    # Independent of the demo's own check: every step's loss against the CPU's.
    for d, c in zip(losses["device"], losses["cpu"]):
        assert abs(d - c) <= 1e-4
    assert losses["device"][-1] < losses["device"][0]
    assert losses["fallbacks"] == {}
    assert losses["simulated_us"] > 0  # timing on: the steps took simulated time
    assert losses["kernel_launches"].get("addmm", 0) >= 3 * 3  # 3 Linear layers a step

    trace = json.loads((tmp_path / "trace.json").read_text())
    names = {e["name"] for e in slices(trace)}
    assert "addmm" in names  # the kernels of the step are on the timeline
    # Unit level: PE unit operations are traced too.
    threads = {e["args"]["name"] for e in trace["traceEvents"]
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    assert any(t.endswith(" dpe") for t in threads), sorted(threads)[:20]
    config = json.loads((tmp_path / "config.json").read_text())
    assert "mtia-v2" in json.dumps(config)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["launches"]["count"] == sum(losses["kernel_launches"].values())
    assert (tmp_path / "loss.png").stat().st_size > 0


def test_demo_rejects_bad_arguments(tmp_path):
    r = run_demo(tmp_path, "--steps", "0")
    assert r.returncode == 2
    assert "--steps must be at least 1" in r.stderr
    r = run_demo(tmp_path, "--classes", "1")
    assert r.returncode == 2
    assert "--classes must be at least 2" in r.stderr
    assert not (tmp_path / "trace.json").exists()
    r = run_demo(tmp_path, "--preset", "mtia-v9")
    assert r.returncode == 2
    assert "demo: cannot open the emulated device" in r.stderr
    assert "mtia-v9" in r.stderr


def test_trace_level_from_init_and_set_trace_level(tmp_path):
    r = run_child(f"""
        import json, torch, torch_mtia_emu
        torch_mtia_emu.init(timing=True, trace="kernels")
        assert torch_mtia_emu.trace_level() == "kernels"
        dev = torch.device("mtia")
        a = torch.arange(64.0).to(dev)
        (a + 1).cpu()
        torch_mtia_emu.set_trace_level("off")
        (a * 3).cpu()  # not traced
        assert torch_mtia_emu.trace_level() == "off"
        try:
            torch_mtia_emu.set_trace_level("everything")
        except ValueError as e:
            assert "not a trace level" in str(e), e
        else:
            raise AssertionError("a bad trace level was accepted")
        torch_mtia_emu.write_artifacts({str(tmp_path)!r})
    """)
    assert r.returncode == 0, r.stderr
    trace = json.loads((tmp_path / "trace.json").read_text())
    summary = json.loads((tmp_path / "summary.json").read_text())
    # The add was traced, the mul after the level went off was not.
    assert summary["launches"]["count"] == 1, summary["launches"]
    assert trace["traceEvents"]


def test_init_rejects_a_bad_trace_level():
    r = run_child("""
        import torch_mtia_emu
        try:
            torch_mtia_emu.init(trace="verbose")
        except ValueError as e:
            assert "'verbose' is not a trace level" in str(e), e
            print("rejected")
    """)
    assert r.returncode == 0, r.stderr
    assert "rejected" in r.stdout


def test_demo_trains_a_zoo_model(tmp_path):
    r = run_demo(tmp_path, "--model", "dlrm", "--steps", "3", "--trace", "kernels")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "demo: training dlrm" in r.stdout and "demo: PASS" in r.stdout
    losses = json.loads((tmp_path / "losses.json").read_text())
    assert losses["model"] == "dlrm" and losses["fallbacks"] == {}
    for d, c in zip(losses["device"], losses["cpu"]):
        assert abs(d - c) <= 1e-4
    assert losses["kernel_launches"].get("embedding_bag", 0) >= 3 * 3  # 3 bags a step
    assert (tmp_path / "trace.json").stat().st_size > 0


def test_demo_rejects_an_unknown_model(tmp_path):
    r = run_demo(tmp_path, "--model", "alexnet")
    assert r.returncode == 2
    assert "invalid choice: 'alexnet'" in r.stderr
