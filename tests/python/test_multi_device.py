"""Several MTIA devices in one process (MTIA_EMU_DEVICES=N: N device servers the process starts).

The device count is read once per process, so each case runs a child interpreter with
MTIA_EMU_DEVICES=2 (two emulated devices, each its own `mtia-emu serve` process) and checks,
against the CPU: ops on mtia:0 and mtia:1 at once, copies between them (strided too), the
current device, streams and events per device, memory statistics and generators per device,
training on mtia:1, two threads each driving a device, and the errors (an index out of range,
tensors of two devices in one op, a malformed MTIA_EMU_DEVICES). The last cases run tests of
the suite (training, models) on a served device and on mtia:1 of two."""
import os
import subprocess
import sys

import pytest

from conftest import run_child

TWO = {"MTIA_EMU_DEVICES": "2", "MTIA_EMU_FALLBACK": "error"}
HERE = os.path.dirname(os.path.abspath(__file__))


def run_two(code: str) -> str:
    r = run_child(code, env=TWO, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_ops_run_on_both_devices_at_once_like_the_cpu():
    out = run_two("""
        import torch
        assert torch.mtia.device_count() == 2
        assert torch.accelerator.device_count() == 2
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(24, 40, generator=g), torch.randn(40, 16, generator=g)
        a0, b0 = a.to("mtia:0"), b.to("mtia:0")
        a1, b1 = a.to("mtia:1"), b.to("mtia:1")
        assert (a0.device, a1.device) == (torch.device("mtia", 0), torch.device("mtia", 1))
        # Interleaved: each op's kernels go to its tensors' device, whatever is current.
        r0 = torch.softmax(a0 @ b0, dim=1)
        r1 = (a1 @ b1).relu().sum(dim=0)
        r0b = (a0 * 2 - 1).tanh()
        want0 = torch.softmax(a @ b, dim=1)
        want1 = (a @ b).relu().sum(dim=0)
        assert r0.device.index == 0 and r1.device.index == 1 and r0b.device.index == 0
        torch.testing.assert_close(r0.cpu(), want0, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(r1.cpu(), want1, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(r0b.cpu(), (a * 2 - 1).tanh(), rtol=1e-5, atol=1e-6)
        # Factories without an index go to the current device (0 here).
        assert torch.zeros(3, device="mtia").device == torch.device("mtia", 0)
        # Each device is its own server: both report the socket backend.
        assert [torch.mtia.get_device_properties(i)["backend"] for i in (0, 1)] == \\
            ["socket", "socket"]
        print("ok")
    """)
    assert out.split() == ["ok"]


def test_copies_between_devices_keep_any_layout():
    out = run_two("""
        import torch
        g = torch.Generator().manual_seed(1)
        a = torch.randn(6, 10, 8, generator=g)
        a0 = a.to("mtia:0")
        views = {
            "transposed": lambda t: t.transpose(0, 2),
            "stepped slice with offset": lambda t: t[1:, 2::3, 1::2],
            "expanded": lambda t: t[:, :1, :].expand(6, 5, 8),
            "permuted": lambda t: t.permute(1, 2, 0),
        }
        for name, view in views.items():
            got = view(a0).to("mtia:1")
            assert got.device == torch.device("mtia", 1), name
            assert torch.equal(got.cpu(), view(a)), name
            back = got.to("mtia:0")
            assert back.device.index == 0 and torch.equal(back.cpu(), view(a)), name
        # copy_ into a non-contiguous destination on the other device, with a dtype change.
        dst = torch.zeros(10, 6, device="mtia:1", dtype=torch.float16)
        dst.t().copy_(a0[:, :, 3])
        assert torch.equal(dst.cpu(), a[:, :, 3].t().half())
        # .to(device, dtype) and non_blocking both land before the next use.
        h = a0.to("mtia:1", torch.bfloat16, non_blocking=True)
        assert torch.equal(h.cpu(), a.bfloat16())
        # Work still queued on the source's stream comes before the copy.
        x = torch.ones(256, 256, device="mtia:0")
        for _ in range(20):
            x = x * 1.5 - 0.25
        want = torch.ones(256, 256)
        for _ in range(20):
            want = want * 1.5 - 0.25
        assert torch.equal(x.to("mtia:1").cpu(), want)
        # torch.save keeps each tensor's device; map_location moves it to the other one.
        import io
        buf = io.BytesIO()
        t1 = a0.to("mtia:1")
        torch.save({"t": t1, "row": t1[2]}, buf)
        buf.seek(0)
        loaded = torch.load(buf)
        assert loaded["t"].device.index == 1 and torch.equal(loaded["t"].cpu(), a)
        assert loaded["row"].untyped_storage().data_ptr() == loaded["t"].untyped_storage().data_ptr()
        buf.seek(0)
        assert torch.load(buf, map_location="mtia:0")["t"].device.index == 0
        print("ok")
    """)
    assert out.split() == ["ok"]


def test_current_device_streams_and_events_per_device():
    out = run_two("""
        import torch
        assert torch.mtia.current_device() == 0
        with torch.mtia.device(1):
            assert torch.mtia.current_device() == 1
            t = torch.arange(6, device="mtia", dtype=torch.float32)
            assert t.device == torch.device("mtia", 1)
            assert torch.accelerator.current_device_index() == 1
        assert torch.mtia.current_device() == 0
        torch.mtia.set_device(1)
        assert torch.empty(2, device="mtia").device.index == 1
        torch.mtia.set_device(0)

        # A stream per device, current per device: making mtia:1's current leaves mtia:0's.
        s1 = torch.Stream(device="mtia:1")
        assert s1.device == torch.device("mtia", 1)
        assert torch.mtia.current_stream(0) == torch.mtia.default_stream(0)
        with torch.mtia.stream(s1):
            assert torch.mtia.current_stream(1) == s1
            assert torch.mtia.current_stream(0) == torch.mtia.default_stream(0)
            y = torch.full((1000,), 2.0, device="mtia:1") * 3
        assert torch.mtia.current_stream(1) == torch.mtia.default_stream(1)
        s1.synchronize()
        assert torch.equal(y.cpu(), torch.full((1000,), 6.0))

        # An event recorded on mtia:0's stream, waited for by mtia:1's: the copy that follows
        # sees mtia:0's finished work.
        s0 = torch.Stream(device="mtia:0")
        with torch.mtia.stream(s0):
            x = torch.ones(512, 512, device="mtia:0")
            for _ in range(10):
                x = x + 1
            ev = torch.Event(device="mtia:0")
            ev.record(s0)
        s1.wait_event(ev)
        ev.synchronize()
        assert torch.equal(x.to("mtia:1").cpu(), torch.full((512, 512), 11.0))
        torch.mtia.synchronize(1)
        torch.mtia.synchronize()
        # Timing events of one device works; of two devices is refused.
        e0 = torch.Event(device="mtia:0", enable_timing=True)
        e1 = torch.Event(device="mtia:1", enable_timing=True)
        e0.record(torch.mtia.current_stream(0))
        e1.record(torch.mtia.current_stream(1))
        e0.synchronize()
        e1.synchronize()
        assert e0.elapsed_time(e0) == 0
        try:
            e0.elapsed_time(e1)
            print("no error")
        except (ValueError, RuntimeError) as e:
            assert "not comparable" in str(e), e
        print("ok")
    """)
    assert out.split() == ["ok"]


@pytest.mark.caching
def test_memory_statistics_are_per_device():
    out = run_two("""
        import torch
        torch.mtia.init()
        before = [torch.mtia.memory_allocated(i) for i in (0, 1)]
        x = torch.empty(1 << 20, device="mtia:1")  # 4 MiB on mtia:1 only
        after = [torch.mtia.memory_allocated(i) for i in (0, 1)]
        assert after[0] == before[0], (before, after)
        assert after[1] - before[1] == 4 << 20, (before, after)
        assert torch.mtia.max_memory_allocated(1) >= 4 << 20
        s1 = torch.mtia.memory_stats(1)
        assert s1["allocated_bytes.all.current"] == after[1]
        assert s1["dram"]["device_total_bytes"] > 0
        with torch.mtia.device(1):
            assert torch.mtia.memory_allocated() == after[1]
        assert torch.accelerator.memory_allocated(1) == after[1]
        del x
        assert torch.mtia.memory_allocated(1) == before[1]
        assert torch.mtia.memory_stats(1)["dram"]["cached_bytes"] >= 4 << 20
        torch.mtia.empty_cache()
        assert torch.mtia.memory_stats(1)["dram"]["cached_bytes"] == 0
        torch.mtia.reset_peak_memory_stats(1)
        assert torch.mtia.max_memory_allocated(1) == torch.mtia.memory_allocated(1)
        # Snapshots name each block's device and keep one history per device.
        torch.mtia.record_memory_history("all")
        a, b = torch.ones(100, device="mtia:0"), torch.ones(300, device="mtia:1")
        snap = torch.mtia.snapshot()
        devices = {seg["device"] for seg in snap["segments"]}
        assert devices == {0, 1}, devices
        assert len(snap["device_traces"]) == 2
        assert all(any(e["action"] == "alloc" for e in t) for t in snap["device_traces"])
        torch.mtia.record_memory_history(None)
        print("ok")
    """)
    assert out.split() == ["ok"]


def test_generators_are_per_device():
    out = run_two("""
        import torch
        assert len(torch.mtia.default_generators) == 2
        torch.mtia.manual_seed_all(7)
        torch.manual_seed(7)
        want = torch.randn(50)
        assert torch.equal(torch.randn(50, device="mtia:1").cpu(), want)
        assert torch.equal(torch.randn(50, device="mtia:0").cpu(), want)
        states = torch.mtia.get_rng_state_all()
        assert len(states) == 2
        # Seeding mtia:0 (the current device) leaves mtia:1's sequence where it was.
        torch.mtia.manual_seed(123)
        assert torch.mtia.initial_seed() == 123
        torch.set_rng_state(states[1])
        assert torch.equal(torch.rand(20, device="mtia:1").cpu(), torch.rand(20))
        with torch.mtia.device(1):
            assert torch.mtia.initial_seed() == 7
        # set_rng_state_all restores both.
        torch.mtia.set_rng_state_all(states)
        torch.set_rng_state(states[0])
        w0 = torch.rand(10)
        assert torch.equal(torch.rand(10, device="mtia:0").cpu(), w0)
        assert torch.equal(torch.rand(10, device="mtia:1").cpu(), w0)  # same state as 0's
        g1 = torch.Generator(device="mtia:1")
        assert g1.device == torch.device("mtia", 1)
        print("ok")
    """)
    assert out.split() == ["ok"]


def test_a_model_trains_on_mtia_1_like_the_cpu():
    out = run_two("""
        import torch, torch_mtia_emu
        def run(device):
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                        torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            g = torch.Generator().manual_seed(1)
            x, y = torch.randn(64, 16, generator=g), torch.randint(0, 4, (64,), generator=g)
            x, y = x.to(device), y.to(device)
            losses = []
            for _ in range(5):
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            return losses, [p.detach().cpu() for p in model.parameters()]
        cpu_losses, cpu_params = run("cpu")
        dev_losses, dev_params = run("mtia:1")
        assert cpu_losses[-1] < cpu_losses[0]
        for c, d in zip(cpu_losses, dev_losses):
            assert abs(c - d) <= 1e-4 * max(1, abs(c)), (cpu_losses, dev_losses)
        for c, d in zip(cpu_params, dev_params):
            torch.testing.assert_close(d, c, rtol=1e-3, atol=1e-4)
        # Everything ran on mtia:1: nothing was allocated on mtia:0.
        assert torch.mtia.memory_stats(0)["dram"]["num_allocs"] == 0
        assert torch.mtia.memory_stats(1)["dram"]["num_allocs"] > 0
        assert torch_mtia_emu.fallback_counts() == {}
        print("ok")
    """)
    assert out.split() == ["ok"]


def test_two_threads_each_drive_one_device():
    out = run_two("""
        import threading, torch
        g = torch.Generator().manual_seed(2)
        inputs = [torch.randn(64, 64, generator=g) for _ in range(2)]
        results, errors = [None, None], []
        def work(i):
            try:
                torch.mtia.set_device(i)  # per thread: the other thread's stays
                x = inputs[i].to("mtia")
                assert x.device.index == i
                for _ in range(8):
                    x = torch.tanh(x @ x.t() / 64.0)
                assert torch.mtia.current_device() == i
                results[i] = x.cpu()
            except Exception as e:  # reported by the main thread
                errors.append(repr(e))
        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for t in threads: t.start()
        for t in threads: t.join()
        assert not errors, errors
        assert torch.mtia.current_device() == 0
        for i in range(2):
            want = inputs[i]
            for _ in range(8):
                want = torch.tanh(want @ want.t() / 64.0)
            torch.testing.assert_close(results[i], want, rtol=1e-5, atol=1e-5)
        print("ok")
    """)
    assert out.split() == ["ok"]


def test_bad_device_indices_and_mixed_devices_are_clear_errors():
    out = run_two("""
        import torch
        def error_of(fn):
            try:
                fn()
            except RuntimeError as e:
                return str(e)
            raise AssertionError("no error")
        for fn in (lambda: torch.ones(2, device="mtia:5"),
                   lambda: torch.mtia.set_device(5),
                   lambda: torch.ones(2).to("mtia:2"),
                   lambda: torch.mtia.memory_stats(2)):
            msg = error_of(fn)
            assert "device index" in msg and "2 MTIA devices" in msg, msg
            assert "MTIA_EMU_DEVICES=N" in msg, msg
        x0, x1 = torch.ones(4, 4, device="mtia:0"), torch.ones(4, 4, device="mtia:1")
        for fn in (lambda: x0 + x1, lambda: torch.mm(x0, x1), lambda: x0.copy_(x1).add_(x1),
                   lambda: torch.cat([x0, x1]), lambda: torch.where(x0 > 0, x0, x1),
                   lambda: torch.nn.functional.linear(x0, x1)):
            msg = error_of(fn)
            assert "Expected all tensors to be on the same device" in msg, msg
            assert "mtia:0" in msg and "mtia:1" in msg, msg
        # Both devices still work afterwards.
        assert torch.equal((x0 + x0).cpu(), torch.full((4, 4), 2.0))
        assert torch.equal((x1 * 3).cpu(), torch.full((4, 4), 3.0))
        print("ok")
    """)
    assert out.split() == ["ok"]


def test_a_malformed_device_count_is_a_clear_python_error():
    r = run_child("""
        import torch
        try:
            torch.mtia.device_count()
            print("no error")
        except RuntimeError as e:
            print("RuntimeError:", e)
        try:
            torch.ones(2, device="mtia")
            print("no error")
        except RuntimeError as e:
            print("RuntimeError:", e)
    """, env={"MTIA_EMU_DEVICES": "two"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2, r.stdout
    for line in lines:
        assert line.startswith("RuntimeError:"), r.stdout
        assert "MTIA_EMU_DEVICES='two'" in line, line


def _pytest(tests, env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *tests], cwd=HERE, env=e, capture_output=True, text=True,
                          timeout=300)


# The training and model tests of the suite (quick with the timing model off).
SUITE = ["test_training.py", "test_models.py"]


# The suite's training and model tests on a served device, and on mtia:1 of two served devices.
@pytest.mark.parametrize("env", [{"MTIA_EMU_DEVICES": "1"},
                                 {"MTIA_EMU_DEVICES": "2", "MTIA_EMU_TEST_DEVICE": "1"}],
                         ids=["served", "mtia1_of_two"])
def test_training_and_model_tests_pass_on_served_devices(env):
    r = _pytest(SUITE, env)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "failed" not in r.stdout, r.stdout[-2000:]


# Two processes on one device server, each in a context of its own (`serve --clients 2`).
SHARED_CLIENT = """
import torch, torch_mtia_emu
props = torch.mtia.get_device_properties(0)
assert props["total_memory"] == 64 << 30, props  # half of mtia-v2's 128 GiB
def run(device, seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(64, 16, generator=g), torch.randint(0, 4, (64,), generator=g)
    x, y = x.to(device), y.to(device)
    for _ in range(20):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]
import sys
seed = int(sys.argv[1])
for c, d in zip(run("cpu", seed), run("mtia", seed)):
    torch.testing.assert_close(d, c, rtol=1e-3, atol=1e-4)
assert torch.mtia.memory_stats()["dram"]["num_allocs"] > 0
print("ok")
"""


@pytest.mark.shared_server
def test_two_processes_share_one_server_each_in_its_own_context(tmp_path):
    binary = os.environ.get("MTIA_EMU_BIN") or os.path.join(HERE, "..", "..", "build", "tools",
                                                             "mtia-emu")
    assert os.access(binary, os.X_OK), f"no mtia-emu at {binary}: build the project first"
    sock = str(tmp_path / "device.sock")
    server = subprocess.Popen([binary, "serve", "--socket", sock, "--clients", "2", "--no-timing",
                               "--trace", "off"], stdout=subprocess.PIPE, text=True)
    try:
        assert "2 clients at once" in server.stdout.readline()
        env = dict(os.environ, MTIA_EMU_SERVER=sock, MTIA_EMU_FALLBACK="error")
        clients = [subprocess.Popen([sys.executable, "-c", SHARED_CLIENT, str(seed)], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for seed in (1, 2)]
        for c in clients:
            out, err = c.communicate(timeout=240)
            assert c.returncode == 0, out + err
            assert out.split() == ["ok"]
    finally:
        server.terminate()
        assert server.wait(timeout=60) == 0


def test_a_process_that_uses_only_mtia_1_never_opens_device_0(tmp_path):
    # Device 0's server does not exist: only a use of mtia:0 may notice.
    binary = os.environ.get("MTIA_EMU_BIN") or os.path.join(HERE, "..", "..", "build", "tools",
                                                             "mtia-emu")
    sock = str(tmp_path / "device1.sock")
    server = subprocess.Popen([binary, "serve", "--socket", sock, "--no-timing", "--trace", "off"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert "serving" in server.stdout.readline()
        absent = str(tmp_path / "absent.sock")
        r = run_child("""
            import torch, torch_mtia_emu
            assert torch.mtia.device_count() == 2
            x = torch.arange(6, dtype=torch.float32, device="mtia:1") * 2
            assert x.cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
            with torch.mtia.device(1):
                assert torch.mtia.memory_stats()["dram"]["num_allocs"] > 0
            try:
                torch.zeros(1, device="mtia:0")
                raise SystemExit("device 0 opened")
            except RuntimeError as e:
                assert "absent.sock" in str(e), str(e)
            print("ok")
        """, env={"MTIA_EMU_SERVER": absent + "," + sock, "MTIA_EMU_FALLBACK": "error"})
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.split() == ["ok"]
    finally:
        server.terminate()
        assert server.wait(timeout=60) == 0


def test_a_copy_between_devices_is_queued_and_stream_ordered_on_both():
    # The copy returns once queued (as between CUDA devices). The source's block, freed and
    # reused at once on its device, is overwritten only after the copy has read it, and work
    # queued on the destination after the copy sees its data.
    out = run_two("""
        import torch
        ref = torch.randn(257, 129)
        for round in range(20):
            x = ref.to("mtia:0") * 1.0       # a fresh block on mtia:0, written by a kernel
            y = x.to("mtia:1")               # queued on both current streams
            z = y * 2                        # queued after it on mtia:1
            del x
            w = torch.full((257, 129), -7.0, device="mtia:0")  # reuses x's block on mtia:0
            torch.testing.assert_close(z.cpu(), ref * 2)
            torch.testing.assert_close(y.cpu(), ref)
            assert (w.cpu() == -7.0).all()
        # Strided and transposed, both ways.
        a = torch.randn(64, 48, device="mtia:1").t()
        b = a.to("mtia:0")
        torch.testing.assert_close(b.cpu(), a.cpu())
        print("ok")
    """)
    assert out.split() == ["ok"]
