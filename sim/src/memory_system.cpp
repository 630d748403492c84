#include "mtia/sim/memory_system.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

namespace mtia::sim {
namespace {

// ---- functional path ------------------------------------------------------------------------
// The copy loops are the emulator's hot path (a 64 MB tensor copy runs through here), so the
// N-D walk is reduced first: size-1 dimensions are dropped, dimensions are ordered so the
// innermost has the smallest destination stride, and dimensions that are contiguous on both
// sides are merged. What remains is an odometer over the outer dimensions around either one
// memmove per contiguous run, or a cache-blocked 2-D loop for strided (e.g. transposed) data.

struct Dim {
  uint64_t n;
  uint64_t ds;  // destination stride, bytes
  uint64_t ss;  // source stride, bytes
};

// Bytes per side of a tile in the blocked 2-D loop: small enough that the tile's source and
// destination lines stay in L1/L2 while it is walked in the "wrong" order on one side.
constexpr uint64_t kTileBytes = 256;

int collect(const uint64_t* sizes, int ndims, const uint64_t* dst_strides,
            const uint64_t* src_strides, Dim* out) {
  int k = 0;
  ndims = std::clamp(ndims, 0, isa::kMaxDims);
  for (int d = 0; d < ndims; ++d) {
    if (sizes[d] <= 1) continue;
    out[k++] = {sizes[d], dst_strides[d], src_strides != nullptr ? src_strides[d] : 0};
  }
  return k;
}

// Stable insertion sort: at most kMaxDims elements, and (unlike std::sort) it gives GCC's
// array-bounds analysis nothing to trip over.
template <typename Less>
void sort_dims(Dim* dims, int k, Less less) {
  for (int i = 1; i < k && i < isa::kMaxDims; ++i) {
    const Dim key = dims[i];
    int j = i - 1;
    while (j >= 0 && less(key, dims[j])) {
      dims[j + 1] = dims[j];
      --j;
    }
    dims[j + 1] = key;
  }
}

// Sufficient test that no two destination elements overlap: sorted by stride, each stride
// must step over the whole extent of the smaller dimensions.
bool dst_injective(const Dim* dims, int k, uint32_t elem) {
  Dim sorted[isa::kMaxDims];
  std::copy(dims, dims + k, sorted);
  sort_dims(sorted, k, [](const Dim& a, const Dim& b) { return a.ds < b.ds; });
  uint64_t extent = elem;
  for (int i = 0; i < k; ++i) {
    if (sorted[i].ds < extent) return false;
    uint64_t span = 0;
    if (__builtin_mul_overflow(sorted[i].ds, sorted[i].n - 1, &span) ||
        __builtin_add_overflow(extent, span, &extent)) {
      return false;
    }
  }
  return true;
}

// Merges neighbours (outer j, inner j + 1) that are contiguous on both sides. Order-preserving.
int merge(Dim* dims, int k, bool with_source) {
  int out = 0;
  for (int i = 0; i < k; ++i) {
    if (out > 0) {
      Dim& outer = dims[out - 1];
      const Dim& inner = dims[i];
      if (outer.ds == inner.ds * inner.n && (!with_source || outer.ss == inner.ss * inner.n)) {
        outer = {outer.n * inner.n, inner.ds, inner.ss};
        continue;
      }
    }
    dims[out++] = dims[i];
  }
  return out;
}

template <typename T>
inline void move_one(uint8_t* d, const uint8_t* s) {
  T v;
  std::memcpy(&v, s, sizeof(T));
  std::memcpy(d, &v, sizeof(T));
}

template <typename T>
void strided_row(uint8_t* d, uint64_t ds, const uint8_t* s, uint64_t ss, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) move_one<T>(d + i * ds, s + i * ss);
}

// Dimensions a (outer) and b (inner) walked in tiles so that both sides reuse cache lines.
template <typename T>
void tiled_2d(uint8_t* d, const uint8_t* s, const Dim& a, const Dim& b) {
  constexpr uint64_t kTile = std::max<uint64_t>(kTileBytes / sizeof(T), 8);
  for (uint64_t a0 = 0; a0 < a.n; a0 += kTile) {
    const uint64_t a1 = std::min(a.n, a0 + kTile);
    for (uint64_t b0 = 0; b0 < b.n; b0 += kTile) {
      const uint64_t b1 = std::min(b.n, b0 + kTile);
      for (uint64_t i = a0; i < a1; ++i) {
        uint8_t* drow = d + i * a.ds;
        const uint8_t* srow = s + i * a.ss;
        for (uint64_t j = b0; j < b1; ++j) move_one<T>(drow + j * b.ds, srow + j * b.ss);
      }
    }
  }
}

// A pure transpose of 4- or 8-byte elements: the destination is contiguous along b and the
// source along a. Register-blocked (4x4 or 2x2 elements per SSE2 block) inside cache tiles of
// kTransposeA x kTransposeB elements; measured about 5x faster than the scalar tiles above on
// a 4096 x 4096 fp32 transpose. Rows and columns left over at the edges go the scalar way.
#if defined(__SSE2__)
constexpr uint64_t kTransposeA = 128;
constexpr uint64_t kTransposeB = 16;

inline void block4x4(uint8_t* d, uint64_t dsa, const uint8_t* s, uint64_t ssb) {
  __m128 r0 = _mm_loadu_ps(reinterpret_cast<const float*>(s));
  __m128 r1 = _mm_loadu_ps(reinterpret_cast<const float*>(s + ssb));
  __m128 r2 = _mm_loadu_ps(reinterpret_cast<const float*>(s + 2 * ssb));
  __m128 r3 = _mm_loadu_ps(reinterpret_cast<const float*>(s + 3 * ssb));
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);  // bit moves only: any 32-bit payload survives
  _mm_storeu_ps(reinterpret_cast<float*>(d), r0);
  _mm_storeu_ps(reinterpret_cast<float*>(d + dsa), r1);
  _mm_storeu_ps(reinterpret_cast<float*>(d + 2 * dsa), r2);
  _mm_storeu_ps(reinterpret_cast<float*>(d + 3 * dsa), r3);
}

inline void block2x2(uint8_t* d, uint64_t dsa, const uint8_t* s, uint64_t ssb) {
  const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + ssb));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm_unpacklo_epi64(r0, r1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(d + dsa), _mm_unpackhi_epi64(r0, r1));
}

template <typename T>
void transpose_2d(uint8_t* d, const uint8_t* s, const Dim& a, const Dim& b) {
  constexpr uint64_t kBlock = sizeof(T) == 4 ? 4 : 2;
  const uint64_t na = a.n - a.n % kBlock;
  const uint64_t nb = b.n - b.n % kBlock;
  for (uint64_t a0 = 0; a0 < na; a0 += kTransposeA) {
    const uint64_t a1 = std::min(na, a0 + kTransposeA);
    for (uint64_t b0 = 0; b0 < nb; b0 += kTransposeB) {
      const uint64_t b1 = std::min(nb, b0 + kTransposeB);
      for (uint64_t i = a0; i < a1; i += kBlock) {
        for (uint64_t j = b0; j < b1; j += kBlock) {
          uint8_t* dp = d + i * a.ds + j * sizeof(T);
          const uint8_t* sp = s + i * sizeof(T) + j * b.ss;
          if constexpr (sizeof(T) == 4) {
            block4x4(dp, a.ds, sp, b.ss);
          } else {
            block2x2(dp, a.ds, sp, b.ss);
          }
        }
      }
    }
  }
  // Edges: the last columns (b >= nb) of the blocked rows, then the last rows (a >= na).
  for (uint64_t i = 0; i < na; ++i) {
    for (uint64_t j = nb; j < b.n; ++j)
      move_one<T>(d + i * a.ds + j * b.ds, s + i * a.ss + j * b.ss);
  }
  for (uint64_t i = na; i < a.n; ++i) {
    for (uint64_t j = 0; j < b.n; ++j)
      move_one<T>(d + i * a.ds + j * b.ds, s + i * a.ss + j * b.ss);
  }
}
#endif

// Calls body(dst_offset, src_offset) for every index of dims[0 .. count).
template <typename Body>
void for_each_outer(const Dim* dims, int count, Body&& body) {
  uint64_t idx[isa::kMaxDims] = {};
  uint64_t doff = 0;
  uint64_t soff = 0;
  for (;;) {
    body(doff, soff);
    int j = count - 1;
    for (; j >= 0; --j) {
      doff += dims[j].ds;
      soff += dims[j].ss;
      if (++idx[j] < dims[j].n) break;
      doff -= dims[j].ds * dims[j].n;
      soff -= dims[j].ss * dims[j].n;
      idx[j] = 0;
    }
    if (j < 0) return;
  }
}

template <typename T>
void copy_typed(uint8_t* dst, const uint8_t* src, Dim* dims, int k, bool reorderable) {
  const Dim& inner = dims[k - 1];
  if (inner.ds == sizeof(T) && inner.ss == sizeof(T)) {
    const uint64_t row = inner.n * sizeof(T);
    for_each_outer(dims, k - 1, [&](uint64_t doff, uint64_t soff) {
      std::memmove(dst + doff, src + soff, row);
    });
    return;
  }
  // One source element spread over a contiguous destination run (a broadcast: a fill, or a
  // vector expanded along a tile's rows): read once per run, the run is plain stores. Only when
  // the source is outside the run, where reading it once or per element is the same.
  if (inner.ds == sizeof(T) && inner.ss == 0) {
    const uint64_t row = inner.n * sizeof(T);
    for_each_outer(dims, k - 1, [&](uint64_t doff, uint64_t soff) {
      uint8_t* d = dst + doff;
      const uint8_t* s = src + soff;
      if (s + sizeof(T) <= d || s >= d + row) {
        T v;
        std::memcpy(&v, s, sizeof v);
        for (uint64_t i = 0; i < inner.n; ++i) std::memcpy(d + i * sizeof v, &v, sizeof v);
      } else {
        strided_row<T>(d, inner.ds, s, 0, inner.n);
      }
    });
    return;
  }
  // Tiling changes the element order, so only when destination elements are distinct; and it
  // pays only when the next dimension is the source's more contiguous one (a transpose).
  if (reorderable && k >= 2 && dims[k - 2].ss < inner.ss) {
    const Dim a = dims[k - 2];
#if defined(__SSE2__)
    if constexpr (sizeof(T) >= 4) {
      if (inner.ds == sizeof(T) && a.ss == sizeof(T)) {
        for_each_outer(dims, k - 2, [&](uint64_t doff, uint64_t soff) {
          transpose_2d<T>(dst + doff, src + soff, a, inner);
        });
        return;
      }
    }
#endif
    for_each_outer(dims, k - 2, [&](uint64_t doff, uint64_t soff) {
      tiled_2d<T>(dst + doff, src + soff, a, inner);
    });
    return;
  }
  for_each_outer(dims, k - 1, [&](uint64_t doff, uint64_t soff) {
    strided_row<T>(dst + doff, inner.ds, src + soff, inner.ss, inner.n);
  });
}

template <typename T>
void fill_typed(uint8_t* dst, Dim* dims, int k, uint64_t pattern) {
  T v;
  std::memcpy(&v, &pattern, sizeof(T));  // the low bytes, little-endian
  const Dim& inner = dims[k - 1];
  for_each_outer(dims, k - 1, [&](uint64_t doff, uint64_t) {
    uint8_t* d = dst + doff;
    if constexpr (sizeof(T) == 1) {
      if (inner.ds == 1) {
        std::memset(d, v, inner.n);
        return;
      }
    }
    for (uint64_t i = 0; i < inner.n; ++i) std::memcpy(d + i * inner.ds, &v, sizeof(T));
  });
}

}  // namespace

void nd_copy(uint8_t* dst, const uint64_t* dst_strides, const uint8_t* src,
             const uint64_t* src_strides, const uint64_t* sizes, int ndims, uint32_t elem_size) {
  Dim dims[isa::kMaxDims];
  int k = collect(sizes, ndims, dst_strides, src_strides, dims);
  const bool reorderable = dst_injective(dims, k, elem_size);
  if (reorderable) {
    // Outermost = largest destination stride; ties broken by the source stride.
    sort_dims(dims, k,
              [](const Dim& a, const Dim& b) { return a.ds != b.ds ? a.ds > b.ds : a.ss > b.ss; });
  }
  k = merge(dims, k, true);
  if (k == 0) dims[k++] = {1, elem_size, elem_size};  // a single element
  switch (elem_size) {
    case 1:
      return copy_typed<uint8_t>(dst, src, dims, k, reorderable);
    case 2:
      return copy_typed<uint16_t>(dst, src, dims, k, reorderable);
    case 4:
      return copy_typed<uint32_t>(dst, src, dims, k, reorderable);
    case 8:
      return copy_typed<uint64_t>(dst, src, dims, k, reorderable);
    default:
      assert(false && "element size validated by the decoder");
  }
}

void nd_fill(uint8_t* dst, const uint64_t* dst_strides, const uint64_t* sizes, int ndims,
             uint32_t elem_size, uint64_t pattern) {
  Dim dims[isa::kMaxDims];
  int k = collect(sizes, ndims, dst_strides, nullptr, dims);
  // Every element gets the same value, so any order gives the same memory.
  sort_dims(dims, k, [](const Dim& a, const Dim& b) { return a.ds > b.ds; });
  k = merge(dims, k, false);
  if (k == 0) dims[k++] = {1, elem_size, 0};
  switch (elem_size) {
    case 1:
      return fill_typed<uint8_t>(dst, dims, k, pattern);
    case 2:
      return fill_typed<uint16_t>(dst, dims, k, pattern);
    case 4:
      return fill_typed<uint32_t>(dst, dims, k, pattern);
    case 8:
      return fill_typed<uint64_t>(dst, dims, k, pattern);
    default:
      assert(false && "pattern size validated by the decoder");
  }
}

// ---- timing helpers ---------------------------------------------------------------------------

Runs contiguous_runs(const uint64_t* sizes, int ndims, uint32_t elem_size,
                     const uint64_t* strides) {
  uint64_t total = elem_size;
  for (int d = 0; d < ndims; ++d) total *= sizes[d];
  uint64_t run = elem_size;
  for (int d = ndims - 1; d >= 0; --d) {
    if (sizes[d] <= 1) continue;
    if (strides[d] != run) break;
    run *= sizes[d];
  }
  return {run, total / run};
}

uint64_t effective_bytes(const Runs& runs, uint32_t burst_bytes) {
  const uint64_t bursts = (runs.run_bytes + burst_bytes - 1) / burst_bytes;
  return runs.runs * bursts * burst_bytes;
}

uint64_t transfer_ps(uint64_t bytes, uint64_t bandwidth_MBps) {
  assert(bandwidth_MBps > 0);
  const unsigned __int128 num = static_cast<unsigned __int128>(bytes) * 1'000'000u;
  return static_cast<uint64_t>((num + bandwidth_MBps - 1) / bandwidth_MBps);
}

uint64_t ns_to_ps(double ns) {
  return static_cast<uint64_t>(std::llround(ns * 1000.0));
}
uint64_t gbps_to_mbps(double gbps) {
  return std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(gbps * 1000.0)));
}

const char* resource_name(Resource r) {
  switch (r) {
    case Resource::kPcieH2D:
      return "pcie_h2d";
    case Resource::kPcieD2H:
      return "pcie_d2h";
    case Resource::kDram:
      return "dram";
    case Resource::kSram:
      return "sram";
    case Resource::kCount:
      break;
  }
  return "?";
}

// ---- MemorySystem -----------------------------------------------------------------------------

MemorySystem::MemorySystem(const ChipConfig& config, HostMemory& host)
    : device_(config),
      host_(host),
      timing_(config.timing),
      setup_ps_(config.timing ? ns_to_ps(config.dma_setup_ns) : 0),
      local_store_MBps_(gbps_to_mbps(config.local_store_bandwidth_GBps)),
      link_MBps_(gbps_to_mbps(config.link_bandwidth_GBps)),
      link_latency_ps_(config.timing ? ns_to_ps(config.link_latency_ns) : 0),
      link_free_at_(config.link_count, std::array<uint64_t, 2>{}),
      link_stats_(config.link_count) {
  auto set = [&](Resource r, double gbps, double latency_ns, uint32_t burst) {
    params_[static_cast<int>(r)] = {gbps_to_mbps(gbps), timing_ ? ns_to_ps(latency_ns) : 0, burst};
  };
  set(Resource::kPcieH2D, config.pcie_h2d_bandwidth_GBps, config.pcie_latency_ns,
      config.pcie_burst_bytes);
  set(Resource::kPcieD2H, config.pcie_d2h_bandwidth_GBps, config.pcie_latency_ns,
      config.pcie_burst_bytes);
  set(Resource::kDram, config.dram_bandwidth_GBps, config.dram_latency_ns, config.dram_burst_bytes);
  set(Resource::kSram, config.sram_bandwidth_GBps, config.sram_latency_ns, config.sram_burst_bytes);
}

bool MemorySystem::check_side(const uint64_t* sizes, int ndims, uint32_t elem,
                              const isa::NdRegion& region, const DmaReach& reach, SideInfo& side,
                              DmaPlan& plan) const {
  auto span = isa::region_span(sizes, ndims, elem, region);
  if (!span) {
    plan.status = isa::reject(span.error().code, {}, region.addr, 0);
    return false;
  }
  side.span = span.value();
  side.runs = contiguous_runs(sizes, ndims, elem, region.strides);
  const uint64_t lo = side.span.lo;
  const uint64_t bytes = side.span.size();
  switch (static_cast<isa::AddressSpace>(region.space)) {
    case isa::AddressSpace::kDevice:
      side.host = false;
      side.memory = device_.kind_of(lo, bytes);
      // Outside the job's window is, to the job, not device memory at all.
      if (side.memory == MemoryKind::kNone ||
          (!reach.scope.covers(lo, bytes) &&
           !(reach.launch_scratch &&
             (side.memory == MemoryKind::kLocalStore || side.memory == MemoryKind::kSram)))) {
        plan.status = isa::reject(isa::ErrorCode::kDeviceAddressFault, {}, lo, bytes);
        return false;
      }
      return true;
    case isa::AddressSpace::kHost:
      side.host = true;
      if (host_.translate_in(reach.scope.context, lo, bytes) == nullptr) {
        plan.status = isa::reject(isa::ErrorCode::kHostAddressFault, {}, lo, bytes);
        return false;
      }
      return true;
    default:
      plan.status = isa::reject(isa::ErrorCode::kBadAddressSpace, {}, region.space, 0);
      return false;
  }
}

void MemorySystem::charge(DmaPlan& plan, const SideInfo& side, bool is_source) {
  if (!side.host && side.memory == MemoryKind::kLocalStore) {
    plan.local_store_bytes += plan.payload_bytes;  // the PE's own port: no shared timeline
    return;
  }
  Resource r;
  if (side.host) {
    r = is_source ? Resource::kPcieH2D : Resource::kPcieD2H;
  } else {
    r = side.memory == MemoryKind::kDram ? Resource::kDram : Resource::kSram;
  }
  const int i = static_cast<int>(r);
  const uint64_t eff = effective_bytes(side.runs, params_[i].burst_bytes);
  plan.effective_bytes[i] += eff;
  stats_[i].bytes += plan.payload_bytes;
  stats_[i].effective_bytes += eff;
}

void MemorySystem::schedule(DmaPlan& plan, uint64_t now_ps) {
  plan.ready_ps = now_ps + setup_ps_;
  // Each resource on the path is its own FIFO: the job takes its turn on each independently
  // and ends when the last of them has moved its bytes. (One start for all of them would let
  // a job queued far ahead on LPDDR hold the SRAM idle until then.)
  uint64_t start = ~0ull;
  uint64_t end = plan.ready_ps;
  uint64_t latency = 0;
  for (int i = 0; i < kNumResources; ++i) {
    if (plan.effective_bytes[i] == 0) continue;
    const uint64_t begin = std::max(plan.ready_ps, timing_ ? free_at_[i] : 0);
    plan.busy_ps[i] = timing_ ? transfer_ps(plan.effective_bytes[i], params_[i].bandwidth_MBps) : 0;
    plan.resource_start_ps[i] = begin;
    start = std::min(start, begin);
    end = std::max(end, begin + plan.busy_ps[i]);
    latency = std::max(latency, params_[i].latency_ps);
    if (timing_) free_at_[i] = begin + plan.busy_ps[i];
    stats_[i].jobs += 1;
    stats_[i].busy_ps += plan.busy_ps[i];
  }
  if (start == ~0ull) start = plan.ready_ps;
  // A local-store side streams at the PE's port rate at most; nobody else queues on it.
  if (timing_ && plan.local_store_bytes > 0) {
    end = std::max(end, start + transfer_ps(plan.local_store_bytes, local_store_MBps_));
  }
  plan.start_ps = start;
  plan.end_ps = end + latency;
}

DmaPlan MemorySystem::begin_plan(uint64_t now_ps, const DmaReach& reach) const {
  DmaPlan plan;
  plan.context = reach.scope.context;
  plan.ready_ps = plan.start_ps = plan.end_ps = now_ps + setup_ps_;
  return plan;
}

DmaPlan MemorySystem::schedule_copy(const isa::DmaCopyPacket& packet, uint64_t now_ps,
                                    const DmaReach& reach) {
  DmaPlan plan = check_copy(packet, now_ps, reach);
  if (plan.status.ok()) reserve(plan, now_ps);
  return plan;
}

DmaPlan MemorySystem::check_copy(const isa::DmaCopyPacket& packet, uint64_t now_ps,
                                 const DmaReach& reach) const {
  DmaPlan plan = begin_plan(now_ps, reach);
  plan.copy = packet;
  const int nd = packet.ndims;
  if (!check_side(packet.sizes, nd, packet.elem_size, packet.src, reach, plan.src, plan) ||
      !check_side(packet.sizes, nd, packet.elem_size, packet.dst, reach, plan.dst, plan)) {
    return plan;
  }
  plan.payload_bytes = plan.src.runs.run_bytes * plan.src.runs.runs;
  return plan;
}

void MemorySystem::reserve(DmaPlan& plan, uint64_t now_ps) {
  assert(plan.status.ok() && !plan.is_fill && !plan.is_link);
  charge(plan, plan.src, true);
  charge(plan, plan.dst, false);
  schedule(plan, now_ps);
}

DmaPlan MemorySystem::schedule_fill(const isa::FillPacket& packet, uint64_t now_ps,
                                    const DmaReach& reach) {
  DmaPlan plan = begin_plan(now_ps, reach);
  plan.is_fill = true;
  plan.fill = packet;
  if (!check_side(packet.sizes, packet.ndims, packet.pattern_size, packet.dst, reach, plan.dst,
                  plan)) {
    return plan;
  }
  plan.payload_bytes = plan.dst.runs.run_bytes * plan.dst.runs.runs;
  charge(plan, plan.dst, false);
  schedule(plan, now_ps);
  return plan;
}

DmaPlan MemorySystem::schedule_link(const isa::LinkTransferPacket& packet, uint64_t now_ps,
                                    const DmaReach& reach) {
  DmaPlan plan = begin_plan(now_ps, reach);
  plan.is_link = true;
  plan.link = packet;
  const bool send = packet.direction == static_cast<uint8_t>(isa::LinkDirection::kSend);
  // The bytes move as a 1-D copy: device memory -> staging for a send, back for a receive.
  isa::DmaCopyPacket& c = plan.copy;
  c.header = packet.header;
  c.ndims = 1;
  c.elem_size = 1;
  c.sizes[0] = packet.bytes;
  isa::NdRegion device{}, host{};
  device.addr = packet.device_addr;
  device.space = static_cast<uint8_t>(isa::AddressSpace::kDevice);
  device.strides[0] = 1;
  host.addr = packet.host_addr;
  host.space = static_cast<uint8_t>(isa::AddressSpace::kHost);
  host.strides[0] = 1;
  c.src = send ? device : host;
  c.dst = send ? host : device;
  if (packet.link >= link_free_at_.size()) {
    plan.status = isa::reject(isa::ErrorCode::kBadLink, {}, packet.link, link_free_at_.size());
    return plan;
  }
  if (!check_side(c.sizes, 1, 1, c.src, reach, plan.src, plan) ||
      !check_side(c.sizes, 1, 1, c.dst, reach, plan.dst, plan)) {
    return plan;
  }
  plan.payload_bytes = packet.bytes;
  const int dir = static_cast<int>(packet.direction);
  uint64_t& free_at = link_free_at_[packet.link][dir];
  const uint64_t ready = send ? now_ps + setup_ps_ : packet.sent_ps + setup_ps_;
  const uint64_t start = timing_ ? std::max(ready, free_at) : now_ps;
  const uint64_t busy = timing_ ? transfer_ps(packet.bytes, link_MBps_) : 0;
  const uint64_t arrival = start + busy + link_latency_ps_;
  if (timing_) free_at = start + busy;
  plan.link_start_ps = start;
  plan.link_busy_ps = busy;
  plan.link_end_ps = arrival;
  plan.start_ps = start;
  plan.end_ps = send ? arrival : std::max(plan.ready_ps, arrival);
  LinkStats& st = link_stats_[packet.link][dir];
  st.transfers += 1;
  st.bytes += packet.bytes;
  st.busy_ps += busy;
  return plan;
}

uint8_t* MemorySystem::translate(const SideInfo& side, uint32_t context) const {
  if (side.host) return host_.translate_in(context, side.span.lo, side.span.size());
  return device_.translate(side.span.lo, side.span.size());
}

isa::Status MemorySystem::bind(const DmaPlan& plan, BoundDma& out) {
  assert(plan.status.ok());
  auto fault = [](const SideInfo& side) {
    return isa::reject(
        side.host ? isa::ErrorCode::kHostAddressFault : isa::ErrorCode::kDeviceAddressFault, {},
        side.span.lo, side.span.size());
  };
  out.is_fill = plan.is_fill;
  out.dst = translate(plan.dst, plan.context);
  if (out.dst == nullptr) return fault(plan.dst);
  if (!plan.dst.host && plan.dst.memory == MemoryKind::kDram) {
    out.dram = &device_;
    out.dst_span = plan.dst.span;
  }
  if (plan.is_fill) {
    out.fill = plan.fill;
    return isa::Status{};
  }
  out.src = translate(plan.src, plan.context);
  if (out.src == nullptr) return fault(plan.src);
  out.copy = plan.copy;
  return isa::Status{};
}

void BoundDma::run() const {
  // Unsigned strides: the region's base address is the lowest byte of its span.
  if (is_fill) {
    nd_fill(dst, fill.dst.strides, fill.sizes, fill.ndims, fill.pattern_size, fill.pattern);
  } else {
    nd_copy(dst, copy.dst.strides, src, copy.src.strides, copy.sizes, copy.ndims, copy.elem_size);
  }
  if (dram != nullptr) dram->note_written(dst_span.lo, dst_span.size());
}

isa::Status MemorySystem::perform(const DmaPlan& plan) {
  if (!plan.is_fill && !plan.src.host) notify_device_access(plan.src.span, false);
  if (!plan.dst.host) notify_device_access(plan.dst.span, true);
  BoundDma bound;
  isa::Status r = bind(plan, bound);
  if (r.ok()) bound.run();
  return r;
}

}  // namespace mtia::sim
