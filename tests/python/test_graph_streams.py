"""torch.mtia graphs with a side stream inside the captured region: the side stream joins the
capture by waiting for the capturing stream (a fork), the capturing stream waits for it again
(a join), and the replay runs both branches on the device. Replays against the same code run
eagerly and against CPU references; is_current_stream_capturing on both streams; a side stream
that does not join back fails the capture."""
import pytest
import torch
import torch_mtia_emu  # noqa: F401

from conftest import DEVICE


@pytest.fixture(autouse=True)
def settle():
    torch.mtia.synchronize()
    yield
    torch.mtia.synchronize()


def two_branches(x, w, seen):
    """y = x * w on the current stream; then a side stream computes relu(y) + 1 while the
    current stream computes y * y - 2; joined, their sum. Notes whether each stream captured."""
    cur = torch.mtia.current_stream()
    y = x * w
    s = torch.mtia.Stream()
    s.wait_stream(cur)
    with torch.mtia.stream(s):
        seen.append(("side", torch.mtia.is_current_stream_capturing()))
        a = y.relu() + 1
    b = y * y - 2
    seen.append(("origin", torch.mtia.is_current_stream_capturing()))
    cur.wait_stream(s)
    return a + b


def reference(x, w):
    y = x * w
    return (y.relu() + 1) + (y * y - 2)


def test_a_side_stream_in_the_capture_replays_like_eager():
    x = torch.zeros(512, device=DEVICE)
    w = torch.randn(512).to(DEVICE)
    seen = []
    # Eager first (the warm-up PyTorch advises, and the result the replays must match).
    x.copy_(torch.randn(512, generator=torch.Generator().manual_seed(0)).to(DEVICE))
    eager = two_branches(x, w, seen).cpu()
    assert seen == [("side", False), ("origin", False)]
    assert not torch.mtia.is_current_stream_capturing()

    g = torch.mtia.MTIAGraph()
    s = torch.mtia.Stream()
    seen.clear()
    with torch.mtia.graph(g, stream=s):
        assert torch.mtia.is_current_stream_capturing()
        out = two_branches(x, w, seen)
    # Both streams captured: the side stream joined the capture.
    assert seen == [("side", True), ("origin", True)]
    assert not torch.mtia.is_current_stream_capturing()

    g.replay()
    assert torch.equal(out.cpu(), eager)  # the same ops on the same inputs: the same bits
    for seed in range(1, 4):
        new = torch.randn(512, generator=torch.Generator().manual_seed(seed))
        x.copy_(new.to(DEVICE))
        g.replay()
        torch.testing.assert_close(out.cpu(), reference(new, w.cpu()))
    g.reset()


def test_replays_queued_back_to_back_keep_their_order():
    """Several replays without a host wait, each fed by an eager copy on the same stream and
    read by another: every replay's branches see its own input."""
    x = torch.zeros(256, device=DEVICE)
    w = torch.randn(256).to(DEVICE)
    two_branches(x, w, [])  # warm up
    g = torch.mtia.MTIAGraph()
    s = torch.mtia.Stream()
    with torch.mtia.graph(g, stream=s):
        out = two_branches(x, w, [])
    inputs = [torch.randn(256, generator=torch.Generator().manual_seed(10 + i)) for i in range(5)]
    staged = [t.to(DEVICE) for t in inputs]
    results = []
    for t in staged:
        x.copy_(t)  # device to device, queued on the current stream
        g.replay()
        results.append(out.clone())
    for t, got in zip(inputs, results):
        torch.testing.assert_close(got.cpu(), reference(t, w.cpu()))
    g.reset()


def test_a_side_stream_that_does_not_join_back_fails_the_capture():
    x = torch.ones(64, device=DEVICE)
    g = torch.mtia.MTIAGraph()
    s = torch.mtia.Stream()
    side = torch.mtia.Stream()
    with torch.mtia.stream(s):
        g.capture_begin((0, 0))
        side.wait_stream(s)
        with torch.mtia.stream(side):
            y = x * 2  # noqa: F841 (never joined back into s)
        with pytest.raises(RuntimeError, match="unjoined work"):
            g.capture_end()
        assert not torch.mtia.is_current_stream_capturing()
    with pytest.raises(RuntimeError, match="needs a captured graph"):
        g.replay()
    # The streams work eagerly again, and the graph captures anew.
    with torch.mtia.stream(side):
        assert torch.equal((x * 3).cpu(), torch.full((64,), 3.0))
    with torch.mtia.graph(g, stream=s):
        z = x + 1
    g.replay()
    assert torch.equal(z.cpu(), torch.full((64,), 2.0))
    g.reset()


def test_waiting_for_an_event_recorded_before_the_capture_is_refused():
    x = torch.ones(64, device=DEVICE)
    before = torch.mtia.Event()
    before.record(torch.mtia.current_stream())
    g = torch.mtia.MTIAGraph()
    s = torch.mtia.Stream()
    with pytest.raises(RuntimeError, match="recorded outside the capture"):
        with torch.mtia.graph(g, stream=s):
            y = x * 2  # noqa: F841
            torch.mtia.current_stream().wait_event(before)
    assert torch.mtia.current_stream() == torch.mtia.default_stream()


def test_a_tensor_the_side_stream_used_is_freed_when_the_capture_ends():
    """record_stream() on a side stream of the capture: freeing the tensor cannot wait for that
    stream (it is capturing), so its block is freed when the capture ends. Before, the wait
    ended the capture."""
    x = torch.randn(256, generator=torch.Generator().manual_seed(3)).to(DEVICE)
    g = torch.mtia.MTIAGraph()
    s = torch.mtia.Stream()
    with torch.mtia.graph(g, stream=s):
        cur = torch.mtia.current_stream()
        t = x * 2  # on s
        side = torch.mtia.Stream()
        side.wait_stream(cur)
        with torch.mtia.stream(side):
            out = t + 1
            t.record_stream(side)
        del t  # its block waits for the capture's end, not for the side stream
        assert torch.mtia.is_current_stream_capturing()
        cur.wait_stream(side)
    g.replay()
    torch.testing.assert_close(out.cpu(), x.cpu() * 2 + 1)
    x.copy_(torch.ones(256, device=DEVICE))
    g.replay()
    torch.testing.assert_close(out.cpu(), torch.full((256,), 3.0))
    g.reset()
