#include "lazy_loads.h"

#include <algorithm>

namespace mtia::sim::detail {

LazyLoads::LazyLoads(sim::pe::RiscvCore& core, bool enabled, LazyLoadStats& stats)
    : core_(core), enabled_(enabled), stats_(stats) {}

void LazyLoads::settle(Extent bytes) {
  if (bytes.lo >= bytes.hi || !guards(bytes.lo, bytes.hi)) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    copy_locked(bytes);
  }
  refresh_guard();
}

void LazyLoads::settle(const Touched& touched) {
  bool any = false;
  for (const Extent& e : touched) any = any || (e.lo < e.hi && guards(e.lo, e.hi));
  if (!any) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Extent& e : touched) copy_locked(e);
  }
  refresh_guard();
}

void LazyLoads::settle_held(const Touched& touched) {
  for (const Extent& e : touched) copy_locked(e);
}

void LazyLoads::settle_all() {
  flush();
  refresh_guard();
}

void LazyLoads::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  copy_locked(Extent{0, ~0ull});
}

bool LazyLoads::reads_device(uint64_t lo, uint64_t hi) {
  if (lo >= src_hi_.load(std::memory_order_acquire) ||
      hi <= src_lo_.load(std::memory_order_acquire)) {
    return false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const LazyLoad& l : loads_) {
    if (lo < l.src_hi && hi > l.src_lo) return true;
  }
  return false;
}

bool LazyLoads::load_lazily(const mtia_pe_dma_desc& d, Extent ls, const DmaPlan& plan,
                            const BoundDma& bound) {
  if (!enabled_ || d.dst_space != MTIA_PE_SPACE_LOCAL || d.src_space == MTIA_PE_SPACE_LOCAL ||
      bound.is_fill || plan.payload_bytes < kLazyLoadBytes ||
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Loads into these bytes before it: the same rows again are dropped, others copied.
    std::erase_if(loads_, [&](const LazyLoad& o) {
      if (o.ls.hi <= ls.lo || o.ls.lo >= ls.hi) return false;
      const bool covered = o.ls.lo == ls.lo && o.ls.hi == ls.hi && o.rows == l.rows &&
                           o.run == l.run && o.dst_stride == l.dst_stride;
      if (!covered) {
        ++stats_.copied;
        o.copy.run();
      }
      return true;
    });
    loads_.push_back(l);
    ++stats_.loads;
    publish_sources_locked();
  }
  refresh_guard();
  return true;
}

void LazyLoads::copy_locked(Extent bytes) {
  if (bytes.lo >= bytes.hi) return;
  const size_t before = loads_.size();
  std::erase_if(loads_, [&](const LazyLoad& l) {
    if (bytes.lo >= l.ls.hi || bytes.hi <= l.ls.lo) return false;
    ++stats_.copied;
    l.copy.run();
    return true;
  });
  if (loads_.size() != before) publish_sources_locked();
}

void LazyLoads::publish_sources_locked() {
  uint64_t lo = ~0ull, hi = 0;
  for (const LazyLoad& l : loads_) {
    lo = std::min(lo, l.src_lo);
    hi = std::max(hi, l.src_hi);
  }
  src_lo_.store(lo, std::memory_order_release);
  src_hi_.store(hi, std::memory_order_release);
}

void LazyLoads::refresh_guard() {
  Extent g = kNone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const LazyLoad& l : loads_) {
      g.lo = std::min(g.lo, l.ls.lo);
      g.hi = std::max(g.hi, l.ls.hi);
    }
  }
  if (g.lo == guard_.lo && g.hi == guard_.hi) return;
  guard_ = g;
  if (g.lo < g.hi) {
    core_.guard(g.lo, g.hi);
  } else {
    core_.clear_guard();
  }
}

sim::pe::MatmulOperandView LazyLoads::operand_view(uint64_t offset, uint64_t rows,
                                                   uint64_t row_bytes, uint64_t ld_bytes) {
  if (rows == 0 || row_bytes == 0) return {};
  const uint64_t end = offset + (rows - 1) * ld_bytes + row_bytes;
  for (const LazyLoad& l : loads_) {
    if (offset < l.ls.lo || end > l.ls.hi) continue;
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

}  // namespace mtia::sim::detail
