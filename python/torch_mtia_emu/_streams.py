"""Streams and events, shaped like torch.cuda's / torch.mtia's.

A Stream is a host API stream: an in-order queue of device work on one of the chip's hardware
queues. Each thread has a current stream (the default stream, id 0, until changed); device ops
queue their kernels on it. Events mark a point in a stream; ``elapsed_time`` is simulated
device time, in milliseconds (0 with the timing model off).
"""

import contextlib
from typing import Optional

import torch

from . import _C


class Stream(torch.Stream):
    """A device stream. ``Stream()`` creates a new one; ``current_stream()`` and
    ``default_stream()`` return existing ones. It is a torch.Stream, so PyTorch APIs that take
    one (Tensor.record_stream) accept it."""

    def __new__(cls, device=None, priority: int = 0, *, _id: Optional[int] = None):
        del device, priority  # one device; the emulated queues have no priorities
        sid = _C._create_stream() if _id is None else int(_id)
        self = super().__new__(cls, _cdata=_C._stream_cdata(sid))
        self.id = sid
        return self

    @property
    def hardware_queue(self) -> int:
        """The chip queue this stream's work runs on."""
        return _C._hardware_queue(self.id)

    def synchronize(self) -> None:
        """Waits for all work queued on this stream; raises its pending device error."""
        _C._stream_synchronize(self.id)

    def query(self) -> bool:
        """True when all work queued so far has finished."""
        return _C._stream_query(self.id)

    def wait_event(self, event: "Event") -> None:
        """Work queued on this stream from now on waits for `event` (on the device)."""
        if event._id is not None:
            _C._stream_wait_event(self.id, event._id)

    def wait_stream(self, stream: "Stream") -> None:
        """Work queued on this stream from now on waits for what `stream` has queued."""
        self.wait_event(stream.record_event())

    def record_event(self, event: Optional["Event"] = None) -> "Event":
        event = Event() if event is None else event
        event.record(self)
        return event

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and other.id == self.id

    def __hash__(self) -> int:
        return hash(("privateuseone", self.id))

    def __repr__(self) -> str:
        return f"<torch_mtia_emu.Stream id={self.id} device=privateuseone:0>"


class Event:
    """A marker in a stream. ``elapsed_time`` measures simulated device time."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False):
        del enable_timing, blocking  # every event carries a simulated timestamp
        if interprocess:
            raise ValueError("torch_mtia_emu: interprocess events are not supported")
        self._id: Optional[int] = None

    def record(self, stream: Optional[Stream] = None) -> None:
        if self._id is None:
            self._id = _C._create_event()
        s = current_stream() if stream is None else stream
        _C._record_event(self._id, s.id)

    def wait(self, stream: Optional[Stream] = None) -> None:
        (current_stream() if stream is None else stream).wait_event(self)

    def query(self) -> bool:
        return True if self._id is None else _C._event_query(self._id)

    def synchronize(self) -> None:
        if self._id is not None:
            _C._event_synchronize(self._id)

    def elapsed_time(self, end_event: "Event") -> float:
        """Simulated milliseconds from this event to `end_event` (waits for both)."""
        if self._id is None or end_event._id is None:
            raise RuntimeError("torch_mtia_emu: both events must be recorded before "
                               "elapsed_time()")
        return _C._event_elapsed_ms(self._id, end_event._id)

    def __del__(self):
        if self._id is not None:
            try:
                _C._destroy_event(self._id)
            except Exception:  # the device may already be closed at interpreter exit
                pass

    def __repr__(self) -> str:
        return f"<torch_mtia_emu.Event id={self._id}>"


def current_stream(device=None) -> Stream:
    """The calling thread's current stream."""
    del device
    return Stream(_id=_C._current_stream())


def default_stream(device=None) -> Stream:
    del device
    return Stream(_id=0)


def set_stream(stream: Stream) -> None:
    if stream is not None:
        _C._set_current_stream(stream.id)


@contextlib.contextmanager
def stream(stream: Optional[Stream]):
    """Makes `stream` the current stream inside the block (None: no change)."""
    if stream is None:
        yield
        return
    prev = _C._current_stream()
    _C._set_current_stream(stream.id)
    try:
        yield
    finally:
        _C._set_current_stream(prev)
