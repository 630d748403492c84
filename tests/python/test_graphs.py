"""torch.mtia graphs: MTIAGraph and torch.mtia.graph capture the work of a stream and replay it
with one submission. Replays with new inputs against eager execution and CPU references, a
captured training step against the same steps run eagerly, memory pools (private and shared),
reset, and the calls a capture refuses."""
import pytest
import torch
import torch_mtia_emu  # noqa: F401

from conftest import DEVICE


@pytest.fixture(autouse=True)
def settle():
    torch.mtia.synchronize()
    yield
    torch.mtia.synchronize()


def capture(g, fn, pool=None):
    """Warms `fn` up on a side stream (its constants and kernels are made there, as PyTorch
    recommends), then captures it into `g`; returns what the captured call returned."""
    s = torch.mtia.Stream()
    # The side stream reads what the current one made (the sanitizer's initcheck: without the
    # wait, the warm-up may read inputs before they are written).
    s.wait_stream(torch.mtia.current_stream())
    with torch.mtia.stream(s):
        fn()
    torch.mtia.synchronize()
    with torch.mtia.graph(g, pool=pool, stream=s):
        out = fn()
    return out


def test_replay_runs_the_captured_ops_on_new_inputs():
    x = torch.zeros(256, device=DEVICE)
    w = torch.randn(256).to(DEVICE)
    g = torch.mtia.MTIAGraph()
    y = capture(g, lambda: (x * w + 1).relu().sum(0, keepdim=True) + x)
    for seed in range(3):
        new = torch.randn(256, generator=torch.Generator().manual_seed(seed))
        x.copy_(new.to(DEVICE))
        g.replay()
        want = (new * w.cpu() + 1).relu().sum(0, keepdim=True) + new
        torch.testing.assert_close(y.cpu(), want)
    # Replays are deterministic: the same input gives the same bits.
    first = y.cpu()
    g.replay()
    assert torch.equal(y.cpu(), first)
    g.reset()


def test_capture_does_not_run_the_work():
    x = torch.ones(64, device=DEVICE)
    out = torch.zeros(64, device=DEVICE)
    g = torch.mtia.MTIAGraph()
    capture(g, lambda: out.copy_(x * 3))
    out.zero_()
    torch.mtia.synchronize()
    assert torch.equal(out.cpu(), torch.zeros(64))  # captured, not run
    g.replay()
    assert torch.equal(out.cpu(), torch.full((64,), 3.0))
    g.reset()


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                               torch.nn.Tanh(), torch.nn.Linear(32, 4))


def test_a_captured_training_step_replays_like_eager_steps():
    eager_model, graph_model = make_model().to(DEVICE), make_model().to(DEVICE)
    eager_opt = torch.optim.SGD(eager_model.parameters(), lr=0.1, momentum=0.9)
    graph_opt = torch.optim.SGD(graph_model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.MSELoss()
    gen = torch.Generator().manual_seed(1)
    data = [(torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen))
            for _ in range(8)]
    static_x = torch.zeros(8, 16, device=DEVICE)
    static_y = torch.zeros(8, 4, device=DEVICE)

    def step(model, opt, x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    # Warm-up steps on a side stream, the same for both models (momentum buffers exist after).
    s = torch.mtia.Stream()
    s.wait_stream(torch.mtia.current_stream())
    with torch.mtia.stream(s):
        for x, y in data[:3]:
            static_x.copy_(x.to(DEVICE))
            static_y.copy_(y.to(DEVICE))
            step(graph_model, graph_opt, static_x, static_y)
            step(eager_model, eager_opt, x.to(DEVICE), y.to(DEVICE))
    torch.mtia.current_stream().wait_stream(s)
    g = torch.mtia.MTIAGraph()
    graph_opt.zero_grad(set_to_none=True)
    with torch.mtia.graph(g, stream=s):
        static_loss = step(graph_model, graph_opt, static_x, static_y)

    for x, y in data[3:]:
        static_x.copy_(x.to(DEVICE))
        static_y.copy_(y.to(DEVICE))
        g.replay()
        eager_loss = step(eager_model, eager_opt, x.to(DEVICE), y.to(DEVICE))
        assert static_loss.item() == eager_loss.item()
    for a, b in zip(graph_model.parameters(), eager_model.parameters()):
        assert torch.equal(a.cpu(), b.cpu())
    g.reset()


def test_graphs_share_a_pool_and_keep_their_blocks():
    pool = torch.mtia.graph_pool_handle()
    assert isinstance(pool, tuple) and len(pool) == 2
    x = torch.arange(100, dtype=torch.float32).to(DEVICE)
    g1, g2 = torch.mtia.MTIAGraph(), torch.mtia.MTIAGraph()
    a = capture(g1, lambda: x * 2, pool=pool)
    g1.replay()  # g2's warm-up reads a
    b = capture(g2, lambda: a + 1, pool=g1.pool())
    assert g1.pool() == g2.pool() == pool
    g1.replay()
    g2.replay()
    assert torch.equal(b.cpu(), torch.arange(100, dtype=torch.float32) * 2 + 1)
    # A block the pool holds is not handed to eager allocations after its tensor is freed.
    address = b.data_ptr()
    del b
    others = [torch.empty(100, device=DEVICE) for _ in range(4)]
    assert address not in [t.data_ptr() for t in others]
    # A private pool per graph otherwise.
    g3 = torch.mtia.MTIAGraph()
    capture(g3, lambda: x + 3)
    assert g3.pool() != pool
    for g in (g1, g2, g3):
        g.reset()


def test_pool_memory_is_reserved_until_the_last_graph_goes():
    torch.mtia.empty_cache()
    x = torch.randn(1 << 16).to(DEVICE)  # 256 KiB
    g = torch.mtia.MTIAGraph()
    y = capture(g, lambda: x * 2)
    del y
    torch.mtia.empty_cache()
    held = torch.mtia.memory_reserved()
    assert held >= 2 * (1 << 18)  # x and the pool's block stay
    g.reset()
    assert torch.mtia.memory_reserved() <= held - (1 << 18)


def test_reset_and_capture_again():
    x = torch.ones(10, device=DEVICE)
    g = torch.mtia.MTIAGraph()
    y = capture(g, lambda: x + 1)
    g.replay()
    assert torch.equal(y.cpu(), torch.full((10,), 2.0))
    g.reset()
    with pytest.raises(RuntimeError, match="replay.. needs a captured graph"):
        g.replay()
    z = capture(g, lambda: x + 5)
    g.replay()
    assert torch.equal(z.cpu(), torch.full((10,), 6.0))
    g.reset()


def test_keep_graph_instantiates_on_request_or_at_replay():
    x = torch.ones(10, device=DEVICE)
    g = torch.mtia.MTIAGraph(keep_graph=True)
    y = capture(g, lambda: x * 7)
    g.instantiate()
    with pytest.raises(RuntimeError, match="already instantiated"):
        g.instantiate()
    g.replay()
    assert torch.equal(y.cpu(), torch.full((10,), 7.0))
    g.reset()
    g2 = torch.mtia.MTIAGraph(keep_graph=True)
    y2 = capture(g2, lambda: x * 9)
    g2.replay()  # instantiates first
    assert torch.equal(y2.cpu(), torch.full((10,), 9.0))
    g2.reset()


@pytest.mark.parametrize("call", [
    lambda t: t.cpu(),
    lambda t: t.sum().item(),
    lambda t: torch.mtia.synchronize(),
    lambda t: torch.mtia.current_stream().synchronize(),
    lambda t: t.copy_(torch.ones(16)),
], ids=["cpu", "item", "synchronize", "stream_synchronize", "host_to_device"])
def test_calls_that_need_the_host_end_the_capture(call):
    x = torch.ones(16, device=DEVICE)
    g = torch.mtia.MTIAGraph()
    s = torch.mtia.Stream()
    with pytest.raises(RuntimeError) as e:
        with torch.mtia.graph(g, stream=s):
            y = x * 2
            call(y)
    # The error of the call says why; the context manager restored the current stream.
    assert "cannot be captured" in str(e.value)
    assert torch.mtia.current_stream() == torch.mtia.default_stream()
    # Nothing was captured; the device and the stream work as before.
    with pytest.raises(RuntimeError, match="an error ended captured nothing"):
        g.replay()
    with torch.mtia.stream(s):
        assert torch.equal((x * 2).cpu(), torch.full((16,), 2.0))
    # And a new capture works.
    out = capture(g, lambda: x + 1)
    g.replay()
    assert torch.equal(out.cpu(), torch.full((16,), 2.0))
    g.reset()


def test_bad_graph_calls():
    g = torch.mtia.MTIAGraph()
    with pytest.raises(RuntimeError, match="no pool before capture_begin"):
        g.pool()
    with pytest.raises(RuntimeError, match="capture_end.. without capture_begin"):
        g.capture_end()
    with pytest.raises(RuntimeError, match="needs a captured graph"):
        g.instantiate()
    s = torch.mtia.Stream()
    with torch.mtia.stream(s):
        g.capture_begin((0, 0))
        g2 = torch.mtia.MTIAGraph()
        with pytest.raises(RuntimeError, match="already capturing"):
            g2.capture_begin((0, 0))
        g.capture_end()
    g.reset()


def test_the_demo_step_with_class_targets_replays_like_eager():
    """Cross-entropy over class indices: its target check reads the targets on the host, so
    it is skipped in a capture, and its class indices are kept on the device."""
    from torch_mtia_emu import demo, zoo
    points, labels = zoo.make_blobs(6 * 16, 8, 3, 0)
    batches = [(points[i * 16:(i + 1) * 16], labels[i * 16:(i + 1) * 16]) for i in range(6)]
    models = [zoo.make_mlp(8, 16, 3, 0).to(DEVICE) for _ in range(2)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in models]
    static_x = torch.zeros(16, 8, device=DEVICE)
    static_y = torch.zeros(16, dtype=torch.long, device=DEVICE)
    s = torch.mtia.Stream()
    with torch.mtia.stream(s):
        x, y = batches[0]
        static_x.copy_(x.to(DEVICE))
        static_y.copy_(y.to(DEVICE))
        demo.train_step(models[0], opts[0], static_x, static_y)
        demo.train_step(models[1], opts[1], x.to(DEVICE), y.to(DEVICE))
    torch.mtia.synchronize()
    g = torch.mtia.MTIAGraph()
    with torch.mtia.graph(g, stream=s):
        static_loss = demo.train_step(models[0], opts[0], static_x, static_y)
    for x, y in batches[1:]:
        static_x.copy_(x.to(DEVICE))
        static_y.copy_(y.to(DEVICE))
        g.replay()
        loss = demo.train_step(models[1], opts[1], x.to(DEVICE), y.to(DEVICE))
        assert static_loss.item() == loss.item()
    g.reset()
    # Outside a capture the targets are checked as before.
    with pytest.raises(IndexError, match="out of bounds"):
        torch.nn.functional.cross_entropy(torch.zeros(2, 3, device=DEVICE),
                                          torch.tensor([0, 7]).to(DEVICE))


def test_a_replay_after_a_used_tensor_was_freed_is_refused():
    x = torch.ones(1000, device=DEVICE)
    held = [torch.full((1000,), 2.0).to(DEVICE)]
    g = torch.mtia.MTIAGraph()
    y = capture(g, lambda: x * held[0])
    g.replay()
    assert torch.equal(y.cpu(), torch.full((1000,), 2.0))
    address = held[0].data_ptr()
    held.clear()  # the graph's input is freed: its block goes back to the cache
    reuse = torch.zeros(1000, device=DEVICE)  # and may be another tensor's now
    # The backend's check (the block is another tensor's now), or the driver's where the
    # allocator caches nothing (the sanitizer's memcheck or initcheck).
    with pytest.raises(RuntimeError, match=f"at {address:#x}(, which| whose tensor) was freed"):
        g.replay()
    del reuse
    g.reset()


def test_snapshot_names_the_graph_pool_of_a_segment():
    x = torch.ones(4096, device=DEVICE)
    g = torch.mtia.MTIAGraph()
    y = capture(g, lambda: x * 4)
    seg = next(s for s in torch.mtia.snapshot()["segments"] if s["address"] == y.data_ptr())
    assert seg["segment_pool_id"] == g.pool()
    other = next(s for s in torch.mtia.snapshot()["segments"] if s["address"] == x.data_ptr())
    assert other["segment_pool_id"] == (0, 0)
    g.reset()
