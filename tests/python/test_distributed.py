"""The c10d backend "mtia_emu" (torch.distributed on emulated devices), in several processes.

Each test starts WORLD processes of dist_worker.py (each with its own emulated device) and
checks that every rank succeeded: the worker compares every collective with the same
collective on CPU tensors with gloo, and DDP with one CPU process on the whole batch.
"""
import os
import socket
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "dist_worker.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(scenario, world, env=None, timeout=120, ranks_to_wait=None):
    """Runs `scenario` on `world` ranks; returns the (returncode, output) of each rank in
    `ranks_to_wait` (default all), in rank order, and kills the others."""
    port = free_port()
    procs = []
    for rank in range(world):
        e = dict(os.environ)
        e.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), MTIA_EMU_TIMING="0",
                 MTIA_EMU_FALLBACK="warn", MTIA_EMU_WAIT="block")
        e.update(env or {})
        procs.append(subprocess.Popen([sys.executable, WORKER, scenario], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    results = []
    try:
        for p in procs[:world if ranks_to_wait is None else ranks_to_wait]:
            out, _ = p.communicate(timeout=timeout)
            results.append((p.returncode, out))
    finally:
        for p in procs:  # a hang fails the test instead of leaving processes behind
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


def assert_all_ok(results):
    for rank, (code, out) in enumerate(results):
        assert code == 0, f"rank {rank} exited with {code}:\n{out[-4000:]}"


def test_backend_registered_for_mtia():
    assert "mtia_emu" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["mtia"] == "mtia_emu"
    assert dist.Backend.backend_capability["mtia_emu"] == ["mtia"]


@pytest.mark.parametrize("world,init", [(2, "env"), (3, "tcp"), (4, "env")])
def test_collectives_match_gloo(world, init):
    results = launch("collectives", world, env={"DIST_INIT": init})
    assert_all_ok(results)
    assert "match gloo" in results[0][1]


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_matches_one_cpu_process(world):
    results = launch("ddp", world)
    assert_all_ok(results)
    assert "DDP matches one CPU process in 4 variants" in results[0][1]


def test_fsdp2_fully_shard_matches_one_cpu_process():
    results = launch("fsdp", 2)
    assert_all_ok(results)
    assert "FSDP2 matches one CPU process" in results[0][1]


@pytest.mark.parametrize("world", [2, 3])
def test_ring_all_reduce_follows_the_alpha_beta_model(world):
    """Timing on: each ring step's link send takes the link's latency + chunk / bandwidth, and
    the all-reduce 2(n-1)(alpha + (S/n)/beta) plus its reductions, within 2 %."""
    results = launch("link_timing", world,
                     env={"MTIA_EMU_TIMING": "1", "MTIA_EMU_TRACE": "kernels",
                          "MTIA_EMU_PRESET": "mtia-v2", "LINK_TOLERANCE": "0.02"})
    assert_all_ok(results)
    for _, out in results:
        assert "link timing follows the alpha-beta model" in out


def test_chip_without_links_refuses_collectives():
    results = launch("no_link", 2, env={"MTIA_EMU_SET": "link_count=0"})
    assert_all_ok(results)
    for _, out in results:
        assert "all_reduce refused" in out and "link 0 does not exist" in out


def test_plain_init_process_group_picks_mtia_emu_for_mtia():
    assert_all_ok(launch("default_backend", 2))


@pytest.mark.parametrize("mode", ["dies", "hang"])
def test_dead_rank_errors_after_timeout(mode):
    results = launch("dead_rank", 2, env={"DIST_TIMEOUT_S": "3", "DEAD_MODE": mode}, timeout=60,
                     ranks_to_wait=1)
    code, out = results[0]
    assert code == 0, out[-4000:]
    assert "all_reduce raised after" in out
    seconds = float(out.split("all_reduce raised after ")[1].split(" s")[0])
    assert seconds < 30, out
    if mode == "hang":  # the peer is alive but silent: it is the 3 s timeout that ends it
        assert seconds >= 2.5, out


def test_torchrun_trains_the_ddp_example():
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                        "--master_port", str(free_port()),
                        os.path.join(REPO, "examples", "ddp", "train.py"), "--steps", "4"],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, MTIA_EMU_TIMING="0", MTIA_EMU_WAIT="block"))
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    assert "parameters identical on every rank: True" in r.stdout
    assert "PASS" in r.stdout


def test_single_process_group_without_peers():
    """World size 1 in this process: collectives are identities, and bad arguments raise."""
    code = """
        import torch, torch.distributed as dist
        dist.init_process_group("mtia_emu", store=dist.HashStore(), rank=0, world_size=1)
        t = torch.arange(6, dtype=torch.float32, device="mtia").view(2, 3)
        dist.all_reduce(t); dist.broadcast(t, 0)
        assert torch.equal(t.cpu(), torch.arange(6.).view(2, 3))
        try:
            dist.all_reduce(t, op=dist.ReduceOp.PREMUL_SUM)
        except Exception as e:
            assert "not supported" in str(e) or "PREMUL_SUM" in str(e), e
        else:
            raise AssertionError("PREMUL_SUM accepted")
        pg = dist.group.WORLD
        for bad in (lambda: pg.allreduce([t, t]),
                    lambda: pg.allreduce([t, t.cpu()])):
            try:
                bad()
            except ValueError as e:
                print("error:", e)
            else:
                raise AssertionError("accepted")
        # A c10d dispatcher op on mtia tensors (bypassing the group's methods) is refused,
        # not run on the CPU fallback.
        import torch_mtia_emu
        torch_mtia_emu.reset_fallback_counts()
        try:
            dist.ProcessGroup.recv_anysource(pg, [t], 0)
        except NotImplementedError as e:
            print("error:", e)
        else:
            raise AssertionError("c10d::recv_any_source_ ran")
        assert torch_mtia_emu.fallback_counts() == {}
        dist.destroy_process_group()
        print("ok")
    """
    import textwrap
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, MTIA_EMU_TIMING="0"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "one tensor per process" in r.stdout
    assert "must all be on mtia" in r.stdout
    assert "c10d::recv_any_source_ on mtia tensors" in r.stdout
