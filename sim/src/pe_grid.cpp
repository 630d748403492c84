#include "pe_grid.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "log.h"
#include "model.h"
#include "mtia/isa/address_map.h"
#include "mtia/isa/wait.h"
#include "mtia/sim/pe/descriptors.h"
#include "mtia/sim/pe/elf.h"
#include "mtia/sim/pe/unit_workers.h"

namespace mtia::sim::detail {
namespace {

namespace pe = mtia::sim::pe;
using pe::UnitOp;
using pe::UnitResponse;

constexpr size_t kThreadStackBytes = 1 << 20;  // as the other SC_THREADs (model.cpp)
constexpr uint64_t kPsPerSecond = 1'000'000'000'000ull;

template <typename T>
T read_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

pe::UnitTiming unit_timing(const ChipConfig& c) {
  pe::UnitTiming t;
  t.dpe_int8_macs_per_cycle = c.dpe_int8_macs_per_cycle;
  t.dpe_fp16_macs_per_cycle = c.dpe_fp16_macs_per_cycle;
  t.dpe_fp32_macs_per_cycle = c.dpe_fp32_macs_per_cycle;
  t.dpe_issue_cycles = c.dpe_issue_cycles;
  t.se_vector_bytes = c.se_vector_bytes;
  t.se_simple_cycles = c.se_simple_cycles;
  t.se_divide_cycles = c.se_divide_cycles;
  t.se_transcendental_cycles = c.se_transcendental_cycles;
  t.se_issue_cycles = c.se_issue_cycles;
  t.re_elements_per_cycle = c.re_elements_per_cycle;
  t.re_issue_cycles = c.re_issue_cycles;
  t.mlu_bytes_per_cycle = c.mlu_bytes_per_cycle;
  t.mlu_issue_cycles = c.mlu_issue_cycles;
  return t;
}

}  // namespace

// ---- one PE ---------------------------------------------------------------------------------

class PeGrid::Pe : public pe::UnitPort {
  using Extent = pe::FunctionalUnits::Extent;
  using Touched = pe::FunctionalUnits::Touched;

 public:
  Pe(PeGrid& grid, uint32_t chip_index, std::span<uint8_t> local_store,
     const pe::UnitTiming& timing)
      : grid_(grid),
        chip_index_(chip_index),
        ls_device_base_(isa::kLocalStoreBase + uint64_t{chip_index} * isa::kLocalStoreStride),
        units_(local_store, timing),
        core_(pe::CoreConfig{}, local_store, *this) {
    // Unit math and DMA copies go to the grid's helper threads, in order per PE.
    units_.set_deferral([this](const Touched& touched, uint64_t host_ns, pe::UnitTask&& math) {
      run_or_defer(touched, host_ns, std::move(math), /*device=*/false);
    });
    if (grid_.params_.lazy_loads) {
      units_.set_operand_source(
          [this](uint64_t offset, uint64_t rows, uint64_t row_bytes, uint64_t ld_bytes) {
            return operand_view(offset, rows, row_bytes, ld_bytes);
          });
    }
  }

  // Runs an operation's math (or a DMA's copy loop) here and now when it is cheap and nothing
  // of this PE is queued; otherwise queues it behind the PE's queued work for the helper
  // threads. Queued work runs in issue order, so only what reads the local store outside the
  // queue (the core, descriptor reads, other PEs) has to settle it first. Loads that have
  // not been copied yet into the bytes it touches are copied first.
  void run_or_defer(const Touched& touched, uint64_t host_ns, pe::UnitTask&& work, bool device) {
    for (const Extent& e : touched) materialize(e);
    enqueue(touched, host_ns, std::move(work), device);
  }

  // `device`: the work reads or writes device memory (a DMA's copy), which other PEs may touch
  // after the next barrier.
  void enqueue(const Touched& touched, uint64_t host_ns, pe::UnitTask&& work, bool device) {
    const bool small = host_ns < grid_.params_.inline_work_ns;
    if (pending_.empty() && (small || grid_.workers_->threads() == 0)) {
      work();
      return;
    }
    const uint64_t number = grid_.workers_->post(chip_index_, std::move(work), /*wake=*/!small);
    pending_.push_back({number, touched, device});
    for (const Extent& e : touched) {
      if (e.lo >= e.hi) continue;
      guard_.lo = std::min(guard_.lo, e.lo);
      guard_.hi = std::max(guard_.hi, e.hi);
    }
    if (guard_.lo < guard_.hi) core_.guard(guard_.lo, guard_.hi);
  }

  // Finishes this PE's deferred unit work that uses any byte of `bytes` (local-store offsets),
  // and the work queued before it, copying loads into those bytes first: before anything
  // else touches them.
  void settle(Extent bytes) {
    materialize(bytes);
    uint64_t upto = 0;
    for (const PendingOp& op : pending_) {
      for (const Extent& e : op.touched) {
        if (bytes.lo < e.hi && bytes.hi > e.lo) upto = op.number;
      }
    }
    join_upto(upto);
  }
  // Finishes the queued work up to UnitWorkers' number `upto` (none for 0).
  void join_upto(uint64_t upto) {
    if (upto == 0) return;
    grid_.workers_->join(chip_index_, upto);
    std::erase_if(pending_, [&](const PendingOp& op) { return op.number <= upto; });
    if (pending_.empty()) queue_drained();
  }
  // Finishes all the queued work (before simulated time moves on, and at the launch's end);
  // loads not copied yet stay so.
  void join() {
    if (!pending_.empty()) {
      grid_.workers_->join(chip_index_, pending_.back().number);
      pending_.clear();
    }
    queue_drained();
  }
  // Finishes the queued work that reads or writes device memory (and the work queued before
  // it), at a barrier: the unit math on the local store may run on.
  void join_device() {
    uint64_t upto = 0;
    for (const PendingOp& op : pending_) {
      if (op.device) upto = op.number;
    }
    join_upto(upto);
  }
  // Copies every load and finishes all the work: the local store then holds what the program
  // wrote to it (for the core, other PEs, the end of the launch).
  void flush() {
    copy_loads();
    join();
  }
  // Queues the copies of every load not copied yet.
  void copy_loads() { materialize(Extent{0, ~0ull}); }

  void guarded_access(pe::RiscvCore&) override { flush(); }

  // Whether a load of this PE (copied or not) may still read device bytes [lo, hi): a write
  // there must wait for flush().
  bool reads_device(uint64_t lo, uint64_t hi) const {
    if (lo >= loads_src_.hi || hi <= loads_src_.lo) return false;
    for (const LazyLoad& l : loads_) {
      if (lo < l.src_hi && hi > l.src_lo) return true;
    }
    return false;
  }

  uint32_t chip_index() const { return chip_index_; }

  // Forgets the previous launch's tags; `t0_ps` is the launch's start (its cycle 0).
  void begin(uint64_t t0_ps) {
    t0_ps_ = t0_ps;
    tag_done_.clear();
    all_done_ = 0;
    std::fill(std::begin(unit_free_), std::end(unit_free_), 0);
    at_barrier = false;
    barrier_arrival = 0;
  }

  pe::RiscvCore& core() { return core_; }
  bool at_barrier = false;
  uint64_t barrier_arrival = 0;  // core cycle at which it reached the barrier

  UnitResponse issue(pe::RiscvCore& core, const pe::UnitRequest& r) override {
    switch (r.op) {
      case UnitOp::kBarrier:
        at_barrier = true;
        barrier_arrival = r.cycle;
        return UnitResponse::stall();
      case UnitOp::kWait: {
        if (r.rs1 == 0) return UnitResponse::done(0);  // tag 0 is always complete
        if (r.rs1 > tag_done_.size()) {
          return UnitResponse::fault(
              fmt::format("pe.wait on tag {}, which was never issued ({} operations issued so far)",
                          r.rs1, tag_done_.size()));
        }
        const uint64_t done = tag_done_[r.rs1 - 1];
        return UnitResponse::done(0, done > r.cycle ? done - r.cycle : 0);
      }
      case UnitOp::kWaitAll:
        return UnitResponse::done(0, all_done_ > r.cycle ? all_done_ - r.cycle : 0);
      case UnitOp::kPoll: {
        if (r.rs1 == 0) return UnitResponse::done(1);
        if (r.rs1 > tag_done_.size()) {
          return UnitResponse::fault(
              fmt::format("pe.poll on tag {}, which was never issued ({} operations issued so far)",
                          r.rs1, tag_done_.size()));
        }
        return UnitResponse::done(tag_done_[r.rs1 - 1] <= r.cycle ? 1 : 0);
      }
      case UnitOp::kDma:
        return dma(core, r);
      case UnitOp::kMatmul:
      case UnitOp::kEltwise:
      case UnitOp::kReduce:
      case UnitOp::kLayout: {
        // The math queues behind the PE's deferred work (run_or_defer); the descriptor is
        // read now, so the bytes it sits in must be settled.
        const uint64_t desc = r.rs1 - MTIA_PE_LS_BASE;
        settle({desc, desc + std::max({sizeof(mtia_pe_matmul_desc), sizeof(mtia_pe_se_desc),
                                       sizeof(mtia_pe_re_desc), sizeof(mtia_pe_mlu_desc)})});
        auto outcome = units_.execute(core, r);
        if (!outcome.ok()) return UnitResponse::fault(outcome.error().reason);
        const auto kind = pe::FunctionalUnits::unit_of(r.op);
        uint64_t& free = unit_free_[static_cast<size_t>(kind)];
        uint64_t done = 0;
        uint64_t start = 0;
        if (grid_.timing_) {
          start = std::max(r.cycle, free);
          done = start + outcome.value().busy_cycles;
          free = done;
        }
        ++grid_.stats_.unit_ops;
        if (grid_.tracing()) {
          grid_.trace_unit(chip_index_, kind, t0_ps_ + grid_.cycles_to_ps(start),
                           t0_ps_ + grid_.cycles_to_ps(done), outcome.value().work,
                           r.op == UnitOp::kMatmul ? matmul_dtype(core, r.rs1) : 0);
        }
        return UnitResponse::done(add_tag(done));
      }
      default:
        return UnitResponse::fault(
            fmt::format("unit instruction {} is not implemented", pe::unit_op_name(r.op)));
    }
  }

 private:
  uint64_t add_tag(uint64_t done_cycle) {
    tag_done_.push_back(done_cycle);
    all_done_ = std::max(all_done_, done_cycle);
    return tag_done_.size();
  }

  // A core address in this PE's local store, as a device address (its window in DeviceMemory).
  uint64_t device_address(uint8_t space, uint64_t addr) const {
    if (space == MTIA_PE_SPACE_LOCAL) return ls_device_base_ + (addr - MTIA_PE_LS_BASE);
    return addr;
  }

  // The bytes of this PE's local store that one side of a DMA touches (empty if none). A side
  // in another PE's local store (through its device window) first finishes that PE's queued
  // work: its queue is not ordered with this one.
  Extent dma_side(uint8_t space, uint64_t addr, const uint64_t* strides,
                  const mtia_pe_dma_desc& d) {
    __int128 lo = 0, hi = d.elem_size;
    for (int i = 0; i < d.ndims && i < MTIA_PE_DMA_MAX_DIMS; ++i) {
      if (d.sizes[i] == 0) return {};  // an empty copy touches nothing
      const __int128 ext = static_cast<__int128>(d.sizes[i] - 1) * static_cast<int64_t>(strides[i]);
      (ext < 0 ? lo : hi) += ext;
    }
    __int128 base = 0;
    if (space == MTIA_PE_SPACE_LOCAL) {
      base = static_cast<__int128>(addr) - MTIA_PE_LS_BASE;
    } else {
      if (addr < isa::kLocalStoreBase) return {};
      const uint64_t owner = (addr - isa::kLocalStoreBase) / isa::kLocalStoreStride;
      if (owner != chip_index_) {
        if (owner < grid_.pes_.size() && grid_.pes_[owner]) grid_.pes_[owner]->flush();
        return {};
      }
      base = static_cast<__int128>(addr) - static_cast<__int128>(ls_device_base_);
    }
    if (base + hi <= 0) return {};
    const __int128 l = std::max<__int128>(0, base + lo);
    return {static_cast<uint64_t>(l), static_cast<uint64_t>(base + hi)};
  }

  UnitResponse dma(pe::RiscvCore& core, const pe::UnitRequest& r) {
    const uint64_t at = r.rs1 - MTIA_PE_LS_BASE;
    settle({at, at + sizeof(mtia_pe_dma_desc)});
    auto desc = pe::read_descriptor<mtia_pe_dma_desc>(core, r.rs1);
    if (!desc.ok()) return UnitResponse::fault("dma.start rejected: " + desc.error().reason);
    const mtia_pe_dma_desc& d = desc.value();
    const Touched touched{dma_side(d.src_space, d.src, d.src_strides, d),
                          dma_side(d.dst_space, d.dst, d.dst_strides, d), Extent{}, Extent{}};
    // The same job as a host DMA packet, so it goes through the shared memory system: its
    // address checks, its bandwidth timelines (contention with the other PEs and the host
    // DMA engines) and its copy loops.
    isa::DmaCopyPacket p{};
    p.ndims = d.ndims;
    p.elem_size = d.elem_size;
    for (int i = 0; i < d.ndims; ++i) {
      p.sizes[i] = d.sizes[i];
      p.src.strides[i] = d.src_strides[i];
      p.dst.strides[i] = d.dst_strides[i];
    }
    p.src.addr = device_address(d.src_space, d.src);
    p.dst.addr = device_address(d.dst_space, d.dst);
    p.src.space = p.dst.space = static_cast<uint8_t>(isa::AddressSpace::kDevice);
    MemorySystem& memory = *grid_.shared_.memory;
    const uint64_t now = t0_ps_ + grid_.cycles_to_ps(r.cycle);
    const DmaPlan plan = memory.plan_copy(p, now);
    DmaResult result{plan.error, plan.error_arg0, plan.error_arg1};
    BoundDma bound;
    if (plan.error == isa::ErrorCode::kNone) result = memory.bind(plan, bound);
    if (result.error != isa::ErrorCode::kNone) {
      return UnitResponse::fault(fmt::format(
          "dma.start: {}: device range 0x{:x} + {} bytes is not inside one device memory "
          "(source {} 0x{:x}, destination {} 0x{:x})",
          isa::error_code_name(result.error), result.arg0, result.arg1,
          d.src_space == MTIA_PE_SPACE_LOCAL ? "local" : "device", d.src,
          d.dst_space == MTIA_PE_SPACE_LOCAL ? "local" : "device", d.dst));
    }
    if (d.dst_space != MTIA_PE_SPACE_LOCAL) grid_.before_device_access(plan.dst.span, true);
    if (!load_lazily(d, touched[1], plan, bound)) {
      run_or_defer(
          touched, plan.payload_bytes / 8, [bound] { bound.run(); }, /*device=*/true);
    }
    ++grid_.stats_.dma_ops;
    grid_.stats_.dma_bytes += plan.payload_bytes;
    uint64_t done = 0;
    if (grid_.timing_ && plan.end_ps > t0_ps_) done = grid_.ps_to_cycles(plan.end_ps - t0_ps_);
    if (grid_.tracing()) grid_.trace_dma(chip_index_, plan, now);
    return UnitResponse::done(add_tag(done));
  }

  // ---- Loads left in device memory ------------------------------------------------------------
  // A DMA of at least kLazyLoadBytes from DRAM or SRAM into this local store, in rows that are
  // contiguous on both sides, is a load: its copy waits until something needs the bytes in the
  // local store, and a DPE operand that lies inside it is read where the load reads from (the
  // copy of a GEMM's tile that is multiplied and then loaded over is never made). Everything
  // else that touches a load's bytes copies it first, in order with the PE's queued work; a
  // DMA that loads over the same bytes drops it; a write to the device bytes it reads (or that
  // its readers still queued read) first flushes this PE (PeGrid::before_device_access). A load
  // that is no longer live stays listed until the queue drains, for that last check.
  static constexpr uint64_t kLazyLoadBytes = 1024;
  struct LazyLoad {
    Extent ls;                                // local-store bytes it fills
    uint64_t src_lo = 0, src_hi = 0;          // device bytes it reads
    const uint8_t* src = nullptr;             // host address of src_lo
    uint64_t rows = 0, run = 0;               // rows of `run` bytes,
    uint64_t dst_stride = 0, src_stride = 0;  // these many bytes apart on each side
    BoundDma copy;
    bool live = true;  // not copied (or dropped) yet
  };

  bool load_lazily(const mtia_pe_dma_desc& d, Extent ls, const DmaPlan& plan,
                   const BoundDma& bound) {
    if (!grid_.params_.lazy_loads || d.dst_space != MTIA_PE_SPACE_LOCAL ||
        d.src_space == MTIA_PE_SPACE_LOCAL || bound.is_fill ||
        plan.payload_bytes < kLazyLoadBytes ||
        (plan.src.memory != MemoryKind::kDram && plan.src.memory != MemoryKind::kSram)) {
      return false;
    }
    const uint64_t es = d.elem_size;
    const int inner = d.ndims - 1;
    if (d.ndims > 2 || d.src_strides[inner] != es || d.dst_strides[inner] != es) return false;
    LazyLoad l;
    l.run = d.sizes[inner] * es;
    l.rows = d.ndims == 2 ? d.sizes[0] : 1;
    l.dst_stride = d.ndims == 2 ? d.dst_strides[0] : l.run;
    l.src_stride = d.ndims == 2 ? d.src_strides[0] : l.run;
    if (l.rows == 0 || l.run == 0 || l.dst_stride < l.run || l.src_stride < l.run) return false;
    const uint64_t span = (l.rows - 1) * l.dst_stride + l.run;
    if (ls.hi - ls.lo != span) return false;  // the local side is all in this store
    l.ls = ls;
    l.src_lo = plan.src.span.lo;
    l.src_hi = plan.src.span.lo + (l.rows - 1) * l.src_stride + l.run;
    l.src = bound.src;
    l.copy = bound;
    // Loads into these bytes before it: the same rows again are dropped, others copied.
    for (LazyLoad& o : loads_) {
      if (!o.live || o.ls.hi <= ls.lo || o.ls.lo >= ls.hi) continue;
      const bool covered = o.ls.lo == ls.lo && o.ls.hi == ls.hi && o.rows == l.rows &&
                           o.run == l.run && o.dst_stride == l.dst_stride;
      if (covered) {
        o.live = false;
      } else {
        materialize(o);
      }
    }
    if (pending_.empty()) queue_drained();  // forget the loads no longer live
    loads_.push_back(l);
    loads_src_.lo = std::min(loads_src_.lo, l.src_lo);
    loads_src_.hi = std::max(loads_src_.hi, l.src_hi);
    ++grid_.stats_.lazy_loads;
    guard_.lo = std::min(guard_.lo, ls.lo);
    guard_.hi = std::max(guard_.hi, ls.hi);
    core_.guard(guard_.lo, guard_.hi);
    return true;
  }

  // Copies load l now (in order with the queued work).
  void materialize(LazyLoad& l) {
    l.live = false;
    ++grid_.stats_.lazy_loads_copied;
    const BoundDma copy = l.copy;
    enqueue(
        Touched{l.ls, Extent{}, Extent{}, Extent{}}, (l.rows * l.run) / 8, [copy] { copy.run(); },
        /*device=*/true);
  }
  // Copies the loads that fill any byte of `bytes`.
  void materialize(Extent bytes) {
    if (bytes.lo >= bytes.hi) return;
    for (LazyLoad& l : loads_) {
      if (l.live && bytes.lo < l.ls.hi && bytes.hi > l.ls.lo) materialize(l);
    }
  }

  // Where a DPE operand lies when it is inside a live load: in the load's source.
  pe::FunctionalUnits::OperandView operand_view(uint64_t offset, uint64_t rows, uint64_t row_bytes,
                                                uint64_t ld_bytes) {
    if (rows == 0 || row_bytes == 0) return {};
    const uint64_t end = offset + (rows - 1) * ld_bytes + row_bytes;
    for (const LazyLoad& l : loads_) {
      if (!l.live || offset < l.ls.lo || end > l.ls.hi) continue;
      const uint64_t rel = offset - l.ls.lo;
      const uint8_t* p = nullptr;
      uint64_t ld = 0;
      if (l.rows == 1 || (l.dst_stride == l.run && l.src_stride == l.run)) {
        p = l.src + rel;  // one contiguous run on both sides: any layout inside it
        ld = ld_bytes;
      } else {
        const uint64_t row = rel / l.dst_stride, col = rel % l.dst_stride;
        if (col + row_bytes > l.run || (rows > 1 && ld_bytes != l.dst_stride)) return {};
        p = l.src + row * l.src_stride + col;
        ld = l.src_stride;
      }
      if (reinterpret_cast<uintptr_t>(p) % alignof(float) != 0 || ld % sizeof(float) != 0)
        return {};
      ++grid_.stats_.lazy_operand_reads;
      return {reinterpret_cast<const float*>(p), ld / sizeof(float)};
    }
    return {};
  }

  // The queue is empty: the loads no longer live are forgotten, and the core's guard shrinks to
  // the live ones.
  void queue_drained() {
    std::erase_if(loads_, [](const LazyLoad& l) { return !l.live; });
    guard_ = kNoGuard;
    loads_src_ = kNoGuard;
    for (const LazyLoad& l : loads_) {
      guard_.lo = std::min(guard_.lo, l.ls.lo);
      guard_.hi = std::max(guard_.hi, l.ls.hi);
      loads_src_.lo = std::min(loads_src_.lo, l.src_lo);
      loads_src_.hi = std::max(loads_src_.hi, l.src_hi);
    }
    if (guard_.lo < guard_.hi) {
      core_.guard(guard_.lo, guard_.hi);
    } else {
      core_.clear_guard();
    }
  }

  PeGrid& grid_;
  uint32_t chip_index_;
  uint64_t ls_device_base_;
  pe::FunctionalUnits units_;
  pe::RiscvCore core_;
  uint64_t t0_ps_ = 0;
  std::vector<uint64_t> tag_done_;  // completion cycle of tag i + 1
  uint64_t all_done_ = 0;
  uint64_t unit_free_[static_cast<size_t>(pe::UnitKind::kCount)] = {};
  // Deferred unit operations and DMA copies that may still be running, and the hull of their
  // local-store bytes, which the core guards.
  struct PendingOp {
    uint64_t number;  // UnitWorkers' number for it
    Touched touched;
    bool device;  // reads or writes device memory
  };
  static constexpr Extent kNoGuard{~0ull, 0};
  std::vector<PendingOp> pending_;
  Extent guard_ = kNoGuard;
  std::vector<LazyLoad> loads_;
  Extent loads_src_ = kNoGuard;  // the hull of the device bytes they read
};

// ---- the grid -------------------------------------------------------------------------------

PeGrid::PeGrid(sc_core::sc_module_name name, SimShared& shared, PeGridParams params)
    : sc_core::sc_module(name),
      shared_(shared),
      params_(params),
      timing_(shared.config.timing),
      unit_timing_(unit_timing(shared.config)) {
  pes_.resize(size_t{shared.config.pe_rows} * shared.config.pe_cols);
  workers_ =
      std::make_unique<pe::UnitWorkers>(params_.unit_threads, static_cast<uint32_t>(pes_.size()));
  shared_.memory->set_device_access_observer(
      [this](isa::ByteSpan span, bool write) { before_device_access(span, write); });
  SC_HAS_PROCESS(PeGrid);
  SC_THREAD(run);
  set_stack_size(kThreadStackBytes);
}

PeGrid::~PeGrid() {
  shared_.memory->set_device_access_observer({});
}

namespace {

// A whole number from the environment variable `name` in [0, max], or `fallback` when it is
// unset (or not such a number, with a warning).
uint64_t env_number(const char* name, uint64_t max, uint64_t fallback) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == 0) return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(env, &end, 10);
  if (end != nullptr && *end == 0 && *env != '-' && n <= max) return n;
  logger("sim.pe")->warn("{}={} is not a whole number in 0..{}; ignored", name, env, max);
  return fallback;
}

}  // namespace

unsigned PeGridParams::default_unit_threads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return static_cast<unsigned>(env_number("MTIA_EMU_UNIT_THREADS", 256, cores > 1 ? cores - 1 : 0));
}

uint64_t PeGridParams::default_inline_work_ns() {
  return env_number("MTIA_EMU_INLINE_WORK_NS", 1'000'000'000, 5'000);
}

bool PeGridParams::default_lazy_loads() {
  return env_number("MTIA_EMU_LAZY_LOADS", 1, 1) != 0;
}

void PeGrid::before_device_access(isa::ByteSpan span, bool write) {
  // Local stores seen through their device windows hold what the program wrote to them.
  if (span.hi > isa::kLocalStoreBase) {
    const uint64_t first =
        (std::max(span.lo, isa::kLocalStoreBase) - isa::kLocalStoreBase) / isa::kLocalStoreStride;
    const uint64_t last = (span.hi - 1 - isa::kLocalStoreBase) / isa::kLocalStoreStride;
    for (uint64_t i = first; i <= last && i < pes_.size(); ++i) {
      if (pes_[i]) pes_[i]->flush();
    }
  }
  if (!write) return;
  for (auto& p : pes_) {
    if (p && p->reads_device(span.lo, span.hi)) p->flush();
  }
}

void PeGrid::join_units() {
  workers_->join_all();  // the simulator thread helps while it waits
  for (auto& p : pes_) {
    if (p) p->join();
  }
}

uint64_t PeGrid::cycles_to_ps(uint64_t cycles) const {
  if (!timing_) return 0;
  const unsigned __int128 num = static_cast<unsigned __int128>(cycles) * kPsPerSecond;
  return static_cast<uint64_t>((num + shared_.config.clock_hz - 1) / shared_.config.clock_hz);
}

uint64_t PeGrid::ps_to_cycles(uint64_t ps) const {
  const unsigned __int128 num = static_cast<unsigned __int128>(ps) * shared_.config.clock_hz;
  return static_cast<uint64_t>((num + kPsPerSecond - 1) / kPsPerSecond);
}

bool PeGrid::tracing() const {
  return shared_.tracer->on();
}

uint8_t PeGrid::matmul_dtype(const pe::RiscvCore& core, uint64_t desc_addr) {
  auto d = pe::read_descriptor<mtia_pe_matmul_desc>(core, desc_addr);
  return d.ok() ? d.value().in_dtype : 0;
}

void PeGrid::trace_unit(uint32_t pe, pe::UnitKind kind, uint64_t start_ps, uint64_t end_ps,
                        uint64_t work, uint8_t matmul_dtype) {
  static_assert(static_cast<int>(Tracer::Unit::kDpe) == static_cast<int>(pe::UnitKind::kDpe) &&
                static_cast<int>(Tracer::Unit::kMlu) == static_cast<int>(pe::UnitKind::kMlu));
  Tracer::DpeClass dpe = Tracer::DpeClass::kFp32;
  if (matmul_dtype == MTIA_PE_DT_INT8) dpe = Tracer::DpeClass::kInt8;
  if (matmul_dtype == MTIA_PE_DT_FP16 || matmul_dtype == MTIA_PE_DT_BF16) {
    dpe = Tracer::DpeClass::k16Bit;
  }
  shared_.tracer->pe_unit(pe, static_cast<Tracer::Unit>(kind), start_ps, end_ps, work, dpe);
}

void PeGrid::trace_dma(uint32_t pe, const DmaPlan& plan, uint64_t issue_ps) {
  shared_.tracer->pe_unit(pe, Tracer::Unit::kDma, issue_ps, std::max(issue_ps, plan.end_ps),
                          plan.payload_bytes);
  shared_.tracer->reservations(plan, /*pe_dma=*/true);
}

void PeGrid::submit(const isa::LaunchPacket& launch) {
  assert(!job_);
  job_ = launch;
  start_.notify(sc_core::SC_ZERO_TIME);
}

void PeGrid::sync_to(uint64_t ps) {
  join_units();  // the rest of the device may look at any memory once time moves
  const uint64_t now = sc_core::sc_time_stamp().value();
  if (ps <= now) return;
  ++stats_.syncs;
  wait(sc_core::sc_time::from_value(ps - now));
  shared_.sync_time();
}

void PeGrid::run() {
  for (;;) {
    while (!job_) wait(start_);
    shared_.sync_time();
    const uint64_t begin = sc_core::sc_time_stamp().value();
    const isa::LaunchPacket launch = *job_;
    // The helper threads may work during the launch: the host's wait policy counts them.
    const int helpers = static_cast<int>(params_.unit_threads);
    isa::add_busy_threads(helpers);
    std::optional<Failure> failure;
    try {
      failure = execute(launch);
    } catch (...) {
      isa::add_busy_threads(-helpers);
      throw;
    }
    isa::add_busy_threads(-helpers);
    ++stats_.launches;
    stats_.busy_ps += sc_core::sc_time_stamp().value() - begin;
    firmware::LaunchStatus status;
    if (failure) {
      ++stats_.failed_launches;
      status = {failure->error, failure->arg0, failure->arg1, failure->message,
                failure->exit_status};
      // The completion record has room for two numbers; the message reaches the host through
      // the queue's error record (isa/error_record.h).
      logger("sim.pe")->warn("launch of image 0x{:x} failed: {}", launch.image_addr,
                             failure->message);
    }
    job_.reset();
    cp_->launch_done(status);
  }
}

std::optional<PeGrid::Failure> PeGrid::load_program(const isa::LaunchPacket& launch,
                                                    std::shared_ptr<const pe::Program>& out) {
  const DeviceMemory& mem = shared_.memory->device();
  const uint64_t addr = launch.image_addr;
  auto bad = [&](std::string why) {
    return Failure{isa::ErrorCode::kBadKernelImage, addr, 0,
                   fmt::format("kernel image at 0x{:x}: {}", addr, why)};
  };
  // The file's extent, from its headers: the program header table and every segment's bytes
  // (sections are not needed to run it).
  constexpr uint64_t kEhdr = 64, kPhdr = 56;
  const uint8_t* ehdr = mem.translate(addr, kEhdr);
  if (ehdr == nullptr) {
    return Failure{isa::ErrorCode::kDeviceAddressFault, addr, kEhdr,
                   fmt::format("kernel image header at 0x{:x} is not in device memory", addr)};
  }
  if (std::memcmp(ehdr,
                  "\x7f"
                  "ELF",
                  4) != 0 ||
      ehdr[4] != 2 || ehdr[5] != 1) {
    return bad("not a little-endian ELF64 file (bad magic or class)");
  }
  const uint64_t phoff = read_le<uint64_t>(ehdr + 32);
  const uint16_t phentsize = read_le<uint16_t>(ehdr + 54);
  const uint16_t phnum = read_le<uint16_t>(ehdr + 56);
  if (phentsize != kPhdr || phoff > params_.max_image_bytes ||
      phoff + uint64_t{phnum} * kPhdr > params_.max_image_bytes) {
    return bad(
        fmt::format("program header table (offset {}, {} entries of {} bytes) is not a "
                    "valid ELF64 table within {} bytes",
                    phoff, phnum, phentsize, params_.max_image_bytes));
  }
  uint64_t size = std::max(kEhdr, phoff + uint64_t{phnum} * kPhdr);
  const uint8_t* phdrs = mem.translate(addr + phoff, uint64_t{phnum} * kPhdr);
  if (phdrs == nullptr) return bad("program header table lies outside device memory");
  for (uint16_t i = 0; i < phnum; ++i) {
    const uint8_t* ph = phdrs + uint64_t{i} * kPhdr;
    const uint64_t off = read_le<uint64_t>(ph + 8);
    const uint64_t filesz = read_le<uint64_t>(ph + 32);
    if (off > params_.max_image_bytes || filesz > params_.max_image_bytes - off) {
      return bad(
          fmt::format("segment {} (offset {}, {} bytes) extends past the {}-byte image "
                      "limit",
                      i, off, filesz, params_.max_image_bytes));
    }
    size = std::max(size, off + filesz);
  }
  const uint8_t* bytes = mem.translate(addr, size);
  if (bytes == nullptr) {
    return Failure{
        isa::ErrorCode::kDeviceAddressFault, addr, size,
        fmt::format("kernel image 0x{:x} + {} bytes is not in device memory", addr, size)};
  }
  if (launch.entry_offset >= MTIA_PE_IMAGE_MAX_BYTES || launch.entry_offset % 4 != 0) {
    return bad(
        fmt::format("entry offset {} is not a 4-byte aligned offset inside the {}-byte "
                    "image window",
                    launch.entry_offset, MTIA_PE_IMAGE_MAX_BYTES));
  }
  const uint64_t entry = MTIA_PE_IMAGE_BASE + launch.entry_offset;

  // Decoding is the expensive part; relaunching the same bytes reuses it.
  const auto key = std::make_pair(addr, entry);
  if (auto it = cache_.find(key); it != cache_.end() && it->second.bytes.size() == size &&
                                  std::memcmp(it->second.bytes.data(), bytes, size) == 0) {
    ++stats_.program_cache_hits;
    out = it->second.program;
    return std::nullopt;
  }
  auto elf = pe::parse_elf(std::span<const uint8_t>(bytes, size));
  if (!elf.ok()) return bad(elf.error().reason);
  pe::ElfImage image = std::move(elf.value());
  image.entry = entry;  // the launched kernel's entry, which need not be the ELF's
  auto program = pe::Program::create(image);
  if (!program.ok()) return bad(program.error().reason);
  ++stats_.program_loads;
  if (cache_.size() >= params_.max_cached_programs) cache_.clear();
  cache_[key] = CachedProgram{std::vector<uint8_t>(bytes, bytes + size), entry, program.value()};
  out = program.value();
  return std::nullopt;
}

std::optional<PeGrid::Failure> PeGrid::execute(const isa::LaunchPacket& launch) {
  const uint64_t t0 = sc_core::sc_time_stamp().value();
  std::shared_ptr<const pe::Program> program;
  if (auto f = load_program(launch, program)) return f;

  if (launch.args_bytes > MTIA_PE_ARGS_MAX_BYTES) {
    return Failure{isa::ErrorCode::kBadDims, launch.args_bytes, MTIA_PE_ARGS_MAX_BYTES,
                   fmt::format("argument block of {} bytes exceeds the {}-byte window",
                               launch.args_bytes, MTIA_PE_ARGS_MAX_BYTES)};
  }
  std::vector<uint8_t> args(launch.args_bytes);
  if (!args.empty()) {
    const uint8_t* p = shared_.memory->device().translate(launch.args_addr, args.size());
    if (p == nullptr) {
      return Failure{isa::ErrorCode::kDeviceAddressFault, launch.args_addr, args.size(),
                     fmt::format("argument block 0x{:x} + {} bytes is not in device memory",
                                 launch.args_addr, args.size())};
    }
    std::memcpy(args.data(), p, args.size());
  }

  // Launch PE (row, col) runs on chip PE (row, col): its local store is that PE's window.
  const uint32_t rows = launch.grid_rows, cols = launch.grid_cols;
  const uint32_t n = rows * cols;
  const uint64_t watchdog =
      launch.watchdog_cycles != 0 ? launch.watchdog_cycles : params_.default_watchdog_cycles;
  std::vector<Pe*> pes;
  pes.reserve(n);
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t c = 0; c < cols; ++c) {
      const uint32_t chip = r * shared_.config.pe_cols + c;
      const uint32_t index = r * cols + c;
      std::unique_ptr<Pe>& slot = pes_.at(chip);
      if (!slot) {
        uint8_t* ls = shared_.memory->device().translate(
            isa::kLocalStoreBase + uint64_t{chip} * isa::kLocalStoreStride,
            shared_.config.local_store_bytes);
        assert(ls != nullptr && "DeviceMemory maps every PE's local store");
        slot = std::make_unique<Pe>(
            *this, chip, std::span<uint8_t>(ls, shared_.config.local_store_bytes), unit_timing_);
      }
      slot->begin(t0);
      pe::LaunchContext ctx;
      ctx.grid_rows = rows;
      ctx.grid_cols = cols;
      ctx.pe_row = r;
      ctx.pe_col = c;
      ctx.args = args;
      ctx.watchdog_cycles = watchdog;
      ctx.sram_base = isa::kSramBase;
      ctx.sram_bytes = shared_.config.sram_bytes;
      if (auto why = slot->core().start(program, ctx)) {
        return Failure{isa::ErrorCode::kBadKernelImage, launch.image_addr, index,
                       fmt::format("PE {} cannot start the kernel: {}", index, why->reason)};
      }
      pes.push_back(slot.get());
    }
  }

  auto finish = [&](std::optional<Failure> failure) {
    // The local stores hold every load when the launch ends. All copies are queued before
    // any is waited for, so the simulator thread helps with any PE's work meanwhile.
    for (Pe* p : pes) p->copy_loads();
    join_units();
    uint64_t end = 0;
    for (Pe* p : pes) {
      end = std::max(end, p->core().cycles());
      stats_.pe_cycles += p->core().cycles();
      stats_.instructions += p->core().instret();
    }
    for (uint32_t i = 0; i < n; ++i) {
      shared_.tracer->pe_kernel(pes[i]->chip_index(), t0,
                                t0 + cycles_to_ps(pes[i]->core().cycles()));
    }
    sync_to(t0 + cycles_to_ps(end));
    return failure;
  };
  auto kernel_failure = [&](uint32_t i) {
    pe::RiscvCore& core = pes[i]->core();
    const uint32_t r = i / cols, c = i % cols;
    if (core.state() == pe::RiscvCore::State::kExited) {
      return Failure{isa::ErrorCode::kKernelFault, core.pc(), i,
                     fmt::format("PE {} (row {}, col {}) exited with status {} at pc 0x{:x}", i, r,
                                 c, core.exit_status(), core.pc()),
                     core.exit_status()};
    }
    const pe::Fault& f = core.fault();
    const bool watchdog_hit = f.kind == pe::FaultKind::kWatchdog;
    return Failure{watchdog_hit ? isa::ErrorCode::kWatchdog : isa::ErrorCode::kKernelFault, f.pc, i,
                   fmt::format("PE {} (row {}, col {}): {}", i, r, c, f.reason)};
  };

  uint64_t horizon = params_.quantum_cycles;
  for (;;) {
    // Lockstep slices up to the horizon: requests to the shared memories stay nearly in time
    // order (a reservation timeline assumes requests arrive in order).
    for (uint64_t h = horizon - params_.quantum_cycles;;) {
      h = std::min(horizon, h + params_.slice_cycles);
      for (uint32_t i = 0; i < n; ++i) {
        pe::RiscvCore& core = pes[i]->core();
        if (core.state() != pe::RiscvCore::State::kReady) continue;
        const pe::RunResult res = core.run(~0ull, h);
        switch (res.reason) {
          case pe::StopReason::kExit:
            if (core.exit_status() != 0) return finish(kernel_failure(i));
            break;
          case pe::StopReason::kFault:
            return finish(kernel_failure(i));
          case pe::StopReason::kUnitStall:  // a barrier; waits never stall
          case pe::StopReason::kBudget:
            break;
        }
      }
      if (h == horizon) break;
    }
    // Release the barrier once every PE still running has reached it.
    uint32_t running = 0, waiting = 0;
    uint64_t release = 0;
    for (Pe* p : pes) {
      if (p->core().state() == pe::RiscvCore::State::kExited) continue;
      ++running;
      if (p->at_barrier) {
        ++waiting;
        release = std::max(release, p->barrier_arrival);
      }
    }
    if (running == 0) break;
    if (waiting == running) {
      ++stats_.barriers;
      // What a PE wrote to device memory before the barrier is there for the others after it,
      // and what it reads there is read before they write. Its local store is its own: others
      // reach it through its device window, which finishes its work first (dma_side).
      for (Pe* p : pes) p->join_device();
      for (Pe* p : pes) {
        if (!p->at_barrier) continue;
        p->at_barrier = false;
        p->core().resume(0, release - p->barrier_arrival);
      }
      continue;  // the released cores may still be below the horizon
    }
    // Every core has reached the horizon or waits at the barrier: let simulated time catch up
    // (the host DMA engines and the command processor run meanwhile).
    sync_to(t0 + cycles_to_ps(horizon));
    horizon += params_.quantum_cycles;
  }
  return finish(std::nullopt);
}

Json PeGrid::stats_json() const {
  Json m = Json::object();
  add_stat(m, "launches", stats_.launches, "launches", "kernel launches run (failed included)");
  add_stat(m, "failed_launches", stats_.failed_launches, "launches",
           "launches that ended in a fault, a bad image or a non-zero exit status (logged)");
  add_stat(m, "busy_ps", stats_.busy_ps, "ps", "simulated time the grid spent running launches");
  add_stat(m, "pe_cycles", stats_.pe_cycles, "cycles", "sum over PEs of their core cycles");
  add_stat(m, "instructions", stats_.instructions, "instructions",
           "RISC-V instructions retired, all PEs");
  add_stat(m, "unit_ops", stats_.unit_ops, "operations", "DPE, SE, RE and MLU operations");
  add_stat(m, "dma_ops", stats_.dma_ops, "operations", "local DMA operations");
  add_stat(m, "dma_bytes", stats_.dma_bytes, "bytes", "payload bytes moved by local DMA");
  add_stat(m, "lazy_loads", stats_.lazy_loads, "operations",
           "local DMA loads from DRAM or SRAM left there until their bytes were needed");
  add_stat(m, "lazy_loads_copied", stats_.lazy_loads_copied, "operations",
           "lazy loads copied into the local store after all (the others were only read by "
           "the DPE, or loaded over)");
  add_stat(m, "lazy_operand_reads", stats_.lazy_operand_reads, "operands",
           "fp32 DPE operands read where a lazy load reads from");
  add_stat(m, "barrier_releases", stats_.barriers, "barriers", "PE barriers released");
  add_stat(m, "systemc_syncs", stats_.syncs, "waits",
           "SystemC waits the grid scheduler took (one per quantum, not per PE)");
  add_stat(m, "program_loads", stats_.program_loads, "images", "kernel images parsed and decoded");
  add_stat(m, "program_cache_hits", stats_.program_cache_hits, "launches",
           "launches that reused a decoded image");
  return m;
}

}  // namespace mtia::sim::detail
