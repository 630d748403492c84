"""torch.profiler with ProfilerActivity.MTIA on the emulated device (docs/profiling.md).

The references are independent of the profiler: the emulator's own launch counters
(torch_mtia_emu.kernel_launch_counts), the device's own trace (write_artifacts' trace.json,
whose packets carry the simulated times of the completion records) and the CPU operators
PyTorch records itself. The timing model is on in the child interpreters (the suite runs with
it off), so that durations are not zero.
"""
import collections
import json
import os

import pytest
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import torch_mtia_emu
from conftest import DEVICE, run_child

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.MTIA]

# A training step of the demo's model (torch_mtia_emu.demo) profiled with the timing model on
# and the device's own trace recording, on mtia:0 of two served devices (MTIA_EMU_DEVICES=2:
# device servers the child starts); then a profile of both devices, then one that outlives
# them. What the profiler and the trace saw, as JSON files.
TRAINING_STEP = """
    import json, os, sys, torch, torch_mtia_emu
    from torch.autograd import DeviceType
    from torch.profiler import profile, ProfilerActivity
    from torch_mtia_emu import demo, zoo
    out = sys.argv[1] if len(sys.argv) > 1 else os.environ["PROFILE_OUT"]
    torch_mtia_emu.init(timing=True, trace="off")
    dev = torch.device("mtia")
    points, labels = zoo.make_blobs(64, 32, 4, 0)
    model = zoo.make_mlp(32, 128, 4, 0).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = points.to(dev), labels.to(dev)
    demo.train_step(model, opt, x, y)  # the momentum buffers exist from here on
    torch.mtia.synchronize()
    torch_mtia_emu.set_trace_level("kernels")
    before = torch_mtia_emu.kernel_launch_counts()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MTIA]) as p:
        demo.train_step(model, opt, x, y)
    after = torch_mtia_emu.kernel_launch_counts()
    torch_mtia_emu.set_trace_level("off")
    torch_mtia_emu.write_artifacts(out)
    p.export_chrome_trace(os.path.join(out, "profile.json"))
    events = [dict(name=e.name, device=str(e.device_type), index=e.device_index, id=e.id,
                   linked=e.linked_correlation_id, start=e.time_range.start,
                   end=e.time_range.end, kernels=len(e.kernels))
              for e in p.events()]
    averages = {a.key: dict(device=a.device_time_total, self_device=a.self_device_time_total,
                            count=a.count)
                for a in p.key_averages() if a.device_type == DeviceType.CPU}
    launches = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    # Both served devices in one profile (mtia:1 opens during it), and a copy between them.
    a = torch.ones(256, device="mtia:0")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MTIA]) as p2:
        (a * 2).sum()
        b = torch.ones(256, device="mtia:1")
        with torch.mtia.device(1):
            (b + 3).sum()
        c = b.to("mtia:0")
    two_rows = sorted([e.device_index, e.name] for e in p2.events()
                      if e.device_type == DeviceType.MTIA)
    two_averages = {a.key: a.device_time_total for a in p2.key_averages()}
    p2.export_chrome_trace(os.path.join(out, "two_devices.json"))
    # A profile that outlives the device (shutdown() inside it) keeps what it recorded.
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MTIA]) as q:
        x + 1
        torch_mtia_emu.shutdown()
    outlived = [e.name for e in q.events() if e.device_type == DeviceType.MTIA]
    try:
        x + 1
        after_shutdown = ""
    except RuntimeError as e:
        after_shutdown = str(e)
    json.dump(dict(events=events, averages=averages, launches=launches, outlived=outlived,
                   after_shutdown=after_shutdown, two_rows=two_rows,
                   two_averages=two_averages),
              open(os.path.join(out, "result.json"), "w"))
"""


@pytest.fixture(scope="module")
def training_step(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile")
    r = run_child(TRAINING_STEP, env={"MTIA_EMU_TIMING": "1", "MTIA_EMU_DEVICES": "2",
                                      "PROFILE_OUT": str(out)}, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.load(open(out / "result.json"))
    chrome = json.load(open(out / "profile.json"))["traceEvents"]
    device_trace = json.load(open(out / "trace.json"))
    device_trace = device_trace["traceEvents"] if isinstance(device_trace, dict) else device_trace
    two_devices = json.load(open(out / "two_devices.json"))["traceEvents"]
    return result, chrome, device_trace, two_devices


def _device_activities(chrome):
    return [e for e in chrome if e.get("ph") == "X" and e.get("cat") == "mtia_ccp_events"]


def _packets(device_trace):
    """The device trace's packets by (queue, seq): their simulated start and duration, ps. Not
    the fences (signal and wait packets: event records, and under the sanitizer's memcheck or
    initcheck the allocator's record for each free), which the profiler does not show."""
    packets = {}
    for e in device_trace:
        if e.get("ph") == "X" and e.get("cat") == "packet" and e["name"] not in ("signal", "wait"):
            a = e["args"]
            packets[(a["queue"], a["seq"])] = (round(e["ts"] * 1e6), round(e["dur"] * 1e6),
                                               a.get("label", ""))
    return packets


def test_one_device_activity_per_launch(training_step):
    result, chrome, device_trace, _ = training_step
    kernels = collections.Counter(e["name"] for e in _device_activities(chrome)
                                  if e["args"]["kind"] == "kernel")
    assert kernels == collections.Counter(result["launches"])
    launches_in_trace = collections.Counter(e["name"] for e in device_trace
                                            if e.get("ph") == "X" and e.get("cat") == "launch")
    assert kernels == launches_in_trace
    assert sum(kernels.values()) > 40  # a whole forward, backward and optimizer step


def test_durations_equal_the_device_trace(training_step):
    _, chrome, device_trace, _ = training_step
    packets = _packets(device_trace)
    activities = _device_activities(chrome)
    assert len(activities) == len(packets)  # copies and fills too; no fences or waits
    for e in activities:
        a = e["args"]
        key = (int(a["queue"]), int(a["seq"]))
        assert key in packets, f"{e['name']} {key} is not a packet of the device's trace"
        start_ps, dur_ps, label = packets[key]
        assert int(a["sim_start_ps"]) == start_ps, e
        assert int(a["sim_end_ps"]) - int(a["sim_start_ps"]) == dur_ps, e
        if a["kind"] == "kernel":
            assert label == e["name"]
        # Kineto's nanoseconds: the simulated duration, rounded.
        assert e["dur"] == pytest.approx(round(dur_ps / 1000) / 1000, abs=1.5e-3), e
        assert dur_ps > 0, e


def test_each_device_activity_links_to_its_op_and_runtime_call(training_step):
    _, chrome, _, _ = training_step
    ops = {e["args"]["External id"]: e for e in chrome if e.get("cat") == "cpu_op"}
    calls = {e["args"]["correlation"]: e for e in chrome if e.get("cat") == "mtia_runtime"}
    linked_names = collections.defaultdict(collections.Counter)
    for d in _device_activities(chrome):
        assert d["pid"] == 0  # mtia:0
        op = ops.get(d["args"].get("External id"))
        assert op is not None, f"{d['name']} is not linked to an operator"
        assert op["name"].startswith("aten::"), op
        call = calls[d["args"]["correlation"]]  # the call that submitted it
        assert call["name"] in ("mtia::launch", "mtia::copy", "mtia::copy_async",
                                "mtia::fill", "mtia::fill_async"), call
        assert call["args"]["External id"] == op["args"]["External id"]
        assert op["ts"] <= call["ts"] and call["ts"] + call["dur"] <= op["ts"] + op["dur"] + 1e-3
        # Device work is shown no earlier than the call that submitted it.
        assert d["ts"] >= call["ts"] - 1e-3, (call, d)
        linked_names[d["name"]][op["name"]] += 1
    # The kernels the demo's ops launch, by the op that launched them.
    assert linked_names["addmm"] == {"aten::addmm": 3}
    assert linked_names["layer_norm"] == {"aten::native_layer_norm": 1}
    assert set(linked_names["log_softmax"]) == {"aten::_log_softmax"}


def test_device_rows_run_forward_without_overlap(training_step):
    _, chrome, _, _ = training_step
    rows = collections.defaultdict(list)
    for e in _device_activities(chrome):
        rows[(e["pid"], e["tid"])].append(e)
    assert rows
    for row in rows.values():
        row.sort(key=lambda e: int(e["args"]["sim_start_ps"]))
        for a, b in zip(row, row[1:]):
            assert b["ts"] >= a["ts"] + a["dur"] - 1e-3, (a, b)
    processes = {e["pid"]: e["args"]["name"] for e in chrome
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in chrome
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    assert processes[0].startswith("mtia:0"), processes
    assert threads[(0, 0)] == "stream 0 (queue 0)", threads


def test_chrome_trace_has_cpu_and_device_rows_with_flows(training_step):
    _, chrome, _, _ = training_step
    cats = collections.Counter(e.get("cat") for e in chrome)
    assert cats["cpu_op"] > 0 and cats["mtia_runtime"] > 0 and cats["mtia_ccp_events"] > 0
    starts = {e["id"] for e in chrome if e.get("ph") == "s" and e.get("cat") == "ac2g"}
    ends = {e["id"] for e in chrome if e.get("ph") == "f" and e.get("cat") == "ac2g"}
    assert ends and ends <= starts


def test_key_averages_report_device_time_per_op(training_step):
    result, _, _, _ = training_step
    averages, events = result["averages"], result["events"]
    device = [e for e in events if e["device"] == "DeviceType.MTIA"]
    addmm = sum(e["end"] - e["start"] for e in device if e["name"] == "addmm")
    assert addmm > 0
    assert averages["aten::addmm"]["self_device"] == pytest.approx(addmm, abs=1e-2)
    # aten::linear runs aten::addmm, which runs aten::addmm on the device's kernel.
    assert averages["aten::linear"]["device"] == pytest.approx(addmm, abs=1e-2)
    assert averages["aten::linear"]["self_device"] == pytest.approx(0, abs=1e-2)
    # Every device activity is counted once, as the self device time of the op that issued it.
    total = sum(e["end"] - e["start"] for e in device)
    self_total = sum(a["self_device"] for a in averages.values())
    assert self_total == pytest.approx(total, rel=1e-6, abs=1e-2)


def test_profile_memory_records_the_allocator(dev):
    x = torch.ones(16, device=dev)
    torch.mtia.synchronize()
    torch.mtia.empty_cache()  # no larger cached block from earlier tests to hand out instead
    with profile(activities=ACTIVITIES, profile_memory=True) as p:
        y = torch.empty(256, 256, device=dev)  # 256 KiB
        del y
        z = x + 1
    memory = [e for e in p.profiler.kineto_results.events()
              if e.name() == "[memory]" and e.device_type() == DeviceType.MTIA]
    sizes = [e.nbytes() for e in memory]
    # The allocator's block: the request rounded up (memory_stats' allocated bytes agree).
    block = [n for n in sizes if 256 * 256 * 4 <= n < 256 * 256 * 4 + 4096]
    assert len(block) == 1 and -block[0] in sizes, sizes
    assert all(e.device_index() == dev.index for e in memory)
    empty = [e for e in p.events() if e.name == "aten::empty" and e.cpu_parent is None]
    assert [e.device_memory_usage for e in empty] == [block[0]]
    add = [a for a in p.key_averages() if a.key == "aten::add"]
    assert add and add[0].device_memory_usage > 0
    del z


def test_without_the_mtia_activity_no_device_rows(dev):
    x = torch.ones(16, device=dev)
    with profile(activities=[ProfilerActivity.CPU]) as p:
        (x + 1).sum().item()
    assert not [e for e in p.events() if e.device_type == DeviceType.MTIA]
    assert not [e for e in p.events() if e.name.startswith("mtia::")]
    recording, *_ = torch_mtia_emu.profiler_counts()
    assert not recording


def test_launch_kernel_outside_ops_is_recorded_unlinked(dev):
    x = torch.zeros(16, device=dev)
    torch.mtia.synchronize()
    with profile(activities=ACTIVITIES) as p:
        torch_mtia_emu.launch_kernel("fill", [x, torch.float32, 0, 1, 1, 1, 16, 0, 0, 0, 1])
    device = [e for e in p.events() if e.device_type == DeviceType.MTIA]
    assert [e.name for e in device] == ["fill"]
    assert device[0].linked_correlation_id == 0  # no operator issued it
    calls = [e for e in p.events() if e.name == "mtia::launch"]
    assert len(calls) == 1 and calls[0].id == device[0].id


def test_a_profile_keeps_at_most_its_record_bound_and_counts_the_rest(dev, monkeypatch):
    x = torch.ones(16, device=dev)
    monkeypatch.setenv("MTIA_EMU_PROFILER_MAX_RECORDS", "5")
    with profile(activities=ACTIVITIES) as p:
        for _ in range(4):
            x.add_(1)  # a launch call and its kernel each
    # 4 launch calls, their 4 kernels and the synchronize at the profile's end: 9 records.
    _, device, runtime, dropped = torch_mtia_emu.profiler_counts()
    assert device + runtime == 5 and dropped == 4, (device, runtime, dropped)
    recorded = [e for e in p.events()
                if e.device_type == DeviceType.MTIA or e.name.startswith("mtia::")]
    assert len(recorded) == 5
    assert torch.equal(x.cpu(), torch.full((16,), 5.0))


def test_nested_and_restarted_profiles_are_defined(dev):
    x = torch.ones(16, device=dev)
    with profile(activities=ACTIVITIES) as outer:
        x + 1
        with profile(activities=ACTIVITIES) as inner:
            x * 2
        x - 1
    # Kineto runs one profile at a time: the inner one takes over and gets the device work.
    assert [e.name for e in inner.events() if e.device_type == DeviceType.MTIA] == [
        "binary_scalar"]
    assert not [e for e in outer.events() if e.device_type == DeviceType.MTIA]
    recording, *_ = torch_mtia_emu.profiler_counts()
    assert not recording
    # Starting a running profiler again keeps it running.
    p = profile(activities=ACTIVITIES)
    p.start()
    p.start()
    x + 3
    p.stop()
    assert [e.name for e in p.events() if e.device_type == DeviceType.MTIA] == ["binary_scalar"]


def test_a_scheduled_profile_writes_tensorboards_trace_with_the_active_steps(dev, tmp_path):
    # tensorboard_trace_handler and a schedule, as torch-tb-profiler's users set them up: the
    # file it writes has the device activities of the active steps only, one per launch.
    x = torch.ones(64, device=dev)
    torch.mtia.synchronize()
    launches = []
    with profile(activities=ACTIVITIES, profile_memory=True,
                 schedule=torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1),
                 on_trace_ready=torch.profiler.tensorboard_trace_handler(str(tmp_path))) as p:
        for step in range(5):
            before = sum(torch_mtia_emu.kernel_launch_counts().values())
            (x * (step + 1)).sum()
            launches.append(sum(torch_mtia_emu.kernel_launch_counts().values()) - before)
            p.step()
    files = list(tmp_path.glob("*.pt.trace.json"))
    assert len(files) == 1, files
    trace = json.load(open(files[0]))["traceEvents"]
    steps = [e["name"] for e in trace if e.get("name", "").startswith("ProfilerStep#")
             and e.get("cat") == "user_annotation"]
    assert sorted(steps) == ["ProfilerStep#2", "ProfilerStep#3"]
    assert len(_device_activities(trace)) == launches[2] + launches[3] > 0
    assert any(e.get("cat") == "cpu_instant_event" and e.get("name") == "[memory]"
               for e in trace)


def test_profile_that_outlives_the_device_keeps_what_it_recorded(training_step):
    result, _, _, _ = training_step
    assert result["outlived"] == ["binary_scalar"]
    assert result["after_shutdown"].startswith("torch_mtia_emu: the device was closed")


def test_two_served_devices(training_step):
    result, _, _, chrome = training_step
    rows = collections.Counter(tuple(r) for r in result["two_rows"])
    assert rows[(0, "binary_scalar")] == 1 and rows[(1, "binary_scalar")] == 1, rows
    assert rows[(0, "sum")] == 1 and rows[(1, "sum")] == 1, rows
    assert result["two_averages"]["aten::mul"] > 0 and result["two_averages"]["aten::add"] > 0
    processes = {e["pid"]: e["args"]["name"] for e in chrome
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert processes[0].startswith("mtia:0") and processes[1].startswith("mtia:1"), processes
    # The copy from mtia:1 to mtia:0: a device activity on each device.
    copies = {e["pid"] for e in _device_activities(chrome) if e["args"]["kind"] == "memcpy"}
    assert copies == {0, 1}, copies
