#include "processing_element.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cassert>
#include <utility>

#include "mtia/isa/address_map.h"
#include "mtia/sim/pe/descriptors.h"
#include "sim_shared.h"

namespace mtia::sim::detail {

using pe::UnitOp;
using pe::UnitResponse;

bool ProcessingElement::tracing() const {
  return env_.shared.tracer->on();
}

uint8_t ProcessingElement::matmul_dtype(const pe::RiscvCore& core, uint64_t desc_addr) {
  auto d = pe::read_descriptor<mtia_pe_matmul_desc>(core, desc_addr);
  return d.ok() ? d.value().in_dtype : 0;
}

void ProcessingElement::trace_unit(pe::UnitKind kind, uint64_t start_ps, uint64_t end_ps,
                                   uint64_t work, uint8_t matmul_dtype) {
  static_assert(static_cast<int>(Tracer::Unit::kDpe) == static_cast<int>(pe::UnitKind::kDpe) &&
                static_cast<int>(Tracer::Unit::kMlu) == static_cast<int>(pe::UnitKind::kMlu));
  Tracer::DpeClass dpe = Tracer::DpeClass::kFp32;
  if (matmul_dtype == MTIA_PE_DT_INT8) dpe = Tracer::DpeClass::kInt8;
  if (matmul_dtype == MTIA_PE_DT_FP16 || matmul_dtype == MTIA_PE_DT_BF16) {
    dpe = Tracer::DpeClass::k16Bit;
  }
  env_.shared.tracer->pe_unit(chip_index_, static_cast<Tracer::Unit>(kind), start_ps, end_ps, work,
                              dpe);
}

void ProcessingElement::trace_dma(const DmaPlan& plan, uint64_t issue_ps) {
  env_.shared.tracer->pe_unit(chip_index_, Tracer::Unit::kDma, issue_ps,
                              std::max(issue_ps, plan.end_ps), plan.payload_bytes);
  env_.shared.tracer->reservations(plan, /*pe_dma=*/true);
}

ProcessingElement::ProcessingElement(PeEnvironment env, uint32_t chip_index,
                                     std::span<uint8_t> local_store, const pe::UnitTiming& timing)
    : env_(std::move(env)),
      chip_index_(chip_index),
      ls_device_base_(isa::kLocalStoreBase + uint64_t{chip_index} * isa::kLocalStoreStride),
      units_(local_store, timing),
      dma_(*env_.shared.memory, ls_device_base_),
      core_(pe::CoreConfig{}, local_store, *this),
      work_(env_.workers, chip_index, core_, env_.work, counters.lazy) {
  // Unit math and DMA copies go to the grid's helper threads, in order per PE.
  units_.set_deferral([this](const Touched& touched, uint64_t host_ns, pe::UnitTask&& math) {
    work_.run_or_defer(touched, host_ns, std::move(math), /*device=*/false);
  });
  if (env_.work.lazy_loads) {
    units_.set_operand_source(
        [this](uint64_t offset, uint64_t rows, uint64_t row_bytes, uint64_t ld_bytes) {
          return work_.operand_view(offset, rows, row_bytes, ld_bytes);
        });
  }
}

void ProcessingElement::begin(uint64_t t0_ps) {
  t0_ps_ = t0_ps;
  tag_done_.clear();
  all_done_ = 0;
  std::fill(std::begin(unit_free_), std::end(unit_free_), 0);
  at_barrier = false;
  barrier_arrival = 0;
  failed_at = kNotFailed;
  sanitizer_finding = {};
  race_log.clear();
  dram_written.clear();
  ls_initcheck_ = (env_.shared.sanitize & isa::kSanitizeInitcheck) != 0;
  synccheck_ = (env_.shared.sanitize & isa::kSanitizeSynccheck) != 0;
  in_flight_.clear();
  if (const bool guard = ls_initcheck_ || synccheck_; guard != ls_sanitize_) {
    ls_sanitize_ = guard;
    core_.guard_all(guard);
  }
}

UnitResponse ProcessingElement::issue(pe::RiscvCore& core, const pe::UnitRequest& r) {
  switch (r.op) {
    case UnitOp::kBarrier:
      at_barrier = true;
      barrier_arrival = r.cycle;
      barrier_pc = r.pc;
      return UnitResponse::stall();
    case UnitOp::kWait: {
      if (r.rs1 == 0) return UnitResponse::done(0);  // tag 0 is always complete
      if (r.rs1 > tag_done_.size()) {
        if (env_.shared.sanitize & isa::kSanitizeSynccheck) [[unlikely]] {
          sanitizer_finding = {isa::kSanitizeSynccheck, synccheck_tag(r), {}};
        }
        return UnitResponse::fault(
            fmt::format("pe.wait on tag {}, which was never issued ({} operations issued so far)",
                        r.rs1, tag_done_.size()));
      }
      if (synccheck_) [[unlikely]] {
        in_flight_.waited(r.rs1);
      }
      const uint64_t done = tag_done_[r.rs1 - 1];
      return UnitResponse::done(0, done > r.cycle ? done - r.cycle : 0);
    }
    case UnitOp::kWaitAll:
      if (synccheck_) [[unlikely]] {
        in_flight_.waited_all();
      }
      return UnitResponse::done(0, all_done_ > r.cycle ? all_done_ - r.cycle : 0);
    case UnitOp::kPoll: {
      if (r.rs1 == 0) return UnitResponse::done(1);
      if (r.rs1 > tag_done_.size()) {
        if (env_.shared.sanitize & isa::kSanitizeSynccheck) [[unlikely]] {
          sanitizer_finding = {isa::kSanitizeSynccheck, synccheck_tag(r), {}};
        }
        return UnitResponse::fault(
            fmt::format("pe.poll on tag {}, which was never issued ({} operations issued so far)",
                        r.rs1, tag_done_.size()));
      }
      const bool done = tag_done_[r.rs1 - 1] <= r.cycle;
      if (synccheck_ && done) [[unlikely]] {
        in_flight_.waited(r.rs1);
      }
      return UnitResponse::done(done ? 1 : 0);
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
      work_.settle({desc, desc + std::max({sizeof(mtia_pe_matmul_desc), sizeof(mtia_pe_se_desc),
                                           sizeof(mtia_pe_re_desc), sizeof(mtia_pe_mlu_desc)})});
      InFlight::Bytes rows;
      if (ls_sanitize_) [[unlikely]] {
        unit_rows(core, r, rows.reads, rows.writes);
        if (ls_initcheck_) {
          for (const Extent& e : rows.reads) {
            if (const isa::ByteSpan gap = ls_written_.first_gap(e.lo, e.hi); gap.size() != 0) {
              return sanitizer_fault(isa::kSanitizeInitcheck,
                                     ls_unwritten(pe::unit_op_name(r.op), r.pc, {gap.lo, gap.hi}));
            }
          }
        }
        if (synccheck_) {
          pe::LineTable::Frame earlier;
          std::string found = in_flight_.conflict(pe::unit_op_name(r.op), r.pc,
                                                  tag_done_.size() + 1, rows, earlier);
          if (!found.empty()) {
            return sanitizer_fault(isa::kSanitizeSynccheck, std::move(found), {earlier});
          }
        }
      }
      auto outcome = units_.execute(core, r);
      if (!outcome.ok()) return UnitResponse::fault(outcome.error().reason);
      if (ls_initcheck_) [[unlikely]] {
        for (const Extent& e : rows.writes) ls_written_.mark(e.lo, e.hi);
      }
      const auto kind = pe::FunctionalUnits::unit_of(r.op);
      uint64_t& free = unit_free_[static_cast<size_t>(kind)];
      uint64_t done = 0;
      uint64_t start = 0;
      if (env_.clock.timing) {
        start = std::max(r.cycle, free);
        done = start + outcome.value().busy_cycles;
        free = done;
      }
      ++counters.unit_ops;
      if (tracing()) {
        trace_unit(kind, t0_ps_ + env_.clock.cycles_to_ps(start),
                   t0_ps_ + env_.clock.cycles_to_ps(done), outcome.value().work,
                   r.op == UnitOp::kMatmul ? matmul_dtype(core, r.rs1) : 0);
      }
      const uint64_t tag = add_tag(done);
      if (synccheck_) [[unlikely]] {
        in_flight_.issued(pe::unit_op_name(r.op), r.pc, r.ra, tag, std::move(rows));
      }
      return UnitResponse::done(tag);
    }
    default:
      return UnitResponse::fault(
          fmt::format("unit instruction {} is not implemented", pe::unit_op_name(r.op)));
  }
}

uint64_t ProcessingElement::add_tag(uint64_t done_cycle) {
  tag_done_.push_back(done_cycle);
  all_done_ = std::max(all_done_, done_cycle);
  return tag_done_.size();
}

ProcessingElement::Extent ProcessingElement::dma_side(uint8_t space, uint64_t addr,
                                                      const uint64_t* strides,
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
      env_.settle_pe(owner);
      return {};
    }
    base = static_cast<__int128>(addr) - static_cast<__int128>(ls_device_base_);
  }
  if (base + hi <= 0) return {};
  const __int128 l = std::max<__int128>(0, base + lo);
  return {static_cast<uint64_t>(l), static_cast<uint64_t>(base + hi)};
}

UnitResponse ProcessingElement::dma(pe::RiscvCore& core, const pe::UnitRequest& r) {
  const uint64_t at = r.rs1 - MTIA_PE_LS_BASE;
  work_.settle({at, at + sizeof(mtia_pe_dma_desc)});
  auto desc = dma_.validate(core, r.rs1);
  if (!desc.ok()) return UnitResponse::fault(desc.error().reason);
  const mtia_pe_dma_desc& d = desc.value();
  const Touched touched{dma_side(d.src_space, d.src, d.src_strides, d),
                        dma_side(d.dst_space, d.dst, d.dst_strides, d), Extent{}, Extent{}};
  const uint64_t now = t0_ps_ + env_.clock.cycles_to_ps(r.cycle);
  auto job = dma_.check(d, now, env_.scope);
  if (!job.ok()) return UnitResponse::fault(job.error().reason);
  DmaPlan& plan = job.value().plan;
  if (env_.shared.sanitize != 0) [[unlikely]] {
    if (env_.shared.sanitize & isa::kSanitizeMemcheck) {
      if (std::string found = memcheck(r, plan); !found.empty()) {
        return sanitizer_fault(isa::kSanitizeMemcheck, std::move(found));
      }
    }
    if (env_.shared.sanitize & isa::kSanitizeInitcheck) {
      if (std::string found = initcheck(r, d, plan); !found.empty()) {
        return sanitizer_fault(isa::kSanitizeInitcheck, std::move(found));
      }
    }
    if (env_.shared.sanitize & isa::kSanitizeRacecheck) log_race_access(r, d, plan);
    if (synccheck_) {
      InFlight::Bytes rows = dma_rows(d);
      pe::LineTable::Frame earlier;
      std::string found =
          in_flight_.conflict("dma.start", r.pc, tag_done_.size() + 1, rows, earlier);
      if (!found.empty())
        return sanitizer_fault(isa::kSanitizeSynccheck, std::move(found), {earlier});
      in_flight_.issued("dma.start", r.pc, r.ra, tag_done_.size() + 1, std::move(rows));
    }
  }
  if (d.dst_space != MTIA_PE_SPACE_LOCAL) env_.before_device_write(plan.dst.span);
  dma_.execute(d, job.value(), touched, work_);
  ++counters.dma_ops;
  counters.dma_bytes += plan.payload_bytes;
  return UnitResponse::done(add_tag(take_turn(plan, now)));
}

std::string ProcessingElement::memcheck(const pe::UnitRequest& r, const DmaPlan& plan) const {
  // Only DRAM holds the driver's allocations; SRAM and the local stores are the launch's own.
  for (const bool write : {false, true}) {
    const SideInfo& side = write ? plan.dst : plan.src;
    if (side.host || side.memory != MemoryKind::kDram) continue;
    Memcheck::Miss miss;
    if (env_.shared.memcheck.inside(side.span.lo, side.span.hi, miss)) continue;
    return fmt::format("memcheck: dma.start at pc 0x{:x} {} {} bytes at 0x{:x}: the access {}",
                       r.pc, write ? "writes" : "reads", side.span.size(), side.span.lo, miss.what);
  }
  return {};
}

std::string ProcessingElement::initcheck(const pe::UnitRequest& r, const mtia_pe_dma_desc& d,
                                         const DmaPlan& plan) {
  // Only DRAM holds the driver's allocations; SRAM is the launch's scratch.
  auto in_dram = [](const SideInfo& side) {
    return !side.host && side.memory == MemoryKind::kDram;
  };
  // Bytes of a read row are unwritten when neither the device's record (as of the last barrier)
  // nor this PE's own writes since hold them, and a live allocation does.
  constexpr uint64_t kMaxRows = uint64_t{1} << 22;
  const ByteSet& written = env_.shared.initcheck.bytes();
  std::string found;
  // A store from the local store: its rows must have been written in this launch.
  if (d.src_space == MTIA_PE_SPACE_LOCAL) {
    for_each_dma_row(d.src - MTIA_PE_LS_BASE, d.src_strides, d, kMaxRows,
                     [&](uint64_t lo, uint64_t hi) {
                       const isa::ByteSpan gap = ls_written_.first_gap(lo, hi);
                       if (found.empty() && gap.size() != 0) {
                         found = ls_unwritten("dma.start", r.pc, {gap.lo, gap.hi});
                       }
                     });
    if (!found.empty()) return found;
  }
  if (d.src_space == MTIA_PE_SPACE_DEVICE && in_dram(plan.src) &&
      written.first_gap(plan.src.span.lo, plan.src.span.hi).size() != 0) {
    for_each_dma_row(d.src, d.src_strides, d, kMaxRows, [&](uint64_t lo, uint64_t hi) {
      for (uint64_t at = lo; at < hi && found.empty();) {
        const isa::ByteSpan gap = written.first_gap(at, hi);
        if (gap.size() == 0) return;
        const isa::ByteSpan unwritten = dram_written.first_gap(gap.lo, gap.hi);
        if (unwritten.size() == 0) {
          at = gap.hi;
          continue;
        }
        uint64_t base = 0, bytes = 0;
        if (!env_.shared.memcheck.first_allocation_in(unwritten.lo, unwritten.hi, base, bytes)) {
          at = unwritten.hi;  // memcheck's business
          continue;
        }
        const uint64_t ulo = std::max(unwritten.lo, base);
        const uint64_t uhi = std::min(unwritten.hi, base + bytes);
        found = fmt::format(
            "initcheck: dma.start at pc 0x{:x} reads {} bytes at 0x{:x}: the {} bytes at "
            "0x{:x}..0x{:x} (offset {} of the allocation at 0x{:x} ({} bytes)) were not written "
            "since the allocation was made",
            r.pc, plan.src.span.size(), plan.src.span.lo, uhi - ulo, ulo, uhi - 1, ulo - base, base,
            bytes);
      }
    });
    if (!found.empty()) return found;
  }
  if (d.dst_space == MTIA_PE_SPACE_LOCAL) {
    for_each_dma_row(d.dst - MTIA_PE_LS_BASE, d.dst_strides, d, RaceLog::kMaxRunsPerDma,
                     [&](uint64_t lo, uint64_t hi) { ls_written_.mark(lo, hi); });
  }
  if (d.dst_space == MTIA_PE_SPACE_DEVICE && in_dram(plan.dst)) {
    for_each_dma_row(d.dst, d.dst_strides, d, RaceLog::kMaxRunsPerDma,
                     [&](uint64_t lo, uint64_t hi) { dram_written.add(lo, hi); });
  }
  return found;
}

bool ProcessingElement::guarded_access(pe::RiscvCore&, uint64_t pc, uint64_t offset, uint64_t bytes,
                                       bool write) {
  // With initcheck or synccheck the core guards the whole local store: finish the work only
  // when the access touches its bytes, as without.
  if (!ls_sanitize_ || work_.guards(offset, offset + bytes)) work_.flush();
  if (!ls_sanitize_) return true;
  if (synccheck_ && !in_flight_.empty()) {
    pe::LineTable::Frame earlier;
    std::string found = in_flight_.core_access(pc, offset, offset + bytes, write, earlier);
    if (!found.empty()) {
      sanitizer_finding = {isa::kSanitizeSynccheck, std::move(found), {earlier}};
      return false;
    }
  }
  if (!ls_initcheck_) return true;
  if (write) {
    ls_written_.mark(offset, offset + bytes);
    return true;
  }
  const isa::ByteSpan gap = ls_written_.first_gap(offset, offset + bytes);
  if (gap.size() == 0) return true;
  sanitizer_finding = {isa::kSanitizeInitcheck,
                       ls_unwritten(bytes == 1   ? "a 1-byte load"
                                    : bytes == 2 ? "a 2-byte load"
                                    : bytes == 4 ? "a 4-byte load"
                                                 : "an 8-byte load",
                                    pc, {gap.lo, gap.hi}),
                       {}};
  return false;
}

InFlight::Bytes ProcessingElement::dma_rows(const mtia_pe_dma_desc& d) {
  InFlight::Bytes rows;
  if (d.src_space == MTIA_PE_SPACE_LOCAL) {
    for_each_dma_row(d.src - MTIA_PE_LS_BASE, d.src_strides, d, RaceLog::kMaxRunsPerDma,
                     [&](uint64_t lo, uint64_t hi) {
                       rows.reads.push_back({lo, hi});
                     });
  }
  if (d.dst_space == MTIA_PE_SPACE_LOCAL) {
    for_each_dma_row(d.dst - MTIA_PE_LS_BASE, d.dst_strides, d, RaceLog::kMaxRunsPerDma,
                     [&](uint64_t lo, uint64_t hi) {
                       rows.writes.push_back({lo, hi});
                     });
  }
  return rows;
}

void ProcessingElement::poison_local_store(const pe::Program& program) {
  ls_written_.reset(core_.local_store().size());
  for (const pe::Program::LocalSegment& s : program.local_segments()) {
    ls_written_.mark(s.offset, s.offset + s.bytes.size());
  }
}

void ProcessingElement::unit_rows(const pe::RiscvCore& core, const pe::UnitRequest& r,
                                  std::vector<Extent>& reads, std::vector<Extent>& writes) {
  const uint64_t ls_bytes = core.local_store().size();
  // rows x cols elements of `es` bytes, `ld` elements from one row's start to the next. A
  // tile larger than the local store is left to the unit's own checks, which reject it.
  auto tile = [&](std::vector<Extent>& out, uint64_t addr, uint64_t rows, uint64_t cols,
                  uint64_t ld, uint64_t es) {
    if (rows > ls_bytes || cols > ls_bytes || ld > ls_bytes) return;
    const uint64_t off = addr - MTIA_PE_LS_BASE;
    for (uint64_t i = 0; i < rows; ++i)
      out.push_back({off + i * ld * es, off + (i * ld + cols) * es});
  };
  switch (r.op) {
    case UnitOp::kMatmul: {
      auto d = pe::read_descriptor<mtia_pe_matmul_desc>(core, r.rs1);
      if (!d.ok()) return;
      const mtia_pe_matmul_desc& m = d.value();
      const bool ta = (m.hdr.flags & MTIA_PE_MM_TRANS_A) != 0;
      const bool tb = (m.hdr.flags & MTIA_PE_MM_TRANS_B) != 0;
      const unsigned ies = pe::dtype_bytes(m.in_dtype), oes = pe::dtype_bytes(m.out_dtype);
      tile(reads, m.a, ta ? m.k : m.m, ta ? m.m : m.k, m.lda, ies);
      tile(reads, m.b, tb ? m.n : m.k, tb ? m.k : m.n, m.ldb, ies);
      if (m.hdr.flags & MTIA_PE_MM_ACCUMULATE) tile(reads, m.c, m.m, m.n, m.ldc, oes);
      tile(writes, m.c, m.m, m.n, m.ldc, oes);
      return;
    }
    case UnitOp::kEltwise: {
      auto d = pe::read_descriptor<mtia_pe_se_desc>(core, r.rs1);
      if (!d.ok()) return;
      const pe::Touched t = units_.se().touched(d.value());  // contiguous operands
      for (int j = 0; j < 3; ++j) {
        if (t[j].lo < t[j].hi) reads.push_back(t[j]);
      }
      writes.push_back(t[3]);
      return;
    }
    case UnitOp::kReduce: {
      auto d = pe::read_descriptor<mtia_pe_re_desc>(core, r.rs1);
      if (!d.ok()) return;
      const mtia_pe_re_desc& e = d.value();
      tile(reads, e.src, e.rows, e.cols, e.ld_src, pe::dtype_bytes(e.in_dtype));
      const uint64_t dst = e.dst - MTIA_PE_LS_BASE;
      const Extent out{
          dst, dst + uint64_t{e.axis == 1 ? e.rows : e.cols} * pe::dtype_bytes(e.out_dtype)};
      if (e.hdr.flags & MTIA_PE_RE_ACCUMULATE) reads.push_back(out);
      writes.push_back(out);
      return;
    }
    case UnitOp::kLayout: {
      auto d = pe::read_descriptor<mtia_pe_mlu_desc>(core, r.rs1);
      if (!d.ok()) return;
      const mtia_pe_mlu_desc& l = d.value();
      const bool transpose = l.op == MTIA_PE_MLU_TRANSPOSE;
      tile(reads, l.src, l.rows, l.cols, l.ld_src, l.elem_size);
      tile(writes, l.dst, transpose ? l.cols : l.rows, transpose ? l.rows : l.cols, l.ld_dst,
           l.elem_size);
      return;
    }
    default:
      return;
  }
}

std::string ProcessingElement::ls_unwritten(const char* what, uint64_t pc, Extent bytes) const {
  return fmt::format(
      "initcheck: {} at pc 0x{:x} reads the {} local-store bytes at 0x{:x}..0x{:x}, which "
      "nothing (no dma.start, unit operation or store of this PE) wrote since the launch started",
      what, pc, bytes.hi - bytes.lo, MTIA_PE_LS_BASE + bytes.lo, MTIA_PE_LS_BASE + bytes.hi - 1);
}

UnitResponse ProcessingElement::sanitizer_fault(uint32_t check, std::string text,
                                                std::vector<pe::LineTable::Frame> earlier) {
  sanitizer_finding = {check, text, std::move(earlier)};
  return UnitResponse::fault(std::move(text));
}

std::string ProcessingElement::synccheck_tag(const pe::UnitRequest& r) const {
  const std::string issued = tag_done_.size() <= 1
                                 ? std::string(tag_done_.empty() ? "no tag" : "tag 1")
                                 : fmt::format("tags 1 to {}", tag_done_.size());
  return fmt::format(
      "synccheck: {} at pc 0x{:x} waits on tag {}, which this PE never issued (its dma.start "
      "and unit instructions issued {} so far in this launch)",
      r.op == UnitOp::kWait ? "pe.wait" : "pe.poll", r.pc, r.rs1, issued);
}

void ProcessingElement::log_race_access(const pe::UnitRequest& r, const mtia_pe_dma_desc& d,
                                        const DmaPlan& plan) {
  // The PEs share DRAM and SRAM; a local store is its PE's own (another PE reaches it only
  // through its device window, which is not checked).
  auto shared = [](const SideInfo& side) {
    return !side.host && (side.memory == MemoryKind::kDram || side.memory == MemoryKind::kSram);
  };
  if (d.src_space == MTIA_PE_SPACE_DEVICE && shared(plan.src)) {
    race_log.add(r.pc, r.ra, false, d.src, d.src_strides, d);
  }
  if (d.dst_space == MTIA_PE_SPACE_DEVICE && shared(plan.dst)) {
    race_log.add(r.pc, r.ra, true, d.dst, d.dst_strides, d);
  }
}

uint64_t ProcessingElement::take_turn(DmaPlan& plan, uint64_t issue_ps) {
  dma_.reserve(plan, issue_ps);
  if (tracing()) trace_dma(plan, issue_ps);
  if (!env_.clock.timing || plan.end_ps <= t0_ps_) return 0;
  return env_.clock.ps_to_cycles(plan.end_ps - t0_ps_);
}

}  // namespace mtia::sim::detail
