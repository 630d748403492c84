"""The device sanitizer (docs/sanitizer.md) seen from PyTorch: with $MTIA_EMU_SANITIZE set, each
tensor is its own device allocation, a kernel's bad access is a RuntimeError naming the check
and the tensor's allocation, and clean work (eager ops, a training step, an Inductor kernel)
runs without a finding and gives the CPU's results. Each test runs a child interpreter, whose
device opens with the checks on."""
from conftest import run_child

ALL = "memcheck,racecheck,initcheck,synccheck"


def test_a_read_past_a_tensor_names_memcheck_and_the_tensor():
    r = run_child("""
        import torch, torch_mtia_emu
        x = torch.arange(16, dtype=torch.float32, device="mtia")   # 64 bytes
        y = torch.empty(32, device="mtia")
        torch.mtia.synchronize()
        print("x", hex(x.data_ptr()))
        # copy(out, in, dtype, sizes[4], out strides[4], in strides[4]) told 20 elements:
        # it reads 16 bytes past the end of x.
        torch_mtia_emu.launch_kernel("copy", [y, x, torch.float32, 1, 1, 1, 20,
                                              0, 0, 0, 1, 0, 0, 0, 1])
        try:
            torch.mtia.synchronize()
            print("no finding")
        except RuntimeError as e:
            print("error", e)
        # The device stays usable: the fault was reported once, later work runs.
        torch.mtia.synchronize()
        print("after", (x + 1).sum().item())
    """, env={"MTIA_EMU_SANITIZE": "memcheck"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    x = lines[0].split()[1]
    err = next(line for line in lines if line.startswith("error"))
    assert "kernel 'copy'" in err and "memcheck: dma.start" in err, err
    # The tensor's own allocation, its 64 bytes, not the allocator's 512-byte block.
    assert (f"reads 80 bytes at {x}: the access runs 16 bytes past the end of the allocation "
            f"at {x} (64 bytes)") in err, err
    assert lines[-1] == "after 136.0"


def test_the_same_read_is_not_a_finding_without_the_sanitizer():
    # The independent half of the test above: the launch itself succeeds on the plain device.
    r = run_child("""
        import torch, torch_mtia_emu
        x = torch.arange(16, dtype=torch.float32, device="mtia")
        y = torch.zeros(32, device="mtia")
        torch_mtia_emu.launch_kernel("copy", [y, x, torch.float32, 1, 1, 1, 20,
                                              0, 0, 0, 1, 0, 0, 0, 1])
        torch.mtia.synchronize()
        print(y[:16].sum().item())
    """, env={"MTIA_EMU_SANITIZE": "off"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["120.0"]


def test_initcheck_sees_a_new_tensor_in_a_freed_tensors_memory_as_unwritten():
    # Without caching, a tensor made where a freed one was is a new allocation: reading it
    # before writing it is reported, though the bytes the freed tensor left are still there.
    # The allocator's statistics count one driver allocation and free per tensor.
    r = run_child("""
        import torch, torch_mtia_emu
        a = torch.ones(256, device="mtia")
        out = torch.empty(256, device="mtia")
        torch.mtia.synchronize()
        del a
        s = torch.mtia.memory_stats()
        print("stats", s["num_device_alloc"], s["num_device_free"],
              s["reserved_bytes.all.current"] == s["allocated_bytes.all.current"])
        b = torch.empty(256, device="mtia")    # never written
        print("b", hex(b.data_ptr()))
        torch_mtia_emu.launch_kernel("copy", [out, b, torch.float32, 1, 1, 1, 256,
                                              0, 0, 0, 1, 0, 0, 0, 1])
        try:
            torch.mtia.synchronize()
            print("no finding")
        except RuntimeError as e:
            print("error", e)
        b.fill_(2)
        torch_mtia_emu.launch_kernel("copy", [out, b, torch.float32, 1, 1, 1, 256,
                                              0, 0, 0, 1, 0, 0, 0, 1])
        print("after", out.sum().item())
    """, env={"MTIA_EMU_SANITIZE": "initcheck"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "stats 2 1 True", lines[0]
    b = lines[1].split()[1]
    err = next(line for line in lines if line.startswith("error"))
    assert "kernel 'copy'" in err and "initcheck: dma.start" in err, err
    assert (f"the 1024 bytes at {b}..{hex(int(b, 16) + 1023)} (offset 0 of the allocation at "
            f"{b} (1024 bytes)) were not written since the allocation was made") in err, err
    assert lines[-1] == "after 512.0"


def test_a_training_step_and_a_compiled_function_run_clean_under_all_checks():
    # A representative slice of the suite's device work under all four checks: eager ops of a
    # small CNN forward and backward, an SGD step, and an Inductor-generated kernel. A finding
    # would fail the child's synchronize; the results must match the CPU's.
    r = run_child("""
        import torch, torch_mtia_emu
        torch.set_num_threads(1)
        torch.manual_seed(0)
        def model():
            torch.manual_seed(1)
            return torch.nn.Sequential(
                torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 10))
        x = torch.randn(4, 3, 8, 8)
        t = torch.randint(0, 10, (4,))
        results = []
        for device in ("cpu", "mtia"):
            m = model().to(device)
            opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
            for _ in range(2):
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(m(x.to(device)), t.to(device))
                loss.backward()
                opt.step()
            results.append([loss.detach().cpu()] + [p.detach().cpu() for p in m.parameters()])
        for c, d in zip(*results):
            torch.testing.assert_close(d, c, rtol=1e-4, atol=1e-4)

        def f(a, b):
            return torch.softmax(a * b + 1.0, dim=-1).sum(dim=0)
        a, b = torch.randn(33, 70), torch.randn(33, 70)
        torch_mtia_emu.reset_kernel_launch_counts()
        got = torch.compile(f)(a.to("mtia"), b.to("mtia"))
        torch.mtia.synchronize()
        torch.testing.assert_close(got.cpu(), f(a, b), rtol=1e-5, atol=1e-5)
        # The checks were on: the same process reports a read past a tensor.
        z = torch.ones(4, device="mtia")
        torch_mtia_emu.launch_kernel("copy", [got, z, torch.float32, 1, 1, 1, 8,
                                              0, 0, 0, 1, 0, 0, 0, 1])
        try:
            torch.mtia.synchronize()
        except RuntimeError as e:
            print("planted", "memcheck" in str(e))
        print("ok")
    """, env={"MTIA_EMU_SANITIZE": ALL, "MTIA_EMU_FALLBACK": "error"}, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["planted", "True", "ok"], r.stdout
