#include "deferred_work.h"

#include <algorithm>

namespace mtia::sim::detail {

DeferredWork::DeferredWork(sim::pe::UnitWorkers& workers, uint32_t pe, sim::pe::RiscvCore& core,
                           Params params, LazyLoadStats& stats)
    : workers_(workers), pe_(pe), core_(core), params_(params), stats_(stats) {}

void DeferredWork::run_or_defer(const Touched& touched, uint64_t host_ns, sim::pe::UnitTask&& work,
                                bool device) {
  for (const Extent& e : touched) materialize(e);
  enqueue(touched, host_ns, std::move(work), device);
}

void DeferredWork::enqueue(const Touched& touched, uint64_t host_ns, sim::pe::UnitTask&& work,
                           bool device) {
  const bool small = host_ns < params_.inline_work_ns;
  if (pending_.empty() && (small || workers_.threads() == 0)) {
    work();
    return;
  }
  const uint64_t number = workers_.post(pe_, std::move(work), /*wake=*/!small);
  pending_.push_back({number, touched, device});
  for (const Extent& e : touched) {
    if (e.lo >= e.hi) continue;
    guard_.lo = std::min(guard_.lo, e.lo);
    guard_.hi = std::max(guard_.hi, e.hi);
  }
  if (guard_.lo < guard_.hi) core_.guard(guard_.lo, guard_.hi);
}

void DeferredWork::settle(Extent bytes) {
  materialize(bytes);
  uint64_t upto = 0;
  for (const PendingOp& op : pending_) {
    for (const Extent& e : op.touched) {
      if (bytes.lo < e.hi && bytes.hi > e.lo) upto = op.number;
    }
  }
  join_upto(upto);
}

void DeferredWork::join_upto(uint64_t upto) {
  if (upto == 0) return;
  workers_.join(pe_, upto);
  std::erase_if(pending_, [&](const PendingOp& op) { return op.number <= upto; });
  if (pending_.empty()) queue_drained();
}

void DeferredWork::join() {
  if (!pending_.empty()) {
    workers_.join(pe_, pending_.back().number);
    pending_.clear();
  }
  queue_drained();
}

void DeferredWork::join_device() {
  uint64_t upto = 0;
  for (const PendingOp& op : pending_) {
    if (op.device) upto = op.number;
  }
  join_upto(upto);
}

void DeferredWork::flush() {
  copy_loads();
  join();
}

bool DeferredWork::any_load_reads(uint64_t lo, uint64_t hi) const {
  for (const LazyLoad& l : loads_) {
    if (lo < l.src_hi && hi > l.src_lo) return true;
  }
  return false;
}

bool DeferredWork::load_lazily(const mtia_pe_dma_desc& d, Extent ls, const DmaPlan& plan,
                               const BoundDma& bound) {
  if (!params_.lazy_loads || d.dst_space != MTIA_PE_SPACE_LOCAL ||
      d.src_space == MTIA_PE_SPACE_LOCAL || bound.is_fill || plan.payload_bytes < kLazyLoadBytes ||
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
  ++stats_.loads;
  guard_.lo = std::min(guard_.lo, ls.lo);
  guard_.hi = std::max(guard_.hi, ls.hi);
  core_.guard(guard_.lo, guard_.hi);
  return true;
}

void DeferredWork::materialize(LazyLoad& l) {
  l.live = false;
  ++stats_.copied;
  const BoundDma copy = l.copy;
  enqueue(
      Touched{l.ls, Extent{}, Extent{}, Extent{}}, (l.rows * l.run) / 8, [copy] { copy.run(); },
      /*device=*/true);
}

void DeferredWork::materialize(Extent bytes) {
  if (bytes.lo >= bytes.hi) return;
  for (LazyLoad& l : loads_) {
    if (l.live && bytes.lo < l.ls.hi && bytes.hi > l.ls.lo) materialize(l);
  }
}

sim::pe::MatmulOperandView DeferredWork::operand_view(uint64_t offset, uint64_t rows,
                                                      uint64_t row_bytes, uint64_t ld_bytes) {
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
    if (reinterpret_cast<uintptr_t>(p) % alignof(float) != 0 || ld % sizeof(float) != 0) return {};
    ++stats_.operand_reads;
    return {reinterpret_cast<const float*>(p), ld / sizeof(float)};
  }
  return {};
}

void DeferredWork::queue_drained() {
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

}  // namespace mtia::sim::detail
