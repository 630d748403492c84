// mtia::Device: one open MTIA device, and everything the tensor layer does with it.
//
// Errors. Every call reports misuse and device failures by throwing mtia::Error (error.h)
// whose kind() says what class of problem it was. A failed call leaves the device usable.
//
// Streams. Work is issued to streams (stream.h); each stream runs its work in order. The
// default stream Stream{} runs on hardware queue 0; created streams take hardware queues
// 1 .. N-2 round-robin (queue N-1 is kept for the runtime's own fence repair, see record()),
// so with more streams than queues some streams share a queue and run one after the other.
// Queuing work blocks while the hardware queue's ring (1024 packets in the driver) is full.
//
// Device faults. When the device fails a command (Completion not ok: bad address, malformed
// descriptor, ...), the error is thrown by the synchronous call that issued it; for
// asynchronous work it is held by the stream ("sticky") and thrown, once, by the stream's
// next synchronize() or query() that sees the work finished, or by the next synchronous call
// on that stream. Work already queued behind the failed command on the same hardware queue is
// abandoned (reported with the same error). Other streams on other queues are not affected,
// and the stream is usable again once the error has been reported.
//
// Host memory and asynchronous copies - who keeps what alive:
//  * Pinned memory (host_alloc, host_register): the device reads and writes it in place. The
//    caller must not reuse the bytes of an async copy until the stream has passed it
//    (synchronize the stream or an event recorded after it). host_free/host_unregister of
//    memory with copies still in flight first waits for those copies to finish.
//  * Pageable memory (anything else), host -> device copy_async: the data is staged into an
//    internal pinned buffer before the call returns, so the caller may overwrite or free its
//    memory at once; the staging buffer is released when the copy completes.
//  * Pageable memory, device -> host copy_async: synchronous (it returns once the data has
//    arrived), like CUDA, because the device cannot write to memory the runtime does not own
//    after the call returns.
//  * Synchronous copies may map pageable memory for DMA for the duration of the call.
//
// Threads. A Device may be used from several host threads at once (typically one stream per
// thread). Using one stream from several threads is safe but their work interleaves in
// submission order.
//
// The in-process backend hosts one simulated device per process, and only one Device may be
// open at a time in a process (SystemC has one simulation context); open another after the
// first is destroyed. Devices served by device servers (backend "socket", docs/device-server.md)
// have no such limit: open as many as there are servers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mtia/device_properties.h"
#include "mtia/device_ptr.h"
#include "mtia/kernel.h"
#include "mtia/layout.h"
#include "mtia/memory_stats.h"
#include "mtia/stream.h"

namespace mtia {

namespace detail {
struct DeviceAccess;  // lets other host_api headers (raw_packet.h) reach the implementation
}

class Device {
 public:
  // Opens a device. Throws Error(kDeviceUnavailable) if the backend does not exist or the
  // device cannot be opened, Error(kInvalidArgument) for a bad preset or override.
  static Device open(const DeviceOptions& options = {});

  // Waits for all outstanding work (device errors not yet reported are logged, not thrown),
  // releases pinned and registered host memory and closes the device.
  ~Device();
  Device(Device&&) noexcept;
  Device& operator=(Device&&) noexcept;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceProperties& properties() const;

  // --- device memory --------------------------------------------------------------------
  // Allocates `bytes` (> 0) of device DRAM, 256-byte aligned. Throws kOutOfMemory naming the
  // request and what is free; kInvalidArgument for 0 bytes.
  DevicePtr malloc(uint64_t bytes);
  // Frees an allocation. Throws kInvalidPointer for an address that is not the start of a
  // live allocation (never allocated, interior pointer, or freed before - the message says
  // which). Work still queued that uses the memory must have finished: synchronize first.
  void free(DevicePtr ptr);
  MemoryStats memory_stats() const;
  void reset_peak_memory_stats();

  // --- pinned host memory ---------------------------------------------------------------
  // Page-aligned host memory mapped for device DMA; freed with host_free (not std::free).
  void* host_alloc(size_t bytes);
  void host_free(void* ptr);
  // Maps caller-owned memory for DMA until host_unregister(ptr). Must not overlap another
  // pinned region. The caller keeps the memory alive until host_unregister returns.
  void host_register(void* ptr, size_t bytes);
  void host_unregister(void* ptr);
  // True if [ptr, ptr + bytes) lies inside one pinned or registered region.
  bool is_pinned(const void* ptr, size_t bytes = 1) const;

  // --- copies -----------------------------------------------------------------------------
  // dst <- src element by element. Layouts: same element size, rank and sizes; offsets and
  // strides in elements (layout.h). Each side's byte span must lie inside one live device
  // allocation (device side), or one pinned region or no pinned region at all (host side);
  // the first byte must be aligned to the element size. Zero-element copies do nothing.
  // copy() returns when the data has arrived; copy_async() when it is queued on `stream`
  // (host memory rules above). Both throw kInvalidArgument / kInvalidPointer /
  // kInvalidHandle before anything is queued; copy() also throws kDeviceFault.
  void copy(DevicePtr dst, const Layout& dst_layout, const void* src, const Layout& src_layout,
            Stream stream = {});
  void copy(void* dst, const Layout& dst_layout, DevicePtr src, const Layout& src_layout,
            Stream stream = {});
  void copy(DevicePtr dst, const Layout& dst_layout, DevicePtr src, const Layout& src_layout,
            Stream stream = {});
  void copy_async(DevicePtr dst, const Layout& dst_layout, const void* src,
                  const Layout& src_layout, Stream stream = {});
  void copy_async(void* dst, const Layout& dst_layout, DevicePtr src, const Layout& src_layout,
                  Stream stream = {});
  void copy_async(DevicePtr dst, const Layout& dst_layout, DevicePtr src, const Layout& src_layout,
                  Stream stream = {});
  // Contiguous byte copies.
  void copy(DevicePtr dst, const void* src, uint64_t bytes, Stream stream = {});
  void copy(void* dst, DevicePtr src, uint64_t bytes, Stream stream = {});
  void copy(DevicePtr dst, DevicePtr src, uint64_t bytes, Stream stream = {});
  void copy_async(DevicePtr dst, const void* src, uint64_t bytes, Stream stream = {});
  void copy_async(void* dst, DevicePtr src, uint64_t bytes, Stream stream = {});
  void copy_async(DevicePtr dst, DevicePtr src, uint64_t bytes, Stream stream = {});

  // --- fill -------------------------------------------------------------------------------
  // Writes `pattern` (its low layout.elem_size bytes; higher bytes must be zero) to every
  // element of the strided region.
  void fill(DevicePtr dst, const Layout& layout, uint64_t pattern, Stream stream = {});
  void fill_async(DevicePtr dst, const Layout& layout, uint64_t pattern, Stream stream = {});
  // Sets `bytes` bytes to `value`.
  void memset(DevicePtr dst, uint8_t value, uint64_t bytes, Stream stream = {});
  void memset_async(DevicePtr dst, uint8_t value, uint64_t bytes, Stream stream = {});

  // --- streams ----------------------------------------------------------------------------
  Stream default_stream() const { return Stream{}; }
  Stream create_stream();
  // Waits for the stream's queued work, then destroys it (an unreported device error is
  // logged, not thrown). The default stream cannot be destroyed.
  void destroy_stream(Stream stream);
  // True when all work queued on the stream has finished; throws a pending device error.
  bool query(Stream stream);
  // Waits for all work queued on the stream; throws a pending device error.
  void synchronize(Stream stream);
  // Work queued on `stream` after this call waits until `event`'s latest record() has
  // completed (on the device: no host thread waits). No-op for a never-recorded event.
  void wait_event(Stream stream, Event event);
  // Hardware queue the stream runs on.
  uint32_t hardware_queue(Stream stream) const;

  // --- events -----------------------------------------------------------------------------
  Event create_event();
  // Waits for the event's pending record() to complete, then destroys it.
  void destroy_event(Event event);
  // Marks the point after all work queued on `stream` so far. Re-recording moves the marker;
  // if the previous record is still pending on another hardware queue, record() first waits
  // for it (an event's fence values only grow). If the stream faults before reaching the
  // marker, the event still completes (so that streams waiting on it are not stuck), and
  // synchronize(event) reports the fault.
  void record(Event event, Stream stream = {});
  // True once the latest record has completed (or if never recorded).
  bool query(Event event);
  // Waits for the latest record; throws kDeviceFault if its stream faulted before it.
  void synchronize(Event event);
  // Simulated time between two completed records, end - start: picoseconds and
  // milliseconds. Waits for both. 0 with timing off. Throws kInvalidArgument if either
  // event was never recorded.
  int64_t elapsed_ps(Event start, Event end);
  double elapsed_ms(Event start, Event end);

  // Waits for every stream's work; throws the first pending device error (and clears it).
  void synchronize();

  // --- several devices ------------------------------------------------------------------
  // A process has device_count() devices (runtime.h); each is opened as its own Device
  // (DeviceOptions::index). Devices share only the host, as cards on one PCIe bus do.
  //
  // Peer copies: dst (on this device) <- src (on `src_device`), layouts as for copy(). The
  // source device copies into a host buffer both devices reach, then this device copies it
  // in: each half is timed on its own device's PCIe model, and no host thread waits. The copy
  // runs after the work queued so far on `src_stream` (the source device's) and on `stream`
  // (this device's); later work on `stream` runs after it. A failure of the source half is
  // reported by `stream` (and by `src_stream`). copy_peer_async returns once queued,
  // copy_peer once the data has arrived. With `src_device` this device, it is a
  // device-to-device copy on `stream` after `src_stream`'s work. Throws as copy() does, for
  // either side.
  void copy_peer_async(DevicePtr dst, const Layout& dst_layout, Device& src_device, DevicePtr src,
                       const Layout& src_layout, Stream stream = {}, Stream src_stream = {});
  void copy_peer(DevicePtr dst, const Layout& dst_layout, Device& src_device, DevicePtr src,
                 const Layout& src_layout, Stream stream = {}, Stream src_stream = {});
  void copy_peer(DevicePtr dst, Device& src_device, DevicePtr src, uint64_t bytes,
                 Stream stream = {}, Stream src_stream = {});
  // Work queued on `stream` after this waits until the latest record() of `event`, an event
  // of `event_device`, has completed; no host thread waits. If that record's stream faulted
  // before it, `stream` reports the fault. No-op for a never-recorded or completed event.
  void wait_event(Stream stream, Device& event_device, Event event);
  // Which of the process's devices this is (DeviceOptions::index).
  uint32_t index() const;

  // --- inter-chip links -----------------------------------------------------------------
  // A link transfer moves `bytes` (1 .. 1 TiB) of contiguous device memory over inter-chip
  // link `link` of this chip (0 .. the preset's link_count - 1) to or from the chip `peer`
  // (a rank: it names the other end in the trace). The emulator carries the bytes between
  // processes through `staging`, pinned host memory (host_alloc, or host_register on a backend
  // that maps it): the caller's transport (the c10d backend uses gloo) takes them from the
  // sender's staging buffer to the receiver's. The device times each transfer on its link,
  // not on PCIe: latency + bytes / bandwidth (preset link_latency_ns, link_bandwidth_GBps),
  // each direction of a link one timeline, so transfers on it run one after the other
  // (docs/architecture.md, "Inter-chip links"). Throws kInvalidArgument (size, link index,
  // staging not pinned, in a graph capture) or kInvalidPointer (device span outside a live
  // allocation) before anything is queued; a link the chip lacks fails on the device
  // (kDeviceFault, "bad link"). The device span must not change until the transfer is done.
  //
  // Sends: device memory at `src` -> `staging`, after the work queued on `stream`. Returns
  // once the bytes are in `staging`, with the simulated time (ps) the send started, which
  // the receiver passes as `sent_ps`.
  uint64_t link_send(void* staging, DevicePtr src, uint64_t bytes, uint32_t link, uint32_t peer,
                     Stream stream = {});
  // Receives: `staging` (the bytes the peer sent, as its staging buffer held them) -> device
  // memory at `dst`, queued on `stream`; returns once queued. The bytes cross the link from
  // `sent_ps` (the peer's link_send result; both chips' clocks are taken as one) or when the
  // receive direction is free, and the transfer completes no earlier than they have arrived
  // (sent_ps at most isa::kMaxLinkSentPs).
  // `staging` must stay unchanged until the stream has passed the transfer.
  void link_receive_async(DevicePtr dst, const void* staging, uint64_t bytes, uint32_t link,
                          uint32_t peer, uint64_t sent_ps, Stream stream = {});

  // --- kernels ----------------------------------------------------------------------------
  // Loads a kernel module (a static RISC-V ELF64 image, docs/pe-isa.md) from a file or from
  // bytes into device memory, and parses its kernel metadata. Throws kInvalidArgument for a
  // missing file or a malformed image or metadata (the message says what), kOutOfMemory if
  // device memory is full. The image stays loaded until the Device is closed.
  KernelModule load_module(const std::string& path);
  KernelModule load_module(const void* elf, size_t bytes);
  // Runs `kernel` on grid.rows x grid.cols PEs with `args` (one per parameter, in order),
  // queued on `stream`; returns once queued. Checked before anything is queued, throwing
  // kInvalidArgument: the grid against the chip, the argument count and kinds against the
  // kernel's signature, and the device limits properties().max_kernel_args and
  // max_kernel_buffers (the message names the limit and by how much it was exceeded).
  // Pointer arguments are not checked against allocations (a kernel may compute any address);
  // an access outside device memory faults the launch on the device. A kernel that faults,
  // exits with a non-zero status or trips the watchdog fails like any device command: the
  // stream's next synchronize()/query() throws kDeviceFault naming the kernel, PE and pc.
  // `watchdog_cycles` = 0 uses the device's default limit.
  void launch(const Kernel& kernel, Grid grid, const std::vector<Arg>& args, Stream stream = {},
              uint64_t watchdog_cycles = 0);

  // --- graphs ---------------------------------------------------------------------------
  // Capture. Between begin_capture(stream) and end_capture(stream), the device work queued on
  // `stream` - device-to-device copy_async, fill_async, memset_async and launch - is recorded,
  // not run (a launch's arguments are fixed at capture). Anything that would make the host
  // wait for the stream or touch host memory - synchronize() or query() of the stream or the
  // device, synchronous copies and fills, copies from or to host memory - throw
  // kInvalidArgument and end the capture, discarding it. begin_capture throws if the stream is
  // already capturing.
  // Several streams (CUDA's rules): record() on a capturing stream is captured; a stream that
  // waits for such an event joins the capture (fork) and its work is captured into the same
  // graph; records and waits between the capture's streams become the graph's dependencies. A
  // capturing stream's wait for an event recorded outside the capture, or in another capture,
  // throws kInvalidArgument and ends its capture. query(), synchronize() and elapsed time of an
  // event whose latest record was captured, and waits for it from outside the capture, throw
  // kInvalidArgument (the record runs only at replay).
  void begin_capture(Stream stream);
  // Ends the capture begun on `stream` and returns its graph. Throws kInvalidArgument if the
  // stream is not capturing (never started, or ended by an error), if it joined a capture
  // rather than began it (nothing ends), or if a stream that joined has work `stream` does not
  // wait for ("unjoined work": the capture is discarded).
  Graph end_capture(Stream stream);
  // True while `stream` captures: it began a capture or joined one.
  bool is_capturing(Stream stream) const;
  // Writes the graph's packets into a command buffer in device memory. Once per graph.
  void instantiate(Graph graph);
  // Queues the instantiated graph on `stream` as one packet (the firmware runs the command
  // buffer: docs/architecture.md, EXEC_BUFFER), or one packet per captured stream, each on its
  // own hardware queue, ordered by the graph's fences; work queued on `stream` later waits for
  // the whole graph. Replays of one graph run one after the other. Returns once queued. Throws
  // kInvalidPointer, before queuing anything, if an allocation the graph uses was freed since the
  // capture. A failure inside the graph is the stream's, reported like any device fault.
  void replay(Graph graph, Stream stream = {});
  // Waits for the graph's queued replays, then frees its command buffer and argument blocks.
  void destroy_graph(Graph graph);
  // The malloc() allocations the graph's work touches (their start addresses), as captured.
  std::vector<DevicePtr> graph_allocations(Graph graph) const;

  // --- diagnostics ----------------------------------------------------------------------
  // Simulated time now, picoseconds.
  uint64_t now_ps();
  // Writes the device's trace (trace.json, Chrome trace JSON), statistics (stats.json),
  // effective configuration (config.json) and the run summary computed from the recorded
  // events (summary.json, mtia/trace.h) into `dir` (created if missing).
  void write_artifacts(const std::string& dir);
  // What the trace records from now on (mtia/trace.h); the level the device opened with.
  void set_trace_level(TraceLevel level);
  TraceLevel trace_level() const;
  // The effective device configuration as JSON text.
  std::string config_json();

  struct Impl;  // opaque: defined in host_api/src

 private:
  friend struct detail::DeviceAccess;
  explicit Device(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mtia
