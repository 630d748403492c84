// The driver's side of the queue protocol (isa/packets.h, isa/registers.h).
//
// Device memory layout the driver sets up at open(), inside the DRAM window the device gives it
// (registers kDramWindowBase and kDramWindowBytes: all of DRAM, or a client's share):
//   [window base, + nq * kRingSlots * kPacketSlotBytes)    packet rings, one per queue
//   [..., + nq * kRingSlots * kCompletionRecordBytes)      completion rings, one per queue
//   [..., + nq * kErrorRecordBytes)                         error records, one per queue
//   rounded up to 1 MiB: the end of the driver's region; the Allocator owns the rest of the
//   window.
//
// Threads: host threads submit and wait; completions arrive on the backend's thread through
// the interrupt handler. Each queue has one mutex guarding its ring indices and bookkeeping.
// The interrupt handler never reads registers (a read waits for the simulator thread, which is
// the thread the handler runs on); it only reads memory and posts register writes.
#include "mtia/driver/userspace_driver.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <vector>

#include "mtia/host/wait.h"
#include "mtia/isa/address_map.h"
#include "mtia/isa/error_record.h"
#include "mtia/isa/registers.h"
#include "mtia/isa/sanitize.h"
#include "mtia/log/logger.h"

namespace mtia::driver {
namespace {

constexpr uint64_t kRingSlots = 1024;                // packets per queue ring, a power of two
constexpr uint64_t kDriverRegionAlign = 1ull << 20;  // the driver's region ends on a MiB
constexpr uint64_t kHeapAlignment = 256;             // default alignment of user allocations
constexpr size_t kKeepCompletions = 4096;            // completions kept per queue for wait()
constexpr size_t kKeepFailures = 4096;               // failures kept per queue for wait()
constexpr uint64_t kRecordBatch = 16;                // completion records read at once

std::shared_ptr<spdlog::logger> logger() {
  static const std::shared_ptr<spdlog::logger> log = mtia::log::get("driver");
  return log;
}

constexpr uint64_t align_up(uint64_t v, uint64_t a) {
  return (v + a - 1) & ~(a - 1);
}

// What the driver remembers about a packet in a ring slot until its completion arrives.
struct Pending {
  uint64_t seq = 0;
  isa::Opcode opcode = isa::Opcode::kIllegal;
  CompletionCallback on_complete;
};

struct Queue {
  uint32_t id = 0;
  uint64_t ring_addr = 0;          // device address of the packet ring
  uint64_t completion_addr = 0;    // device address of the completion ring
  uint64_t error_record_addr = 0;  // device address of the queue's error record

  std::mutex mu;
  std::condition_variable space_cv;  // a ring slot was freed (or the queue was reset)
  std::condition_variable done_cv;   // done_through reached a seq a thread waits for
  // The seqs threads wait for: a completion wakes them only when it reaches one (waking a
  // thread for every packet before its own costs a context switch each).
  std::multiset<uint64_t> waiting;
  uint64_t last_seq = 0;  // most recent seq handed out
  // Ring indices since the last queue reset, as the device counts them (it restarts at 0).
  uint64_t tail = 0;       // packets written and doorbelled
  uint64_t completed = 0;  // completion records consumed (or packets aborted)
  std::vector<Pending> slots = std::vector<Pending>(kRingSlots);
  // Packets complete in order on a queue, so "done" is a prefix of the seqs: every seq up to
  // done_through has completed and its callback has run.
  uint64_t done_through = 0;
  // done_through published for waiters that poll without the lock (host/wait.h); stored under
  // the lock after done_through.
  std::atomic<uint64_t> done_published{0};
  std::map<uint64_t, Completion> recent;    // the last kKeepCompletions completions
  std::map<uint64_t, Completion> failures;  // the last kKeepFailures failed or aborted ones
  uint64_t resets = 0;
};

std::string describe_packet(isa::Opcode op, uint64_t seq, uint32_t queue) {
  return fmt::format("{} (seq {}, packet {} on queue {})", isa::opcode_name(op), seq, seq - 1,
                     queue);
}

std::string describe_error(isa::ErrorCode error, uint64_t arg0, uint64_t arg1) {
  const char* name = isa::error_code_name(error);
  switch (error) {
    case isa::ErrorCode::kDeviceAddressFault:
      return fmt::format("{}: 0x{:x} + {} bytes is outside device memory", name, arg0, arg1);
    case isa::ErrorCode::kHostAddressFault:
      return fmt::format("{}: 0x{:x} + {} bytes is not inside host memory registered with map_host",
                         name, arg0, arg1);
    case isa::ErrorCode::kUnsupported:
      return fmt::format("{}: this firmware does not implement the packet", name);
    case isa::ErrorCode::kKernelFault:
    case isa::ErrorCode::kWatchdog:
      return fmt::format("{} on PE {} at pc 0x{:x}", name, arg1, arg0);
    default:
      if (arg0 == 0 && arg1 == 0) return fmt::format("{}: the packet was rejected", name);
      return fmt::format("{} (detail 0x{:x}, 0x{:x})", name, arg0, arg1);
  }
}

// A device that does not answer as an MTIA device of this release should.
isa::Failure unavailable(std::string why) {
  return isa::reject(isa::ErrorCode::kDeviceUnavailable, std::move(why));
}

isa::Failure bad_argument(std::string why) {
  return isa::reject(isa::ErrorCode::kInvalidArgument, std::move(why));
}

class DeviceImpl final : public Device {
 public:
  DeviceImpl(std::unique_ptr<Backend> backend, host::WaitPolicy wait, uint64_t sanitize)
      : wait_(wait), sanitize_(sanitize), backend_(std::move(backend)) {
    be_ = backend_.get();
  }

  // Reads the device's identity, lays out and starts its queues. A device that fails this is
  // destroyed at once.
  isa::Status init() {
    MTIA_RETURN_IF_ERROR(read_info());
    MTIA_RETURN_IF_ERROR(layout_queues());
    MTIA_RETURN_IF_ERROR(start_sanitizer());
    be_->set_interrupt_handler([this](uint64_t mask) { on_interrupt(mask); });
    be_->set_lost_handler([this](const std::string& why) { on_lost(why); });
    for (auto& q : queues_) configure_queue(*q, /*reset_first=*/true);
    be_->write_register(isa::reg::kIntEnable, all_queues_mask_);
    // Register reads are answered in order after the posted writes above.
    for (auto& q : queues_) {
      MTIA_ASSIGN_OR_RETURN(const uint64_t state,
                            read_reg(isa::reg::queue_reg(q->id, isa::reg::kQueueState)));
      if (state != static_cast<uint64_t>(isa::QueueState::kRunning)) {
        return unavailable(
            fmt::format("device queue {} did not start after configuration (state {}); the "
                        "ring at 0x{:x} ({} slots) was rejected by the firmware",
                        q->id, state, q->ring_addr, kRingSlots));
      }
    }
    logger()->debug("opened {} (generation {}): {} queues, {} GiB DRAM, driver region {} MiB",
                    info_.preset_name, info_.generation, info_.num_queues, info_.dram_bytes >> 30,
                    (reserved_end_ - info_.dram_base) >> 20);
    return {};
  }

  ~DeviceImpl() override {
    // Stop interrupts first: the handler must not run while the backend is torn down. Then
    // collect what has completed meanwhile, and stop the device.
    be_->set_interrupt_handler({});
    be_->set_lost_handler({});
    for (auto& q : queues_) {
      if (!lost_reason().empty()) break;  // nothing more will arrive
      drain(*q);
    }
    backend_.reset();
    // Packets still in flight will never complete: abort them so their callbacks run and
    // release whatever they hold.
    for (auto& q : queues_) {
      std::vector<std::pair<Completion, CompletionCallback>> done;
      {
        std::lock_guard lock(q->mu);
        fail_pending(*q, Ending::kAborted,
                     " was aborted: the device was closed before it completed", done);
      }
      run_callbacks(done);
    }
  }

  const DeviceInfo& info() const override { return info_; }
  TraceChannel& trace() override { return be_->trace(); }
  Allocator& allocator() override { return *allocator_; }
  isa::Status read_memory(uint64_t addr, void* dst, uint64_t bytes) override {
    MTIA_RETURN_IF_ERROR(check_window("read_memory", addr, dst, bytes));
    if (bytes == 0) return {};
    return be_->read_memory(addr, dst, bytes);
  }
  isa::Status write_memory(uint64_t addr, const void* src, uint64_t bytes) override {
    MTIA_RETURN_IF_ERROR(check_window("write_memory", addr, src, bytes));
    if (bytes == 0) return {};
    return be_->write_memory(addr, src, bytes);
  }

  isa::Result<void*> alloc_host(uint64_t bytes) override { return be_->alloc_host(bytes); }
  isa::Status free_host(void* ptr) override { return be_->free_host(ptr); }

  isa::Result<uint64_t> map_host(void* ptr, uint64_t bytes) override {
    return be_->map_host(ptr, bytes);
  }
  isa::Status unmap_host(uint64_t bus_addr) override { return be_->unmap_host(bus_addr); }
  uint32_t num_queues() const override { return info_.num_queues; }

  isa::Result<uint64_t> submit(uint32_t queue, const isa::Packet& packet,
                               CompletionCallback on_complete) override {
    MTIA_ASSIGN_OR_RETURN(Queue * qp, get_queue(queue));
    Queue& q = *qp;
    isa::Packet p = packet;
    // The packet's type decides its layout, so it also decides the opcode.
    const auto opcode = static_cast<isa::Opcode>(p.index() + 1);
    static_assert(std::is_same_v<std::variant_alternative_t<0, isa::Packet>, isa::NopPacket>);
    static_assert(std::is_same_v<std::variant_alternative_t<5, isa::Packet>, isa::LaunchPacket> &&
                  static_cast<int>(isa::Opcode::kLaunch) == 6);

    std::unique_lock lock(q.mu);
    q.space_cv.wait(lock, [&] { return q.tail - q.completed < kRingSlots || lost_; });
    if (lost_) {
      return isa::reject(isa::ErrorCode::kDeviceLost,
                         fmt::format("the device was lost: {}", lost_reason()));
    }
    const uint64_t seq = q.last_seq + 1;
    std::visit(
        [&](auto& pk) {
          pk.header.opcode = static_cast<uint8_t>(opcode);
          pk.header.version = isa::kPacketVersion;
          pk.header.flags |= isa::kPacketInterrupt;
          pk.header.seq = seq;
        },
        p);
    uint8_t slot[isa::kPacketSlotBytes];
    isa::encode_packet(p, slot);
    const uint64_t index = q.tail;
    MTIA_RETURN_IF_ERROR(be_->write_memory(
        q.ring_addr + (index % kRingSlots) * isa::kPacketSlotBytes, slot, sizeof slot));
    // Commit before the doorbell: the completion may arrive as soon as it rings.
    q.slots[index % kRingSlots] = Pending{seq, opcode, std::move(on_complete)};
    q.last_seq = seq;
    q.tail = index + 1;
    if (wait_ == host::WaitPolicy::kAuto) host::note_cpu(host::WaitSide::kHost);
    be_->write_register(isa::reg::queue_reg(q.id, isa::reg::kQueueTail), q.tail);
    return seq;
  }

  isa::Result<Completion> wait(uint32_t queue, uint64_t seq) override {
    MTIA_ASSIGN_OR_RETURN(Queue * qp, get_queue(queue));
    Queue& q = *qp;
    std::unique_lock lock(q.mu);
    MTIA_RETURN_IF_ERROR(check_seq(q, seq));
    if (q.done_through < seq) {
      // Spin or yield first (the wait policy), so that a short wait costs no scheduler
      // wake-up on either side; then sleep until the completion wakes us.
      lock.unlock();
      const bool done = host::poll_before_block(wait_, host::WaitSide::kHost, [&] {
        return q.done_published.load(std::memory_order_acquire) >= seq;
      });
      lock.lock();
      if (!done && q.done_through < seq) {
        const auto me = q.waiting.insert(seq);
        q.done_cv.wait(lock, [&] { return q.done_through >= seq; });
        q.waiting.erase(me);
      }
    }
    if (auto it = q.recent.find(seq); it != q.recent.end()) return it->second;
    if (auto it = q.failures.find(seq); it != q.failures.end()) return it->second;
    // Older than both windows: it is done, and failures are kept longer, so it succeeded.
    Completion c;
    c.seq = seq;
    return c;
  }

  isa::Result<bool> is_done(uint32_t queue, uint64_t seq) override {
    MTIA_ASSIGN_OR_RETURN(Queue * q, get_queue(queue));
    std::lock_guard lock(q->mu);
    MTIA_RETURN_IF_ERROR(check_seq(*q, seq));
    return q->done_through >= seq;
  }

  isa::Result<uint64_t> last_submitted(uint32_t queue) override {
    MTIA_ASSIGN_OR_RETURN(Queue * q, get_queue(queue));
    std::lock_guard lock(q->mu);
    return q->last_seq;
  }

 private:
  isa::Result<uint64_t> read_reg(uint64_t offset) {
    isa::Result<uint64_t> v = be_->read_register(offset);
    if (!v) return unavailable(v.error().reason);
    return v;
  }

  isa::Status read_info() {
    MTIA_ASSIGN_OR_RETURN(const uint64_t id, read_reg(isa::reg::kDeviceId));
    if ((id & 0xFFFF'FFFF'0000'0000ull) != isa::kDeviceIdMagic) {
      return unavailable(fmt::format(
          "the device did not identify as an MTIA device: register DEVICE_ID reads 0x{:x}, "
          "expected 0x{:x} | generation",
          id, isa::kDeviceIdMagic));
    }
    MTIA_ASSIGN_OR_RETURN(const uint64_t isa_version, read_reg(isa::reg::kIsaVersion));
    if (isa_version != isa::kPacketVersion) {
      return unavailable(fmt::format(
          "the device's firmware speaks packet version {}, this driver speaks version {}; use "
          "a driver and firmware built from the same release",
          isa_version, isa::kPacketVersion));
    }
    info_.generation = static_cast<uint32_t>(id & 0xFFFF'FFFF);
    MTIA_ASSIGN_OR_RETURN(info_.firmware_version, read_reg(isa::reg::kFirmwareVer));
    MTIA_ASSIGN_OR_RETURN(const uint64_t nq, read_reg(isa::reg::kNumQueues));
    if (nq < 1 || nq > isa::kMaxQueues) {
      return unavailable(
          fmt::format("the device reports {} queues; expected 1..{}", nq, isa::kMaxQueues));
    }
    info_.num_queues = static_cast<uint32_t>(nq);
    MTIA_ASSIGN_OR_RETURN(info_.dram_base, read_reg(isa::reg::kDramWindowBase));
    MTIA_ASSIGN_OR_RETURN(info_.dram_bytes, read_reg(isa::reg::kDramWindowBytes));
    MTIA_ASSIGN_OR_RETURN(const uint64_t chip_dram, read_reg(isa::reg::kDramBytes));
    if (info_.dram_base < isa::kDramBase || info_.dram_bytes == 0 ||
        info_.dram_base - isa::kDramBase > chip_dram ||
        info_.dram_bytes > chip_dram - (info_.dram_base - isa::kDramBase)) {
      return unavailable(fmt::format(
          "the device's DRAM window [0x{:x}, +{} bytes) does not lie inside its {} bytes of DRAM",
          info_.dram_base, info_.dram_bytes, chip_dram));
    }
    MTIA_ASSIGN_OR_RETURN(info_.sram_bytes, read_reg(isa::reg::kSramBytes));
    MTIA_ASSIGN_OR_RETURN(info_.local_store_bytes, read_reg(isa::reg::kLocalStoreBytes));
    MTIA_ASSIGN_OR_RETURN(const uint64_t grid, read_reg(isa::reg::kPeGrid));
    info_.pe_rows = static_cast<uint32_t>((grid >> 8) & 0xFF);
    info_.pe_cols = static_cast<uint32_t>(grid & 0xFF);
    MTIA_ASSIGN_OR_RETURN(info_.clock_hz, read_reg(isa::reg::kClockHz));
    MTIA_ASSIGN_OR_RETURN(const uint64_t engines, read_reg(isa::reg::kNumDmaEngines));
    info_.dma_engines = static_cast<uint32_t>(engines);
    char name[17] = {};
    MTIA_ASSIGN_OR_RETURN(const uint64_t n0, read_reg(isa::reg::kPresetName0));
    MTIA_ASSIGN_OR_RETURN(const uint64_t n1, read_reg(isa::reg::kPresetName1));
    std::memcpy(name, &n0, 8);
    std::memcpy(name + 8, &n1, 8);
    info_.preset_name = name;
    return {};
  }

  // Switches on the sanitizer's checks, if any, and for memcheck and initcheck from now on tells
  // the device of every allocation and free (docs/sanitizer.md); the allocator is still empty.
  isa::Status start_sanitizer() {
    if (sanitize_ == 0) return {};
    be_->write_register(isa::reg::kSanitize, sanitize_);
    isa::Result<uint64_t> on = be_->read_register(isa::reg::kSanitize);
    if (!on || on.value() != sanitize_) {
      return isa::reject(
          isa::ErrorCode::kUnsupported,
          fmt::format(
              "the device cannot run the sanitizer's {} ({}); it runs on the in-process "
              "device and on a device server that serves one client",
              isa::sanitize_checks_name(sanitize_),
              on ? fmt::format("it reports checks 0x{:x}", on.value()) : on.error().reason));
    }
    if ((sanitize_ & isa::kSanitizeAllocationTable) == 0) return {};
    Backend* be = be_;
    allocator_->set_observer([be](uint64_t address, uint64_t bytes, bool live) {
      be->write_register(isa::reg::kMemcheckBase, address);
      be->write_register(isa::reg::kMemcheckBytes, bytes);
      be->write_register(
          isa::reg::kMemcheckOp,
          static_cast<uint64_t>(live ? isa::MemcheckOp::kLive : isa::MemcheckOp::kFreed));
    });
    return {};
  }

  isa::Status layout_queues() {
    const uint64_t nq = info_.num_queues;
    const uint64_t rings = nq * kRingSlots * isa::kPacketSlotBytes;
    const uint64_t records = nq * kRingSlots * isa::kCompletionRecordBytes;
    const uint64_t error_records = nq * isa::kErrorRecordBytes;
    const uint64_t base = info_.dram_base;
    reserved_end_ = align_up(base + rings + records + error_records, kDriverRegionAlign);
    if (reserved_end_ - base >= info_.dram_bytes) {
      return unavailable(fmt::format(
          "the device gives this driver {} bytes of DRAM, too little for its {} queue rings ({} "
          "bytes)",
          info_.dram_bytes, nq, reserved_end_ - base));
    }
    MTIA_ASSIGN_OR_RETURN(
        allocator_, Allocator::create(reserved_end_, info_.dram_bytes - (reserved_end_ - base),
                                      kHeapAlignment));
    all_queues_mask_ = nq == 64 ? ~0ull : (1ull << nq) - 1;

    const std::vector<uint8_t> zeros(kRingSlots * isa::kCompletionRecordBytes, 0);
    for (uint32_t i = 0; i < nq; ++i) {
      auto q = std::make_unique<Queue>();
      q->id = i;
      q->ring_addr = base + i * kRingSlots * isa::kPacketSlotBytes;
      q->completion_addr = base + rings + i * kRingSlots * isa::kCompletionRecordBytes;
      q->error_record_addr = base + rings + records + i * isa::kErrorRecordBytes;
      static_assert(isa::kCompletionRecordBytes % isa::kErrorRecordAlign == 0 &&
                    isa::kErrorRecordBytes % isa::kErrorRecordAlign == 0);
      // Stale records from an earlier user of the device must never match a new seq.
      MTIA_RETURN_IF_ERROR(be_->write_memory(q->completion_addr, zeros.data(), zeros.size()));
      MTIA_RETURN_IF_ERROR(
          be_->write_memory(q->error_record_addr, zeros.data(), isa::kErrorRecordBytes));
      queues_.push_back(std::move(q));
    }
    return {};
  }

  // Posted register writes only: this also runs from the interrupt handler.
  void configure_queue(Queue& q, bool reset_first) {
    auto reg = [&](uint64_t field) { return isa::reg::queue_reg(q.id, field); };
    if (reset_first) be_->write_register(reg(isa::reg::kQueueControl), isa::kQueueReset);
    be_->write_register(reg(isa::reg::kQueueBase), q.ring_addr);
    be_->write_register(reg(isa::reg::kQueueSize), kRingSlots);
    be_->write_register(reg(isa::reg::kQueueCompletion), q.completion_addr);
    be_->write_register(reg(isa::reg::kQueueErrorRecord), q.error_record_addr);
    be_->write_register(reg(isa::reg::kQueueControl), isa::kQueueEnable);
  }

  isa::Result<Queue*> get_queue(uint32_t queue) {
    if (queue >= queues_.size()) {
      return bad_argument(fmt::format("queue {} does not exist: the device has {} queues (0..{})",
                                      queue, queues_.size(), queues_.size() - 1));
    }
    return queues_[queue].get();
  }

  // Arguments of a memory-window access, and a device that still answers.
  isa::Status check_window(const char* call, uint64_t addr, const void* host, uint64_t bytes) {
    if (host == nullptr && bytes > 0) {
      return bad_argument(
          fmt::format("{}: the host buffer is null but {} bytes were asked for; pass a buffer "
                      "of at least that size",
                      call, bytes));
    }
    if (bytes > UINT64_MAX - addr) {
      return bad_argument(
          fmt::format("{}: device address 0x{:x} + {} bytes runs past the end of the address space",
                      call, addr, bytes));
    }
    if (lost_.load(std::memory_order_acquire)) {
      return isa::reject(isa::ErrorCode::kDeviceLost,
                         fmt::format("{}: the device was lost: {}", call, lost_reason()));
    }
    return {};
  }

  static isa::Status check_seq(const Queue& q, uint64_t seq) {
    if (seq == 0 || seq > q.last_seq) {
      return bad_argument(fmt::format(
          "seq {} was never submitted to queue {} (sequence numbers start at 1; the last one "
          "submitted is {})",
          seq, q.id, q.last_seq));
    }
    return {};
  }

  std::string lost_reason() const override {
    return lost_.load(std::memory_order_acquire) ? lost_why_ : std::string();
  }

  // The backend says the device is gone: every packet in flight fails (callbacks run, waits
  // return), and later submissions are refused. Runs on the backend's thread, once.
  void on_lost(const std::string& why) {
    if (lost_) return;  // backends report a loss once; a second report changes nothing
    lost_why_ = why.empty() ? "the device stopped answering" : why;
    // Published after the reason; before any queue lock, so a submit that does not see it
    // is failed below.
    lost_.store(true, std::memory_order_release);
    logger()->error("device lost: {}", lost_why_);
    const std::string suffix = " did not complete: the device was lost: " + lost_why_;
    for (auto& qp : queues_) {
      Queue& q = *qp;
      std::vector<std::pair<Completion, CompletionCallback>> done;
      {
        std::lock_guard lock(q.mu);
        fail_pending(q, Ending::kLost, suffix, done);
      }
      run_callbacks(done);
      std::lock_guard lock(q.mu);
      for (auto& [c, cb] : done) {
        q.failures[c.seq] = c;
        if (q.failures.size() > kKeepFailures) q.failures.erase(q.failures.begin());
      }
      q.done_through = q.last_seq;
      q.done_published.store(q.done_through, std::memory_order_release);
      q.space_cv.notify_all();
      q.done_cv.notify_all();
    }
  }

  // Runs on the backend's thread. Must not block for long and must not read registers.
  void on_interrupt(uint64_t mask) {
    // Acknowledge first: a record written after this point raises the interrupt again, so
    // nothing is lost between our drain and the acknowledgement.
    if (mask & all_queues_mask_) be_->write_register(isa::reg::kIntStatus, mask & all_queues_mask_);
    for (auto& q : queues_) {
      if (mask & (1ull << q->id)) drain(*q);
    }
  }

  // Consumes every completion record that has arrived on `q`; on a failure aborts the rest
  // of the queue's packets and resets the queue so later submissions run.
  void drain(Queue& q) {
    std::vector<std::pair<Completion, CompletionCallback>> done;
    {
      std::lock_guard lock(q.mu);
      bool more = true;
      while (more && q.completed < q.tail) {
        const uint64_t first = q.completed % kRingSlots;
        const uint64_t n = std::min({q.tail - q.completed, kRecordBatch, kRingSlots - first});
        std::array<uint8_t, kRecordBatch * isa::kCompletionRecordBytes> raw;
        if (isa::Status read =
                be_->read_memory(q.completion_addr + first * isa::kCompletionRecordBytes,
                                 raw.data(), n * isa::kCompletionRecordBytes);
            !read) {
          // The driver's own ring is device memory it laid out: only a broken backend fails.
          logger()->error("queue {}: cannot read its completion ring: {}", q.id,
                          read.error().reason);
          break;
        }
        for (uint64_t i = 0; i < n; ++i) {
          const uint8_t* rec = raw.data() + i * isa::kCompletionRecordBytes;
          Pending& p = q.slots[(first + i)];
          uint64_t rec_seq;
          std::memcpy(&rec_seq, rec, sizeof rec_seq);
          // A record from an earlier pass over the ring: this packet has not completed yet.
          if (rec_seq != p.seq) {
            more = false;
            break;
          }
          Completion c = to_completion(q, p, rec);
          ++q.completed;
          const bool failed = !c.ok;
          done.emplace_back(std::move(c), std::move(p.on_complete));
          if (failed) {
            abort_and_reset(q, p.seq, p.opcode, done);
            more = false;
            break;
          }
        }
      }
      if (!done.empty()) q.space_cv.notify_all();
    }
    if (done.empty()) return;  // spurious or coalesced interrupt: nothing new

    run_callbacks(done);
    bool wake = false;
    {
      std::lock_guard lock(q.mu);
      for (auto& [c, cb] : done) {
        if (!c.ok) {
          q.failures[c.seq] = c;
          if (q.failures.size() > kKeepFailures) q.failures.erase(q.failures.begin());
        }
        q.recent[c.seq] = std::move(c);
      }
      while (q.recent.size() > kKeepCompletions) q.recent.erase(q.recent.begin());
      q.done_through = std::max(q.done_through, done.back().first.seq);
      q.done_published.store(q.done_through, std::memory_order_release);
      wake = !q.waiting.empty() && *q.waiting.begin() <= q.done_through;
    }
    // After the unlock, so the woken thread does not run straight into the held lock.
    if (wake) q.done_cv.notify_all();
  }

  Completion to_completion(const Queue& q, const Pending& p, const uint8_t* rec) {
    Completion c;
    c.seq = p.seq;
    auto decoded = isa::decode_completion(rec, isa::kCompletionRecordBytes);
    if (!decoded) {
      // The firmware wrote something this driver cannot read: our bug, not the user's. Treat
      // it as a failure so the queue is reset to a known state.
      logger()->error("queue {}: malformed completion record for seq {}: {}", q.id, p.seq,
                      decoded.error().reason);
      c.ok = false;
      c.error = decoded.error().code;
      c.message = fmt::format("{} failed: the device wrote a malformed completion record ({})",
                              describe_packet(p.opcode, p.seq, q.id), decoded.error().reason);
      return c;
    }
    const isa::CompletionRecord& r = decoded.value();
    c.start_ps = r.start_ps;
    c.end_ps = r.end_ps;
    c.ok = r.status == static_cast<uint16_t>(isa::CompletionStatus::kOk);
    c.error = static_cast<isa::ErrorCode>(r.error);
    c.error_arg0 = r.error_arg0;
    c.error_arg1 = r.error_arg1;
    if (!c.ok) {
      read_error_record(q, r, c);
      const std::string what = c.reason.empty()
                                   ? describe_error(c.error, c.error_arg0, c.error_arg1)
                                   : fmt::format("{}: {}", isa::error_code_name(c.error), c.reason);
      c.message = fmt::format("{} failed: {}", describe_packet(p.opcode, p.seq, q.id), what);
      logger()->debug("{}", c.message);
    }
    return c;
  }

  // The firmware wrote the queue's error record before the failed completion `r`: takes its
  // reason and exit status into `c` when the record describes that very packet.
  void read_error_record(const Queue& q, const isa::CompletionRecord& r, Completion& c) {
    uint8_t raw[isa::kErrorRecordBytes];
    if (isa::Status read = be_->read_memory(q.error_record_addr, raw, sizeof raw); !read) {
      logger()->warn("queue {}: cannot read its error record: {}", q.id, read.error().reason);
      return;
    }
    uint32_t magic;
    std::memcpy(&magic, raw, sizeof magic);
    if (magic == 0) return;  // the firmware has written no record since the queue was set up
    auto decoded = isa::decode_error_record(raw, sizeof raw);
    if (!decoded) {
      logger()->warn(
          "queue {}: the error record for seq {} is malformed ({}); the failure is "
          "reported without the device's reason",
          q.id, r.seq, decoded.error().reason);
      return;
    }
    const isa::ErrorRecord& e = decoded.value();
    if (e.seq != r.seq || e.index != r.index || e.error != r.error) {
      // Firmware that writes no record for this failure: what is there is older.
      logger()->debug("queue {}: the error record describes seq {}, not seq {}; ignored", q.id,
                      e.seq, r.seq);
      return;
    }
    c.reason = std::string(isa::error_record_text(e));
    if (e.flags & isa::kErrorExitStatus) c.exit_status = e.exit_status;
  }

  enum class Ending { kAborted, kLost };
  // Called with q.mu held: completes every packet still pending on `q` as failed, aborted or
  // lost, with the message "<packet><suffix>", into `done` (callbacks to run unlocked).
  static void fail_pending(Queue& q, Ending ending, const std::string& suffix,
                           std::vector<std::pair<Completion, CompletionCallback>>& done) {
    while (q.completed < q.tail) {
      Pending& p = q.slots[q.completed % kRingSlots];
      Completion c;
      c.seq = p.seq;
      c.ok = false;
      c.aborted = ending == Ending::kAborted;
      c.lost = ending == Ending::kLost;
      c.message = describe_packet(p.opcode, p.seq, q.id) + suffix;
      done.emplace_back(std::move(c), std::move(p.on_complete));
      ++q.completed;
    }
  }

  // Called with q.mu held, after the failed packet's record was consumed. The queue has
  // halted; every later packet is aborted, then the queue is reset and re-armed with posted
  // writes, which the device applies before any later doorbell.
  void abort_and_reset(Queue& q, uint64_t failed_seq, isa::Opcode failed_opcode,
                       std::vector<std::pair<Completion, CompletionCallback>>& done) {
    const std::string cause = describe_packet(failed_opcode, failed_seq, q.id);
    fail_pending(q, Ending::kAborted,
                 " was aborted: the earlier " + cause + " failed and the queue was reset", done);
    configure_queue(q, /*reset_first=*/true);
    q.tail = 0;
    q.completed = 0;
    ++q.resets;
    logger()->debug("queue {} reset after {} failed", q.id, cause);
  }

  static void run_callbacks(std::vector<std::pair<Completion, CompletionCallback>>& done) {
    for (auto& [c, cb] : done) {
      if (!cb) continue;
      try {
        cb(c);
      } catch (const std::exception& e) {
        logger()->error("a completion callback for seq {} threw (callbacks must not): {}", c.seq,
                        e.what());
      } catch (...) {
        logger()->error("a completion callback for seq {} threw (callbacks must not)", c.seq);
      }
      cb = nullptr;  // release what it captured before waiters wake
    }
  }

  const host::WaitPolicy wait_;
  const uint64_t sanitize_;  // SanitizeCheck bits (BackendOptions::sanitize)
  Backend* be_ = nullptr;    // backend_.get(), also valid while backend_.reset() runs
  DeviceInfo info_;
  uint64_t reserved_end_ = 0;
  uint64_t all_queues_mask_ = 0;
  std::unique_ptr<Allocator> allocator_;
  std::vector<std::unique_ptr<Queue>> queues_;
  std::string lost_why_;           // why the device was lost; written once, before lost_
  std::atomic<bool> lost_{false};  // set once; lost_why_ may be read after seeing it set
  // Declared last so it is destroyed first: if init() fails, the device (and its
  // interrupt thread) stops before the queues the handler uses are destroyed.
  std::unique_ptr<Backend> backend_;
};

}  // namespace

isa::Result<std::unique_ptr<Device>> Device::open(const std::string& backend_name,
                                                  const BackendOptions& options) {
  MTIA_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, create_backend(backend_name, options));
  auto device = std::make_unique<DeviceImpl>(std::move(backend), options.wait, options.sanitize);
  MTIA_RETURN_IF_ERROR(device->init());
  return std::unique_ptr<Device>(std::move(device));
}

}  // namespace mtia::driver
