"""The c10d backend "mtia_emu": torch.distributed collectives on emulated MTIA devices.

Each process drives its own emulated device. Between processes the data travels on gloo's TCP
transport (a gloo process group over the same store), so ranks may be on different hosts.
On the devices it travels over the chips' modelled inter-chip link (docs/architecture.md,
"Inter-chip links"): a device tensor leaves by a link send (the device's DMA into a pinned host
staging buffer, timed on the link's transmit side, not on PCIe), crosses as a CPU tensor with
the simulated time the send started in front of it, and arrives by a link receive on the peer
(timed on its link's receive side, complete no earlier than the bytes have arrived). So a ring
all-reduce of n ranks on S bytes takes, in simulated time, about 2(n-1)(latency +
(S/n)/bandwidth) plus its reductions, and the device trace shows each step's link transfers
beside the reduction's launch. Every rank uses its chip's link 0: it sends on its transmit
side and receives on its receive side. Reductions run on the device, on its kernels, where the
data lives: a ring all-reduce reduces each received chunk with a device
add/mul/minimum/maximum/bitwise op.

The backend is a Python ProcessGroup (PyTorch calls its methods through the ProcessGroup
trampoline, also from C++: DDP's Reducer and _broadcast_coalesced). Every collective runs when
it is called, in the calling thread: its device work is queued on the caller's current stream
after the work before it, and the returned Work is already complete. async_op=True is accepted
but does not overlap communication with computation. CPU tensors given to this group go to the
inner gloo group unchanged, so a plain init_process_group() (gloo for cpu, mtia_emu for mtia)
serves both.
"""

from datetime import timedelta
from typing import Callable, List, Optional, Sequence

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as _c10d
from torch._C._distributed_c10d import ProcessGroupGloo

from . import _C

#: The name init_process_group takes.
BACKEND_NAME = "mtia_emu"

_ReduceOp = dist.ReduceOp

# gloo matches point-to-point messages by peer and tag. The collectives' own messages use tags
# from here up, so a user's send/recv (tags below it) never meets one of them.
_INTERNAL_TAG = 1 << 30

# The device reduction of each reduce op: dst <- dst (op) src, both device tensors.
_FLOAT_AND_INT_OPS = {
    _ReduceOp.SUM: lambda dst, src: dst.add_(src),
    _ReduceOp.AVG: lambda dst, src: dst.add_(src),  # divided by the world size at the end
    _ReduceOp.PRODUCT: lambda dst, src: dst.mul_(src),
    _ReduceOp.MIN: lambda dst, src: torch.minimum(dst, src, out=dst),
    _ReduceOp.MAX: lambda dst, src: torch.maximum(dst, src, out=dst),
}
_BITWISE_OPS = {
    _ReduceOp.BAND: lambda dst, src: dst.bitwise_and_(src),
    _ReduceOp.BOR: lambda dst, src: dst.bitwise_or_(src),
    _ReduceOp.BXOR: lambda dst, src: dst.bitwise_xor_(src),
}


def _reducer(op: "dist.ReduceOp", dtype: torch.dtype) -> Callable:
    """The device reduction for `op` on `dtype`, or a clear error for what is not supported."""
    kind = op.op if isinstance(op, _ReduceOp) else op
    if kind in _FLOAT_AND_INT_OPS:
        if kind == _ReduceOp.AVG and not (dtype.is_floating_point or dtype.is_complex):
            raise ValueError(f"mtia_emu: ReduceOp.AVG needs a floating-point tensor, got {dtype}; "
                             "use SUM and divide")
        if dtype == torch.bool and kind != _ReduceOp.MIN and kind != _ReduceOp.MAX:
            raise ValueError(f"mtia_emu: ReduceOp.{kind.name} is not defined on bool tensors; "
                             "use MIN (and) or MAX (or)")
        return _FLOAT_AND_INT_OPS[kind]
    if kind in _BITWISE_OPS:
        if dtype.is_floating_point or dtype.is_complex:
            raise ValueError(f"mtia_emu: ReduceOp.{kind.name} needs an integer or bool tensor, "
                             f"got {dtype}")
        return _BITWISE_OPS[kind]
    raise NotImplementedError(f"mtia_emu: ReduceOp.{kind.name} is not supported (supported: SUM, "
                              "AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR)")


class _CompletedWork(dist.Work):
    """The Work of a collective that has run: wait() returns at once, the future holds the
    result tensors."""

    def __init__(self, result: List[torch.Tensor]):
        super().__init__()
        self._result = result
        self._future = torch.futures.Future()
        self._future.set_result(result)

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def result(self) -> List[torch.Tensor]:
        return self._result

    def get_future(self) -> torch.futures.Future:
        return self._future


def _synchronize() -> None:
    """Waits for the current stream's work: staged host copies are complete after it, and
    pinned staging buffers may be reused."""
    torch.mtia.current_stream().synchronize()


# The link every rank sends and receives on (preset link_count >= 1).
_LINK = 0
# A staged message: the simulated time (ps, int64) the link send started, then the bytes.
_HEADER = 8


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _link_out(t: torch.Tensor, peer: int) -> torch.Tensor:
    """Sends device tensor `t` (any strides) over the link towards rank `peer`: returns the
    pinned uint8 message the transport carries (header, then t's bytes), complete on return."""
    src = t.contiguous()
    nbytes = _nbytes(src)
    staged = torch.empty(_HEADER + nbytes, dtype=torch.uint8, pin_memory=True)
    sent_ps = 0
    if nbytes:
        sent_ps = _C._link_send(staged.data_ptr() + _HEADER, src.data_ptr(), nbytes, _LINK, peer)
    staged[:_HEADER].view(torch.int64)[0] = sent_ps
    return staged


def _staging_for(t: torch.Tensor) -> torch.Tensor:
    """A pinned message buffer for `t`'s bytes, to receive a _link_out message into."""
    return torch.empty(_HEADER + _nbytes(t), dtype=torch.uint8, pin_memory=True)


def _link_in(t: torch.Tensor, staged: torch.Tensor, peer: int, keep: list) -> None:
    """Receives the message `staged` (from rank `peer`'s _link_out) into device tensor `t` by a
    link receive queued on the current stream. What the device still reads is appended to
    `keep`, which the caller holds until it has synchronised."""
    nbytes = _nbytes(t)
    if nbytes == 0:
        return
    if staged.numel() != _HEADER + nbytes:
        raise RuntimeError(f"mtia_emu: rank {peer} sent {staged.numel() - _HEADER} bytes where "
                           f"{nbytes} were expected")
    sent_ps = int(staged[:_HEADER].view(torch.int64)[0])
    dst = t if t.is_contiguous() else torch.empty(t.shape, dtype=t.dtype, device=t.device)
    _C._link_receive(dst.data_ptr(), staged.data_ptr() + _HEADER, nbytes, _LINK, peer, sent_ps)
    if dst is not t:
        t.copy_(dst)
    keep.extend((staged, dst))


def _receive_parts(outs: List[torch.Tensor], staged: List[torch.Tensor], own: int,
                   t: torch.Tensor) -> None:
    """Fills rank src's part outs[src] from its message staged[src] by a link receive, and this
    rank's own part (src == own) from `t` by a device copy; complete on return."""
    keep: list = []
    for src, (o, h) in enumerate(zip(outs, staged)):
        if src == own:
            o.copy_(t)
        else:
            _link_in(o, h, src, keep)
    _synchronize()


class ProcessGroupMtiaEmu(dist.ProcessGroup):
    """The "mtia_emu" process group: collectives on mtia tensors over gloo's transport, with
    reductions on the device. Created by init_process_group / new_group through the backend
    registry; not meant to be constructed directly."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta):
        super().__init__(rank, size)
        if size < 1 or not 0 <= rank < size:
            raise ValueError(f"mtia_emu: rank {rank} is not in a group of size {size}")
        self._timeout = timeout
        # The transport: a gloo group over the same store, under its own key prefix.
        transport_store = dist.PrefixStore("mtia_emu_transport/", store)
        self._gloo = dist.ProcessGroup(transport_store, rank, size)
        gloo = ProcessGroupGloo(transport_store, rank, size, timeout)
        self._gloo._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
        self._gloo._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO,
                                     gloo)
        # Registered here too: c10d keeps a group's name in its backends (DeviceMesh and FSDP
        # look groups up by name), and CPU tensors that reach c10d's dispatcher go to gloo.
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, gloo)

    def getBackendName(self) -> str:
        return BACKEND_NAME

    def __repr__(self) -> str:
        return f"ProcessGroupMtiaEmu(rank={self.rank()}, size={self.size()})"

    # --- helpers ---------------------------------------------------------------------------

    def _on_device(self, what: str, tensors: Sequence[torch.Tensor]) -> bool:
        """True when `tensors` are mtia tensors, False when they are CPU tensors (which go to
        gloo); a clear error for anything else or a mix."""
        types = {t.device.type for t in tensors}
        if not types:
            raise ValueError(f"mtia_emu {what}: no tensors given")
        if types == {"mtia"}:
            return True
        if types == {"cpu"}:
            return False
        raise ValueError(f"mtia_emu {what}: tensors must all be on mtia (or all on cpu), got "
                         f"{sorted(types)}")

    @staticmethod
    def _single(what: str, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        if len(tensors) != 1:
            raise ValueError(f"mtia_emu {what}: one tensor per process (one device per process), "
                             f"got {len(tensors)}")
        return tensors[0]

    def _check_rank(self, what: str, rank: int) -> None:
        if not 0 <= rank < self.size():
            raise ValueError(f"mtia_emu {what}: rank {rank} is not in this group of "
                             f"{self.size()} ranks")

    def _exchange(self, send: Optional[torch.Tensor], dst: int, recv: Optional[torch.Tensor],
                  src: int, tag: int) -> None:
        """Sends host tensor `send` to `dst` while receiving host tensor `recv` from `src`."""
        works = []
        if send is not None:
            works.append(self._gloo.send([send], dst, tag))
        if recv is not None:
            works.append(self._gloo.recv([recv], src, tag))
        for w in works:
            w.wait(self._timeout)

    def _ring_reduce_scatter(self, chunks: List[torch.Tensor], reduce: Callable) -> None:
        """Ring reduce-scatter over the device tensors `chunks` (one per rank, contiguous):
        afterwards chunks[rank] holds the reduction of every rank's chunks[rank]. World size - 1
        steps; in each, rank r sends chunk (r-s-1) to r+1, receives chunk (r-s-2) from r-1 and
        reduces it into its own on the device."""
        n, r = self.size(), self.rank()
        nxt, prv = (r + 1) % n, (r - 1) % n
        keep: list = []
        for s in range(n - 1):
            out_chunk = chunks[(r - s - 1) % n]
            in_chunk = chunks[(r - s - 2) % n]
            staged_in = _staging_for(in_chunk)
            self._exchange(_link_out(out_chunk, nxt), nxt, staged_in, prv, tag=_INTERNAL_TAG + s)
            if in_chunk.numel() > 0:
                received = torch.empty_like(in_chunk)
                _link_in(received, staged_in, prv, keep)
                reduce(in_chunk, received)
        _synchronize()  # the staged buffers are freed on return

    def _ring_all_gather(self, chunks: List[torch.Tensor]) -> None:
        """Ring all-gather: rank r owns chunks[r]; afterwards every rank holds every chunk."""
        n, r = self.size(), self.rank()
        nxt, prv = (r + 1) % n, (r - 1) % n
        keep: list = []
        for s in range(n - 1):
            out_chunk = chunks[(r - s) % n]
            in_chunk = chunks[(r - s - 1) % n]
            staged_in = _staging_for(in_chunk)
            self._exchange(_link_out(out_chunk, nxt), nxt, staged_in, prv,
                           tag=_INTERNAL_TAG + n + s)
            _link_in(in_chunk, staged_in, prv, keep)
        _synchronize()  # the staged buffers are freed on return

    def _all_reduce_flat(self, flat: torch.Tensor, op) -> None:
        """In-place ring all-reduce of the contiguous 1-D device tensor `flat`."""
        reduce = _reducer(op, flat.dtype)
        if self.size() > 1:
            chunks = list(torch.tensor_split(flat, self.size()))
            self._ring_reduce_scatter(chunks, reduce)
            self._ring_all_gather(chunks)
        kind = op.op if isinstance(op, _ReduceOp) else op
        if kind == _ReduceOp.AVG:
            flat.div_(self.size())

    # --- collectives -----------------------------------------------------------------------

    def allreduce(self, tensors: List[torch.Tensor], opts=None) -> dist.Work:
        opts = opts if opts is not None else _c10d.AllreduceOptions()
        if not self._on_device("allreduce", tensors):
            return self._gloo.allreduce(tensors, opts)
        t = self._single("allreduce", tensors)
        flat = t.contiguous().view(-1)
        self._all_reduce_flat(flat, opts.reduceOp)
        if flat.data_ptr() != t.data_ptr() or not t.is_contiguous():
            t.copy_(flat.view(t.shape))
        return _CompletedWork([t])

    def allreduce_coalesced(self, tensors: List[torch.Tensor], opts=None) -> dist.Work:
        opts = opts if opts is not None else _c10d.AllreduceCoalescedOptions()
        if not self._on_device("allreduce_coalesced", tensors):
            return self._gloo.allreduce_coalesced(tensors, opts)
        dtypes = {t.dtype for t in tensors}
        if len(dtypes) != 1:
            raise ValueError(f"mtia_emu allreduce_coalesced: tensors must share one dtype, got "
                             f"{sorted(str(d) for d in dtypes)}")
        flat = torch.cat([t.reshape(-1) for t in tensors])
        self._all_reduce_flat(flat, opts.reduceOp)
        offset = 0
        for t in tensors:
            t.copy_(flat[offset:offset + t.numel()].view(t.shape))
            offset += t.numel()
        return _CompletedWork(list(tensors))

    def broadcast(self, tensors: List[torch.Tensor], opts=None) -> dist.Work:
        opts = opts if opts is not None else _c10d.BroadcastOptions()
        if not self._on_device("broadcast", tensors):
            return self._gloo.broadcast(tensors, opts)
        t = self._single("broadcast", tensors)
        self._check_rank("broadcast", opts.rootRank)
        root = opts.rootRank
        if self.size() == 1:
            return _CompletedWork([t])
        # The root sends once (peer: the next rank); every other rank receives from the root.
        host = _link_out(t, (root + 1) % self.size()) if self.rank() == root else _staging_for(t)
        gloo_opts = _c10d.BroadcastOptions()
        gloo_opts.rootRank = root
        self._gloo.broadcast([host], gloo_opts).wait(self._timeout)
        if self.rank() != root:
            keep: list = []
            _link_in(t, host, root, keep)
            _synchronize()
        return _CompletedWork([t])

    def reduce(self, tensors: List[torch.Tensor], opts=None) -> dist.Work:
        opts = opts if opts is not None else _c10d.ReduceOptions()
        if not self._on_device("reduce", tensors):
            return self._gloo.reduce(tensors, opts)
        t = self._single("reduce", tensors)
        self._check_rank("reduce", opts.rootRank)
        reduce = _reducer(opts.reduceOp, t.dtype)
        root = opts.rootRank
        if self.rank() != root:
            self._gloo.send([_link_out(t, root)], root, _INTERNAL_TAG).wait(self._timeout)
            return _CompletedWork([t])
        # The root receives every other rank's tensor in rank order and reduces it on the
        # device (rank order: the same result on every run).
        acc = t.clone(memory_format=torch.contiguous_format)
        for src in range(self.size()):
            if src == root:
                continue
            staged = _staging_for(acc)
            self._gloo.recv([staged], src, _INTERNAL_TAG).wait(self._timeout)
            received, keep = torch.empty_like(acc), []
            _link_in(received, staged, src, keep)
            reduce(acc, received)
            _synchronize()
        kind = opts.reduceOp.op if isinstance(opts.reduceOp, _ReduceOp) else opts.reduceOp
        if kind == _ReduceOp.AVG:
            acc.div_(self.size())
        t.copy_(acc)
        return _CompletedWork([t])

    def allgather(self, output_tensors: List[List[torch.Tensor]], input_tensors:
                  List[torch.Tensor], opts=None) -> dist.Work:
        opts = opts if opts is not None else _c10d.AllgatherOptions()
        if not self._on_device("allgather", input_tensors):
            return self._gloo.allgather(output_tensors, input_tensors, opts)
        t = self._single("allgather", input_tensors)
        outs = self._single_list("allgather", output_tensors)
        self._check_outputs("allgather", outs, t)
        n, r = self.size(), self.rank()
        if n == 1:
            outs[0].copy_(t)
            return _CompletedWork(outs)
        # One send (peer: the next rank) that every other rank receives; this rank's own part
        # is a device copy.
        host_outs = [_staging_for(o) for o in outs]
        self._gloo.allgather([host_outs], [_link_out(t, (r + 1) % n)]).wait(self._timeout)
        _receive_parts(outs, host_outs, r, t)
        return _CompletedWork(outs)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor,
                          opts=None) -> dist.Work:
        """all_gather_into_tensor: output is the size() inputs concatenated along dim 0."""
        opts = opts if opts is not None else _c10d.AllgatherOptions()
        if not self._on_device("all_gather_into_tensor", [output, input]):
            return self._gloo.all_gather_single(output, input, opts)
        if output.numel() != input.numel() * self.size():
            raise ValueError(f"mtia_emu all_gather_into_tensor: output has {output.numel()} "
                             f"elements, expected input's {input.numel()} x {self.size()} ranks")
        flat = output.reshape(-1) if output.is_contiguous() else torch.empty(
            output.numel(), dtype=output.dtype, device=output.device)
        parts = list(flat.split(input.numel()))
        self.allgather([parts], [input.reshape(-1)]).wait()
        if flat.data_ptr() != output.data_ptr():
            output.copy_(flat.view(output.shape))
        return _CompletedWork([output])

    def gather(self, output_tensors: List[List[torch.Tensor]], input_tensors: List[torch.Tensor],
               opts=None) -> dist.Work:
        opts = opts if opts is not None else _c10d.GatherOptions()
        if not self._on_device("gather", input_tensors):
            return self._gloo.gather(output_tensors, input_tensors, opts)
        t = self._single("gather", input_tensors)
        self._check_rank("gather", opts.rootRank)
        gloo_opts = _c10d.GatherOptions()
        gloo_opts.rootRank = opts.rootRank
        root = opts.rootRank
        if self.rank() == root:
            outs = self._single_list("gather", output_tensors)
            self._check_outputs("gather", outs, t)
            host_outs = [_staging_for(o) for o in outs]
            # gloo takes the root's own part too: it is staged on the host, the device copies it.
            own = torch.empty(_HEADER + _nbytes(t), dtype=torch.uint8, pin_memory=True)
            self._gloo.gather([host_outs], [own], gloo_opts).wait(self._timeout)
            _receive_parts(outs, host_outs, root, t)
            return _CompletedWork(outs)
        self._gloo.gather([], [_link_out(t, root)], gloo_opts).wait(self._timeout)
        return _CompletedWork([t])

    def scatter(self, output_tensors: List[torch.Tensor], input_tensors:
                List[List[torch.Tensor]], opts=None) -> dist.Work:
        opts = opts if opts is not None else _c10d.ScatterOptions()
        if not self._on_device("scatter", output_tensors):
            return self._gloo.scatter(output_tensors, input_tensors, opts)
        t = self._single("scatter", output_tensors)
        self._check_rank("scatter", opts.rootRank)
        gloo_opts = _c10d.ScatterOptions()
        root = opts.rootRank
        gloo_opts.rootRank = root
        host = _staging_for(t)
        if self.rank() == root:
            ins = self._single_list("scatter", input_tensors)
            self._check_outputs("scatter", ins, t)
            # Each other rank's part goes over the link; the root's own is a device copy.
            staged = [_link_out(i, dst) if dst != root else
                      torch.zeros(_HEADER + _nbytes(i), dtype=torch.uint8, pin_memory=True)
                      for dst, i in enumerate(ins)]
            self._gloo.scatter([host], [staged], gloo_opts).wait(self._timeout)
            t.copy_(ins[root])
        else:
            self._gloo.scatter([host], [], gloo_opts).wait(self._timeout)
            keep: list = []
            _link_in(t, host, root, keep)
        _synchronize()
        return _CompletedWork([t])

    def reduce_scatter(self, output_tensors: List[torch.Tensor], input_tensors:
                       List[List[torch.Tensor]], opts=None) -> dist.Work:
        opts = opts if opts is not None else _c10d.ReduceScatterOptions()
        if not self._on_device("reduce_scatter", output_tensors):
            return self._gloo.reduce_scatter(output_tensors, input_tensors, opts)
        out = self._single("reduce_scatter", output_tensors)
        ins = self._single_list("reduce_scatter", input_tensors)
        for i in ins:
            if i.shape != out.shape or i.dtype != out.dtype:
                raise ValueError("mtia_emu reduce_scatter: every input must have the output's "
                                 f"shape {tuple(out.shape)} and dtype {out.dtype}, got "
                                 f"{tuple(i.shape)} {i.dtype}")
        # One contiguous device buffer with a chunk per rank; the ring leaves rank r's reduced
        # chunk in chunks[r].
        flat = torch.cat([i.reshape(-1) for i in ins])
        self._reduce_scatter_flat(flat, out, opts.reduceOp)
        return _CompletedWork([out])

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor,
                              opts=None) -> dist.Work:
        """reduce_scatter_tensor: input is the size() chunks concatenated along dim 0."""
        opts = opts if opts is not None else _c10d.ReduceScatterOptions()
        if not self._on_device("reduce_scatter_tensor", [output, input]):
            return self._gloo.reduce_scatter_single(output, input, opts)
        if input.numel() != output.numel() * self.size():
            raise ValueError(f"mtia_emu reduce_scatter_tensor: input has {input.numel()} "
                             f"elements, expected output's {output.numel()} x {self.size()} "
                             "ranks")
        self._reduce_scatter_flat(input.reshape(-1).clone(), output, opts.reduceOp)
        return _CompletedWork([output])

    def _reduce_scatter_flat(self, flat: torch.Tensor, out: torch.Tensor, op) -> None:
        reduce = _reducer(op, flat.dtype)
        chunks = list(flat.split(out.numel()))
        if self.size() > 1:
            self._ring_reduce_scatter(chunks, reduce)
        mine = chunks[self.rank()]
        kind = op.op if isinstance(op, _ReduceOp) else op
        if kind == _ReduceOp.AVG:
            mine.div_(self.size())
        out.copy_(mine.view(out.shape))
        _synchronize()

    def alltoall(self, output_tensors: List[torch.Tensor], input_tensors: List[torch.Tensor],
                 opts=None) -> dist.Work:
        opts = opts if opts is not None else _c10d.AllToAllOptions()
        if not self._on_device("all_to_all", list(output_tensors) + list(input_tensors)):
            return self._gloo.alltoall(output_tensors, input_tensors, opts)
        n = self.size()
        if len(output_tensors) != n or len(input_tensors) != n:
            raise ValueError(f"mtia_emu all_to_all: {n} output and {n} input tensors needed, got "
                             f"{len(output_tensors)} and {len(input_tensors)}")
        # Rank r's input i goes to rank i's output r; a pairwise exchange with each peer.
        r = self.rank()
        output_tensors[r].copy_(input_tensors[r])
        keep: list = []
        for step in range(1, n):
            dst, src = (r + step) % n, (r - step) % n
            staged_in = _staging_for(output_tensors[src])
            self._exchange(_link_out(input_tensors[dst], dst), dst, staged_in, src,
                           tag=_INTERNAL_TAG + step)
            _link_in(output_tensors[src], staged_in, src, keep)
        _synchronize()
        return _CompletedWork(list(output_tensors))

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor,
                          output_split_sizes: List[int], input_split_sizes: List[int],
                          opts=None) -> dist.Work:
        opts = opts if opts is not None else _c10d.AllToAllOptions()
        if not self._on_device("all_to_all_single", [output, input]):
            return self._gloo.all_to_all_single(output, input, output_split_sizes,
                                                input_split_sizes, opts)
        outs = self._split_dim0("all_to_all_single", output, output_split_sizes)
        ins = self._split_dim0("all_to_all_single", input, input_split_sizes)
        if output.is_contiguous():
            self.alltoall(outs, ins).wait()
        else:
            staged = [o.contiguous() for o in outs]
            self.alltoall(staged, ins).wait()
            for o, s in zip(outs, staged):
                o.copy_(s)
        return _CompletedWork([output])

    def _split_dim0(self, what: str, t: torch.Tensor, sizes: List[int]) -> List[torch.Tensor]:
        n = self.size()
        if not sizes:
            if t.shape[0] % n:
                raise ValueError(f"mtia_emu {what}: dim 0 ({t.shape[0]}) is not divisible by "
                                 f"the {n} ranks; pass split sizes")
            return list(t.split(t.shape[0] // n))
        if len(sizes) != n or sum(sizes) != t.shape[0]:
            raise ValueError(f"mtia_emu {what}: split sizes {list(sizes)} must be {n} sizes "
                             f"summing to dim 0 ({t.shape[0]})")
        return list(t.split(list(sizes)))

    # The names c10d's C++ side calls (functional collectives, DTensor, FSDP2): without them
    # the base class would send mtia tensors through c10d's dispatcher ops.

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor,
                        opts=None) -> dist.Work:
        return self.all_gather_single(output, input, opts)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor,
                             opts=None) -> dist.Work:
        return self.reduce_scatter_single(output, input, opts)

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor,
                      output_split_sizes: List[int], input_split_sizes: List[int],
                      opts=None) -> dist.Work:
        return self.all_to_all_single(output, input, output_split_sizes, input_split_sizes, opts)

    def allgather_into_tensor_coalesced(self, outputs: List[torch.Tensor],
                                        inputs: List[torch.Tensor], opts=None) -> dist.Work:
        if len(outputs) != len(inputs):
            raise ValueError(f"mtia_emu allgather_into_tensor_coalesced: {len(outputs)} outputs "
                             f"for {len(inputs)} inputs")
        for o, i in zip(outputs, inputs):
            self.all_gather_single(o, i, opts).wait()
        return _CompletedWork(list(outputs))

    def reduce_scatter_tensor_coalesced(self, outputs: List[torch.Tensor],
                                        inputs: List[torch.Tensor], opts=None) -> dist.Work:
        if len(outputs) != len(inputs):
            raise ValueError(f"mtia_emu reduce_scatter_tensor_coalesced: {len(outputs)} outputs "
                             f"for {len(inputs)} inputs")
        for o, i in zip(outputs, inputs):
            self.reduce_scatter_single(o, i, opts).wait()
        return _CompletedWork(list(outputs))

    def allgather_coalesced(self, output_lists: List[List[torch.Tensor]],
                            inputs: List[torch.Tensor], opts=None) -> dist.Work:
        if len(output_lists) != len(inputs):
            raise ValueError(f"mtia_emu allgather_coalesced: {len(output_lists)} output lists "
                             f"for {len(inputs)} inputs")
        for outs, i in zip(output_lists, inputs):
            self.allgather([outs], [i], opts).wait()
        return _CompletedWork([t for outs in output_lists for t in outs])

    @staticmethod
    def _check_tag(what: str, tag: int) -> None:
        if not 0 <= tag < _INTERNAL_TAG:
            raise ValueError(f"mtia_emu {what}: tag {tag} is outside 0..{_INTERNAL_TAG - 1} (the "
                             "tags above are the collectives' own)")

    def send(self, tensors: List[torch.Tensor], dst: int, tag: int) -> dist.Work:
        self._check_tag("send", tag)
        if not self._on_device("send", tensors):
            return self._gloo.send(tensors, dst, tag)
        t = self._single("send", tensors)
        self._check_rank("send", dst)
        self._gloo.send([_link_out(t, dst)], dst, tag).wait(self._timeout)
        return _CompletedWork([t])

    def recv(self, tensors: List[torch.Tensor], src: int, tag: int) -> dist.Work:
        self._check_tag("recv", tag)
        if not self._on_device("recv", tensors):
            return self._gloo.recv(tensors, src, tag)
        t = self._single("recv", tensors)
        self._check_rank("recv", src)
        staged = _staging_for(t)
        self._gloo.recv([staged], src, tag).wait(self._timeout)
        keep: list = []
        _link_in(t, staged, src, keep)
        _synchronize()
        return _CompletedWork([t])

    def barrier(self, opts=None) -> dist.Work:
        """Waits for this device's queued work, then for every rank."""
        if torch.mtia.is_initialized():
            torch.mtia.synchronize()
        self._gloo.barrier(_c10d.BarrierOptions()).wait(self._timeout)
        return _CompletedWork([])

    def _check_outputs(self, what: str, parts: List[torch.Tensor], like: torch.Tensor) -> None:
        """One part per rank, each of `like`'s size and dtype: what crosses between ranks."""
        if len(parts) != self.size():
            raise ValueError(f"mtia_emu {what}: {self.size()} tensors needed (one per rank), got "
                             f"{len(parts)}")
        for p in parts:
            if p.numel() != like.numel() or p.dtype != like.dtype:
                raise ValueError(f"mtia_emu {what}: every tensor must have {like.numel()} "
                                 f"elements of {like.dtype}, got {p.numel()} of {p.dtype}")

    @staticmethod
    def _single_list(what: str, lists: List[List[torch.Tensor]]) -> List[torch.Tensor]:
        if len(lists) != 1:
            raise ValueError(f"mtia_emu {what}: one tensor list per process (one device per "
                             f"process), got {len(lists)}")
        return list(lists[0])


def _create(opts: "_c10d._DistributedBackendOptions", backend_options) -> ProcessGroupMtiaEmu:
    """The backend registry's constructor (extended API: it also names the group, which
    DeviceMesh and FSDP look groups up by)."""
    pg = ProcessGroupMtiaEmu(opts.store, opts.group_rank, opts.group_size, opts.timeout)
    if opts.group_id:
        pg._set_group_name(opts.group_id)
    return pg


# c10d's dispatcher ops (c10d::allreduce_, ...) under the MTIA key. They are reached only
# when a collective on mtia tensors bypasses the process group's methods (a method this group
# does not implement, or a group of another backend); without these the device's CPU fallback
# would run them on host copies and return before the results came back.
_c10d_refusals: Optional[torch.library.Library] = None


def _refuse_c10d_dispatch() -> None:
    global _c10d_refusals
    if _c10d_refusals is not None:
        return
    _c10d_refusals = torch.library.Library("c10d", "IMPL")
    for qualified in torch._C._dispatch_get_all_op_names():
        if not qualified.startswith("c10d::"):
            continue
        name = qualified[len("c10d::"):]

        def refuse(*args, _name=qualified, **kwargs):
            raise NotImplementedError(
                f"{_name} on mtia tensors: c10d has no mtia backend of its own; collectives on "
                f"mtia tensors run through a \"{BACKEND_NAME}\" process group's methods "
                "(torch.distributed's functions with the default group or a group made with "
                f"backend=\"{BACKEND_NAME}\"), and this one is not among them")
        _c10d_refusals.impl(name, refuse, "MTIA")


def register() -> None:
    """Registers "mtia_emu" with torch.distributed for the mtia device (import time)."""
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=["mtia"])
    _refuse_c10d_dispatch()
