"""Random ops inside torch.mtia graphs: the device draws them (Philox-4x32-10, seeded by each
replay from the generator), so every replay gets new numbers, the generator's state decides
them, and their distributions are PyTorch's. Checked against the distributions' CDFs on the
CPU, against the same op's result recomputed on the CPU from the replay's numbers (dropout's
mask, a captured training step with dropout), and for repeatability under get/set_rng_state."""
import math

import pytest
import torch
import torch_mtia_emu  # noqa: F401

from conftest import DEVICE


@pytest.fixture(autouse=True)
def settle():
    torch.mtia.synchronize()
    yield
    torch.mtia.synchronize()


def capture(fn):
    """Captures `fn` on a side stream into a new graph; returns (graph, what fn returned)."""
    g = torch.mtia.MTIAGraph()
    s = torch.mtia.Stream()
    with torch.mtia.graph(g, stream=s):
        out = fn()
    return g, out


def replay(g, out):
    g.replay()
    return out.cpu()


def ks_distance(sample: torch.Tensor, cdf) -> float:
    """Kolmogorov-Smirnov statistic of `sample` (1-D, float64) against `cdf`."""
    x, _ = torch.sort(sample.double())
    n = x.numel()
    f = cdf(x)
    above = torch.arange(1, n + 1, dtype=torch.float64) / n - f
    below = f - torch.arange(0, n, dtype=torch.float64) / n
    return max(above.max().item(), below.max().item())


# With n = 20000 the 0.1 % critical value of the KS statistic is 1.95 / sqrt(n) = 0.0138; the
# seed is fixed, so each check is deterministic.
N = 20000
KS_LIMIT = 1.95 / math.sqrt(N)


def test_every_replay_draws_new_numbers_from_the_right_distributions():
    torch.mtia.manual_seed(11)
    u = torch.empty(N, device=DEVICE)
    z = torch.empty(N, device=DEVICE)
    e = torch.empty(N, device=DEVICE)
    g, _ = capture(lambda: (u.uniform_(-2.0, 3.0), z.normal_(1.5, 0.5), e.exponential_(2.0)))
    seen = []
    for _ in range(3):
        g.replay()
        cu, cz, ce = u.cpu(), z.cpu(), e.cpu()
        assert -2.0 <= cu.min().item() and cu.max().item() < 3.0
        assert ks_distance(cu, lambda x: (x + 2.0) / 5.0) < KS_LIMIT
        assert ks_distance(cz, lambda x: torch.special.ndtr((x - 1.5) / 0.5)) < KS_LIMIT
        assert ce.min().item() >= 0
        assert ks_distance(ce, lambda x: 1 - torch.exp(-2.0 * x)) < KS_LIMIT
        seen.append(cu)
    assert not torch.equal(seen[0], seen[1]) and not torch.equal(seen[1], seen[2])


def test_two_random_ops_of_one_graph_draw_different_numbers():
    a = torch.empty(1000, device=DEVICE)
    b = torch.empty(1000, device=DEVICE)
    g, _ = capture(lambda: (a.uniform_(), b.uniform_()))
    g.replay()
    ca, cb = a.cpu(), b.cpu()
    assert not torch.equal(ca, cb)
    # Uncorrelated, not shifted copies of each other.
    assert abs(torch.corrcoef(torch.stack([ca, cb]))[0, 1].item()) < 0.1


def test_the_generator_state_decides_a_replay():
    x = torch.empty(4096, device=DEVICE)
    g, _ = capture(lambda: x.normal_())
    torch.mtia.manual_seed(5)
    first = replay(g, x)
    torch.mtia.manual_seed(5)
    assert torch.equal(replay(g, x), first)
    state = torch.mtia.get_rng_state()
    second = replay(g, x)
    assert not torch.equal(second, first)
    torch.mtia.set_rng_state(state)
    assert torch.equal(replay(g, x), second)
    # A replay advances the generator, as a random op does: eager draws after it differ.
    torch.mtia.manual_seed(5)
    without = torch.rand(8, device=DEVICE).cpu()
    torch.mtia.manual_seed(5)
    g.replay()
    assert not torch.equal(torch.rand(8, device=DEVICE).cpu(), without)


def test_a_captured_op_draws_with_its_own_generator():
    gen = torch.Generator(device=DEVICE)
    x = torch.empty(512, device=DEVICE)
    y = torch.empty(512, device=DEVICE)
    g, _ = capture(lambda: (x.uniform_(generator=gen), y.uniform_()))
    gen.manual_seed(3)
    torch.mtia.manual_seed(100)
    g.replay()
    fx, fy = x.cpu(), y.cpu()
    gen.manual_seed(3)
    torch.mtia.manual_seed(200)  # only y depends on the default generator
    g.replay()
    assert torch.equal(x.cpu(), fx)
    assert not torch.equal(y.cpu(), fy)


def test_bernoulli_and_dropout_in_a_graph():
    torch.mtia.manual_seed(2)
    x = torch.randn(N).to(DEVICE)
    m = torch.empty(N, device=DEVICE)
    probs = torch.linspace(0, 1, N).to(DEVICE)
    t = torch.empty(N, device=DEVICE)
    g, y = capture(lambda: (torch.nn.functional.dropout(x, p=0.3, training=True),
                            m.bernoulli_(0.25), t.bernoulli_(probs))[0])
    for _ in range(2):
        g.replay()
        cy, cx = y.cpu(), x.cpu()
        kept = cy != 0
        # Dropout: each kept element scaled by 1 / (1 - p), the rest zero, about p dropped.
        torch.testing.assert_close(cy[kept], cx[kept] / 0.7)
        assert abs((~kept).double().mean().item() - 0.3) < 0.015
        cm = m.cpu()
        assert set(cm.unique().tolist()) <= {0.0, 1.0}
        assert abs(cm.mean().item() - 0.25) < 0.015
        ct = t.cpu()
        assert ct[0].item() == 0 and ct[-1].item() == 1  # p = 0 and p = 1 are certain
        # Higher p, more ones: the first and last fifth.
        assert ct[: N // 5].mean().item() < 0.15 and ct[-N // 5:].mean().item() > 0.85


@pytest.mark.parametrize("dtype,args,lo,hi", [
    (torch.int64, (3, 10), 3, 9),
    (torch.int32, (-5, 5), -5, 4),
    (torch.int64, (0, 1 << 40), 0, (1 << 40) - 1),
    (torch.int8, (), 0, 127),
    (torch.float32, (), 0, 1 << 24),
    (torch.bool, (), 0, 1),
])
def test_random_integers_in_a_graph(dtype, args, lo, hi):
    x = torch.empty(N, dtype=dtype, device=DEVICE)
    g, _ = capture(lambda: x.random_(*args))
    c = replay(g, x).double()
    assert c.min().item() >= lo and c.max().item() <= hi
    if hi - lo < 100:
        counts = torch.bincount((c - lo).long(), minlength=hi - lo + 1).double()
        assert counts.min().item() > 0
        # Uniform over the range: each value within 15 % of its expected count.
        assert ((counts / (N / (hi - lo + 1)) - 1).abs() < 0.15).all()
    else:
        assert ks_distance(c, lambda v: ((v - lo) / (hi - lo + 1)).clamp(0, 1)) < KS_LIMIT


def test_rand_and_randn_factories_in_a_graph():
    g, (a, b) = capture(lambda: (torch.rand(3, 100, device=DEVICE),
                                 torch.randn(100, 3, device=DEVICE, dtype=torch.float16)))
    g.replay()
    assert a.shape == (3, 100) and b.shape == (100, 3) and b.dtype == torch.float16
    first = a.cpu()
    g.replay()
    assert not torch.equal(a.cpu(), first)
    assert 0 <= a.cpu().min().item() and a.cpu().max().item() < 1


def test_a_captured_training_step_with_dropout_matches_the_cpu():
    """Forward with dropout, backward and an SGD step, captured; after each replay the step is
    recomputed on the CPU with the replay's dropout mask (read back from the activations), and
    the parameters agree."""
    torch.manual_seed(0)
    lin1, lin2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)
    model = torch.nn.ModuleDict({"l1": lin1, "l2": lin2}).to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    static_x = torch.zeros(8, 16, device=DEVICE)
    static_y = torch.zeros(8, 4, device=DEVICE)
    hidden = {}

    def step():
        opt.zero_grad(set_to_none=False)
        h = torch.nn.functional.dropout(torch.relu(model["l1"](static_x)), p=0.5)
        hidden["h"] = h
        loss = torch.nn.functional.mse_loss(model["l2"](h), static_y)
        loss.backward()
        opt.step()
        return loss

    s = torch.mtia.Stream()
    # Warm-up on the side stream (gradients exist after it), then the reference follows it.
    # The side stream first waits for the parameters and inputs the current one wrote.
    s.wait_stream(torch.mtia.current_stream())
    with torch.mtia.stream(s):
        step()
    torch.mtia.synchronize()
    ref = [p.detach().cpu().clone() for p in model.parameters()]
    g = torch.mtia.MTIAGraph()
    with torch.mtia.graph(g, stream=s):
        step()
    gen = torch.Generator().manual_seed(4)
    for _ in range(3):
        x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)
        static_x.copy_(x.to(DEVICE))
        static_y.copy_(y.to(DEVICE))
        g.replay()
        # The CPU step with the replay's mask: h = relu(x W1^T + b1) * mask * 2.
        w1, b1, w2, b2 = [p.clone().requires_grad_() for p in ref]
        pre = torch.relu(x @ w1.T + b1)
        mask = (hidden["h"].cpu() != 0).float()
        assert 0.2 < mask.mean().item() < 0.8
        h = pre * mask * 2.0
        torch.nn.functional.mse_loss(h @ w2.T + b2, y).backward()
        ref = [(p - 0.1 * p.grad).detach() for p in (w1, b1, w2, b2)]
        for got, want in zip(model.parameters(), ref):
            torch.testing.assert_close(got.detach().cpu(), want, rtol=1e-4, atol=1e-5)


def test_bad_arguments_in_a_graph_raise_and_end_the_capture():
    x = torch.empty(16, device=DEVICE)
    g = torch.mtia.MTIAGraph()
    with pytest.raises(ValueError, match="bernoulli_ expects p"):
        with torch.mtia.graph(g, stream=torch.mtia.Stream()):
            x.bernoulli_(1.5)
    with pytest.raises(ValueError, match="exponential_ expects lambda"):
        with torch.mtia.graph(torch.mtia.MTIAGraph(), stream=torch.mtia.Stream()):
            x.exponential_(-1.0)
    i = torch.empty(8, dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError, match="ranges of up to 2\\^63 values; this one has 2\\^64"):
        with torch.mtia.graph(torch.mtia.MTIAGraph(), stream=torch.mtia.Stream()):
            i.random_(-2**63, None)
    # The device works as before.
    assert torch.equal((torch.ones(4, device=DEVICE) * 2).cpu(), torch.full((4,), 2.0))


@pytest.mark.parametrize("make", [
    lambda: torch.empty(0, device=DEVICE).uniform_(),
    lambda: torch.empty(3, 0, device=DEVICE).normal_(),
    lambda: torch.empty(0, dtype=torch.int64, device=DEVICE).random_(0, 5),
], ids=["uniform", "normal", "random"])
def test_empty_tensors_in_a_graph(make):
    g, out = capture(make)
    g.replay()
    assert out.numel() == 0


def test_eager_random_ops_still_match_the_cpu():
    torch.mtia.manual_seed(9)
    torch.manual_seed(9)
    assert torch.equal(torch.randn(100, device=DEVICE).cpu(), torch.randn(100))
