"""The TorchInductor backend for mtia: scheduling, wrapper code and the lowering check.

Registered by ``_compiler`` when Inductor is first imported, before Inductor registers its
own (Triton) scheduling for "mtia":

- ``MtiaScheduling`` fuses pointwise nodes over the same iteration space (within the device's
  launch limits) and generates one C kernel per fused node (``_codegen``);
- ``MtiaWrapperCodegen`` is Python wrapper code whose kernels are ``GeneratedKernel`` objects;
- every lowering that produces a loop body for an mtia tensor is checked by running the body
  through the code generator: a body it cannot express (an op without an SE form, a dtype
  the units do not take, a scatter, a sort) makes that ATen op an extern call to the device's
  own kernel instead, so code generation never fails on it and nothing goes to the CPU that
  eager mode would not send there.
"""

import collections
import functools
import hashlib
import itertools
from typing import List, Tuple

import sympy
import torch
from torch._inductor import config, ir
from torch._inductor import lowering as L
from torch._inductor.codegen.common import DeviceOpOverrides, register_device_op_overrides
from torch._inductor.codegen.wrapper import PythonWrapperCodegen
from torch._inductor.scheduler import BaseScheduling
from torch._inductor.utils import get_fused_kernel_name
from torch._inductor.virtualized import V
from torch.utils._ordered_set import OrderedSet

from . import _C
from ._codegen import (MAX_WHOLE_ROW, WHOLE_ROW_REDUCTIONS, KernelBuilder, Unsupported, numel,
                       render, space_of)

def device_limits():
    """(max_kernel_args, max_kernel_buffers) of the open device."""
    p = _C._properties()
    return int(p["max_kernel_args"]), int(p["max_kernel_buffers"])


# --- scheduling ----------------------------------------------------------------------------


class MtiaScheduling(BaseScheduling):
    """Generates one C kernel for the PEs per (fused) scheduler node."""

    def __init__(self, scheduler):
        super().__init__(scheduler)
        self.max_args, self.max_buffers = device_limits()

    def get_backend_features(self, device):
        return OrderedSet()

    def group_fn(self, sizes):
        return tuple(V.graph.sizevars.simplify(numel(s)) for s in sizes)

    def _fusable(self, node1, node2) -> bool:
        nodes = list(node1.get_nodes()) + list(node2.get_nodes())
        if any(n.is_template() or not hasattr(n, "_body") for n in nodes):
            return False
        if not kernel_order_ok(nodes):
            return False
        space = kernel_space(nodes)
        # The fused kernel stays within the device's launch limits: its buffers, and its
        # arguments (buffers plus the size symbols).
        names = OrderedSet()
        symbols = OrderedSet()
        for n in nodes:
            for dep in itertools.chain(n.read_writes.reads, n.read_writes.writes):
                names.add(dep.name)
        for s in space[0]:
            symbols |= sympy.sympify(s).free_symbols
        limit = self.max_buffers
        if config.max_fusion_unique_io_buffers is not None:
            limit = min(limit, config.max_fusion_unique_io_buffers)
        return len(names) <= limit and len(names) + 2 * len(symbols) + 8 <= self.max_args

    def can_fuse_vertical(self, node1, node2) -> bool:
        return self._fusable(node1, node2)

    def can_fuse_horizontal(self, node1, node2) -> bool:
        return self._fusable(node1, node2)

    def codegen_node(self, node) -> None:
        # Inductor may reorder a fused node's loops after it fused them; nodes whose loops no
        # longer agree become kernels of their own, in order (a reduction keeps its prologue,
        # its sibling reductions and its epilogue).
        runs = []
        for n in node.get_nodes():
            if runs and kernel_order_ok(runs[-1] + [n]):
                runs[-1].append(n)
            else:
                runs.append([n])
        for run in runs:
            try:
                self._codegen_run(run)
            except Unsupported:
                if len(run) == 1:
                    raise
                # What the fused kernel cannot express, kernels of their own can.
                for n in run:
                    self._codegen_run([n])
        self.free_buffers_in_scheduler()

    def _codegen_run(self, nodes) -> None:
        sizes, nred = kernel_space(nodes)
        # Views that merge dimensions index with FloorDiv/ModularIndexing of a loop variable;
        # splitting the variable at those divisors makes the indices affine again (DMA boxes
        # instead of element gathers).
        sub_sizes, nred_split, expand = split_loops(nodes, sizes, nred)
        fused = OrderedSet(n.get_name() for n in nodes)
        outputs = OrderedSet(V.graph.get_output_names())
        removed = OrderedSet()
        if len(nodes) > 1:
            for n in nodes:
                for buf in n.get_outputs():
                    name = buf.get_name()
                    if name not in outputs and self.scheduler.can_buffer_be_removed_through_fusion(
                            name, fused):
                        removed.add(name)
        order = list(range(len(sub_sizes)))
        try:
            if nred_split == 0 and len(sub_sizes) > 1:
                # A pointwise space may be walked in any order: the innermost dimension is the
                # one along which the fewest accesses are strided, then most of the kernel's
                # bytes are contiguous (a channels-last tensor beside per-channel vectors walks
                # channels innermost; a row-major tensor scaled per row walks its rows), since
                # a DMA pays a whole burst for each shorter run.
                # Gathers read rows along today's innermost dimension: those kernels keep it.
                dry = self._build(nodes, sub_sizes, 0, expand, order, removed)
                if dry.gathers == 0:
                    order = contiguous_order(dry.accesses, len(sub_sizes))
            kb = self._build(nodes, sub_sizes, nred_split, expand, order, removed)
        except Unsupported as e:
            if len(nodes) > 1:
                raise
            raise RuntimeError(f"torch_mtia_emu: cannot generate an mtia kernel for "
                               f"{', '.join(n.get_name() for n in nodes)}: {e}") from e
        for name in kb.removed:
            V.graph.removed_buffers.add(name)
        for n in nodes:
            n.mark_run()  # allocates the node's output buffers in the wrapper
        self._emit(nodes, kb, sizes)

    @staticmethod
    def _build(nodes, sizes, nred, expand, order, removed) -> KernelBuilder:
        """The nodes' bodies run over `sizes` walked in `order` (order[k]: the dimension that
        is loop k, outermost first)."""
        kb = KernelBuilder([sizes[i] for i in order], nred)
        kb.removed |= set(removed)
        loop_vars = expand([kb.vars[order.index(i)] for i in range(len(sizes))])
        with V.set_ops_handler(kb):
            reduced = False
            for n in nodes:
                psizes, rsizes = n.get_ranges()
                reduced = reduced or n.is_reduction()
                if reduced and not n.is_reduction():
                    kb.begin_epilogue()
                n._body(loop_vars[:len(psizes)],
                        loop_vars[len(psizes):len(psizes) + len(rsizes)])
            kb.end_epilogue()
        return kb

    def _emit(self, nodes, kb: KernelBuilder, sizes) -> None:
        wrapper = V.graph.wrapper_code
        base = get_fused_kernel_name(nodes, "original_aten") or "kernel"
        kind = "red" if kb.has_reduction else "poi"
        src, buffers, symbols = render("KERNEL_NAME", kb)
        digest = hashlib.sha256(src.encode()).hexdigest()[:10]
        name = f"mtia_{kind}_{base}"[:63 - len(digest) - 1] + "_" + digest
        src = src.replace("KERNEL_NAME", name)
        if src in wrapper.src_to_kernel:
            var = wrapper.src_to_kernel[src]
        else:
            var = f"mtia_{kind}_{base}_{wrapper.next_kernel_suffix()}"
            wrapper.src_to_kernel[src] = var
            wrapper.add_import_once("from torch_mtia_emu._compiler import GeneratedKernel")
            body = f"GeneratedKernel({name!r}, '''\n{src}''')"
            origins = "\n".join(f"# {n.get_name()}: {n.node.get_origins()}"[:200]
                                for n in nodes if n.node is not None)
            wrapper.define_kernel(var, body, origins, gpu=False)
        real = self.scheduler.mutation_real_name
        args = [real.get(b, b) for b in buffers]
        args += [wrapper.codegen_python_sizevar(s) for s in symbols]
        elements = wrapper.codegen_python_sizevar(V.graph.sizevars.simplify(numel(sizes)))
        args.append(f"{elements} * {kb.cost_per_element()}")
        wrapper.writeline(f"{var}({', '.join(args)})")

    def codegen_template(self, *args, **kwargs):
        raise NotImplementedError("mtia has no kernel templates")

    def codegen_sync(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def ready_to_flush(self) -> bool:
        return False

    def benchmark_fused_nodes(self, nodes):
        raise NotImplementedError("mtia does not benchmark fusions")


def kernel_space(nodes) -> Tuple[List, int]:
    """The iteration space of a kernel of these nodes: its reductions' if it has any."""
    for n in nodes:
        if n.is_reduction():
            return space_of(n)
    return space_of(nodes[0])


def kernel_order_ok(nodes) -> bool:
    """Whether the nodes, in this order, make one kernel: pointwise nodes over one space; or
    a reduction kernel: pointwise nodes over its whole space (a prologue), reductions over
    that space that do not read each other's results, then pointwise nodes over their output
    rows (an epilogue)."""
    reductions = [n for n in nodes if n.is_reduction()]
    if not reductions:
        space = space_of(nodes[0])
        return all(space_of(n) == space for n in nodes[1:])
    space = space_of(reductions[0])
    whole, rows = (space[0], 0), (list(reductions[0].get_ranges()[0]), 0)
    phase = "prologue"
    reduced = OrderedSet()
    for n in nodes:
        if n.is_reduction():
            if phase == "epilogue" or space_of(n) != space:
                return False
            if any(dep.name in reduced for dep in n.read_writes.reads):
                return False  # needs another reduction's complete rows
            reduced |= OrderedSet(dep.name for dep in n.read_writes.writes)
            phase = "reductions"
        elif phase == "prologue":
            if space_of(n) != whole:
                return False
        elif space_of(n) == rows:
            phase = "epilogue"
        else:
            return False
    return True


def contiguous_order(accesses, n: int) -> List[int]:
    """A loop order for a pointwise space whose affine accesses have these (element strides
    per dimension, element bytes): innermost goes the dimension along which the fewest
    accesses are strided (neither contiguous nor broadcast: a DMA pays a whole burst for each
    of their elements, while a broadcast access loads only its distinct elements), then the
    one along which the most bytes are contiguous (stride 1); the others keep their order.
    Ties keep today's order."""
    def key(d):
        strided = sum(1 for coeffs, _ in accesses if coeffs[d] not in (0, 1))
        contiguous = sum(es for coeffs, es in accesses if coeffs[d] == 1)
        return (strided, -contiguous)

    best = n - 1
    for d in range(n - 1):
        if key(d) < key(best):
            best = d
    return [i for i in range(n) if i != best] + [best]


def split_loops(nodes, sizes, nred):
    """(sizes, nred) of the space with each loop variable split at the divisors its indices
    take it by, and a function from the new variables to expressions for the old ones."""
    from torch.utils._sympy.functions import FloorDiv, ModularIndexing
    n = len(sizes)
    points = [set() for _ in range(n)]
    for node in nodes:
        body = node._body
        old_vars = list(body.var_ranges.keys())
        if len(old_vars) != n:
            return sizes, nred, lambda vs: vs
        for expr in body.indexing_exprs.values():
            expr = sympy.sympify(expr)
            for f in expr.atoms(FloorDiv, ModularIndexing):
                arg = f.args[0]
                if arg not in old_vars:
                    continue
                i = old_vars.index(arg)
                d = f.args[1]
                if isinstance(f, ModularIndexing):
                    cands = [d, d * f.args[2]]
                else:
                    cands = [d]
                for c in cands:
                    if isinstance(c, sympy.Integer):
                        points[i].add(int(c))
    new_sizes, groups = [], []
    new_nred = 0
    for i, size in enumerate(sizes):
        size = sympy.sympify(size)
        chain = []
        if size.is_number:
            r = int(size)
            for p in sorted(points[i]):
                if 1 < p < r and r % p == 0 and all(p % q == 0 for q in chain):
                    chain.append(p)
        # outermost first: r / p_k, p_k / p_(k-1), ..., p_1
        parts, strides, prev = [], [], 1
        for p in chain:
            parts.insert(0, sympy.Integer(p // prev))
            strides.insert(0, prev)
            prev = p
        parts.insert(0, size if not chain else sympy.Integer(int(size) // prev))
        strides.insert(0, prev)
        groups.append((len(new_sizes), strides))
        new_sizes += parts
        if i >= n - nred:
            new_nred += len(parts)
    if len(new_sizes) == n or len(new_sizes) > 8:
        return sizes, nred, lambda vs: vs

    def expand(new_vars):
        return [sum((new_vars[start + j] * st for j, st in enumerate(strides)), sympy.Integer(0))
                for start, strides in groups]

    return new_sizes, new_nred, expand


# --- wrapper code --------------------------------------------------------------------------


class MtiaWrapperCodegen(PythonWrapperCodegen):
    """Inductor's Python wrapper code; generated kernels are GeneratedKernel objects."""

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            return PythonWrapperCodegen.create(is_subgraph, subgraph_name, parent_wrapper,
                                               partition_signatures)
        return MtiaWrapperCodegen()

    def write_header(self) -> None:
        super().write_header()
        # PyTorch's own empty_strided_mtia is compiled only into PyTorch builds with MTIA;
        # this one allocates through the device's caching allocator like any mtia tensor.
        self.header.splice("from torch_mtia_emu._compiler import empty_strided_mtia")


class MtiaDeviceOpOverrides(DeviceOpOverrides):
    def import_get_raw_stream_as(self, name):
        return f"from torch._C import _mtia_getCurrentRawStream as {name}"

    def set_device(self, device_idx):
        return f"torch.mtia.set_device({device_idx})"

    def synchronize(self):
        return "torch.mtia.synchronize()"

    def device_guard(self, device_idx):
        return f"torch.mtia.device({device_idx})"

    def current_stream(self):
        return "torch.mtia.current_stream()"


# --- the lowering check --------------------------------------------------------------------


def check_loops(node) -> None:
    """Raises Unsupported when the code generator cannot express this loop body."""
    if not isinstance(node, (ir.Pointwise, ir.Reduction)) or isinstance(
            node, (ir.Scatter, ir.Scan, ir.Sort)) or type(node).__name__ in ("Scatter", "Scan",
                                                                           "Sort"):
        raise Unsupported(f"{type(node).__name__} nodes")
    sizes = list(node.get_size())
    rsizes = list(node.get_reduction_size()) if isinstance(node, ir.Reduction) else []
    kb = KernelBuilder(sizes + rsizes, len(rsizes))
    if len(kb.sizes) > 8 or len(rsizes) > 4:
        raise Unsupported("more than 8 loop dimensions")
    # Inputs whose layout is not fixed yet are indexed as their current strides say: any
    # index is expressible (a gather at worst), so the check does not depend on it.
    allow = ir.FlexibleLayout.allow_indexing
    ir.FlexibleLayout.allow_indexing = True
    try:
        _run_check(node, kb, sizes, rsizes)
    except Unsupported:
        raise
    except Exception as e:  # anything the generator trips on is not generated
        raise Unsupported(f"{type(e).__name__}: {e}") from e
    finally:
        ir.FlexibleLayout.allow_indexing = allow


def _run_check(node, kb, sizes, rsizes) -> None:
    with V.set_ops_handler(kb):
        idx = kb.vars[:len(sizes)] if sizes else []
        if isinstance(node, ir.Reduction):
            rtype = node.reduction_type
            if rtype in WHOLE_ROW_REDUCTIONS:
                r = V.graph.sizevars.simplify(numel(rsizes))
                if not r.is_number or int(r) > MAX_WHOLE_ROW:
                    raise Unsupported(f"{rtype} over rows longer than {MAX_WHOLE_ROW}")
            value = node.inner_fn(idx, kb.vars[len(sizes):])
            value = getattr(value, "value", value)  # ops.* results are wrapped (OpsValue)
            kb.reduction(node.get_dtype(), node.src_dtype, rtype, value)
        else:
            node.inner_fn(idx)


def _unwrap(x):
    while isinstance(x, (ir.TensorBox, ir.StorageBox)):
        x = x.data
    return x


def _on_mtia(args, kwargs) -> bool:
    for a in itertools.chain(args, kwargs.values()):
        for t in (a if isinstance(a, (list, tuple)) else [a]):
            # Factories (iota, full, eye) name their device instead of taking a tensor.
            if isinstance(t, torch.device) and t.type == "mtia":
                return True
            if isinstance(t, ir.IRNode):
                try:
                    d = t.get_device()
                except Exception:
                    continue
                if d is not None and d.type == "mtia":
                    return True
    return False


def _check_result(result, new_buffers) -> None:
    for r in (result if isinstance(result, (list, tuple)) else [result]):
        data = _unwrap(r) if isinstance(r, ir.IRNode) else None
        if isinstance(data, ir.Loops):
            check_loops(data)
        elif isinstance(data, ir.ComputedBuffer):
            check_loops(data.data)
    for buf in new_buffers:
        if isinstance(buf, ir.ComputedBuffer):
            check_loops(buf.data)


# Ops whose lowerings build scatter, sort or scan nodes (the generator has none) and register
# them as mutations, which a discarded lowering would leave behind: these take the device's
# kernel without being lowered first. The *_scatter ops that are pointwise are not among them.
# Pooling windows too: Inductor lowers them to a load per window element, which the library's
# pool2d kernels beat (measured: ResNet's max pool took 4x the library's simulated time).
_ALWAYS_EXTERN = ("scatter_add", "scatter_reduce", "index_put", "index_add", "index_copy",
                  "index_reduce", "masked_scatter", "sort", "cumsum", "cumprod", "logcumsumexp",
                  "cummax", "cummin", "searchsorted", "bucketize", "histc", "bincount",
                  "max_pool2d", "avg_pool2d")


def _always_extern(op) -> bool:
    name = getattr(op, "__name__", str(op)).split(".")[0]
    if name in ("scatter", "scatter_"):
        return True
    return any(key in name for key in _ALWAYS_EXTERN)


# How often each ATen op that Inductor lowers was made an extern call instead, and the first
# reason (for docs/compiler.md's table and the OpInfo sweep).
check_fallbacks: "collections.Counter[str]" = collections.Counter()
check_reasons: dict = {}


def _note_fallback(op, reason: str) -> None:
    name = str(op)
    check_fallbacks[name] += 1
    check_reasons.setdefault(name, reason)


def _checked(op, lowering):
    @functools.wraps(lowering)
    def wrapped(*args, **kwargs):
        if V.graph is None or not _on_mtia(args, kwargs):
            return lowering(*args, **kwargs)
        if isinstance(op, torch._ops.OpOverload) and _always_extern(op):
            _note_fallback(op, "scatter, sort or scan")
            return L.fallback_handler(op, add_to_fallback_set=False)(*args, **kwargs)
        nbuf = len(V.graph.buffers)
        result = lowering(*args, **kwargs)
        try:
            _check_result(result, V.graph.buffers[nbuf:])
            return result
        except Unsupported as e:
            _note_fallback(op, str(e))
        if not isinstance(op, torch._ops.OpOverload):
            raise RuntimeError(f"torch_mtia_emu: no mtia kernel can be generated for {op}")
        # The device's own ATen kernel instead. Buffers the discarded lowering made stay
        # unused, and the scheduler drops them.
        return L.fallback_handler(op, add_to_fallback_set=False)(*args, **kwargs)

    wrapped._mtia_checked = True
    return wrapped


def install_lowering_checks() -> None:
    """Wraps every registered lowering (once) in the mtia check; cheap when already done."""
    for op, lowering in list(L.lowerings.items()):
        if not getattr(lowering, "_mtia_checked", False):
            L.lowerings[op] = _checked(op, lowering)


def register_op_overrides() -> None:
    register_device_op_overrides("mtia", MtiaDeviceOpOverrides())
