// Test helpers: a nested-loop reference copy, a host executor for copy plans, and a random
// layout generator. The reference knows nothing about the planner: it walks every element
// index of the layouts and copies element by element.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "mtia/copy_plan.h"
#include "mtia/layout.h"

namespace mtia::test {

// Byte offset of element `idx` in layout `l`.
inline uint64_t element_byte(const Layout& l, const std::vector<int64_t>& idx) {
  int64_t e = l.offset;
  for (size_t d = 0; d < idx.size(); ++d) e += idx[d] * l.strides[d];
  return static_cast<uint64_t>(e) * l.elem_size;
}

// dst <- src, one element at a time, over every index of the shape (an odometer is the
// nested loop of any rank: the last index moves fastest).
inline void reference_copy(uint8_t* dst, const Layout& dl, const uint8_t* src, const Layout& sl) {
  for (int64_t s : dl.sizes) {
    if (s == 0) return;
  }
  std::vector<int64_t> idx(dl.sizes.size(), 0);
  for (;;) {
    std::memcpy(dst + element_byte(dl, idx), src + element_byte(sl, idx), dl.elem_size);
    size_t d = idx.size();
    while (d > 0) {
      --d;
      if (++idx[d] < dl.sizes[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (idx.empty()) return;  // rank 0: a single element
  }
}

// Fills every element of `l` with `pattern` (its low elem_size bytes).
inline void reference_fill(uint8_t* dst, const Layout& l, uint64_t pattern) {
  Layout src = l;
  src.strides.assign(l.sizes.size(), 0);  // every element reads the one pattern element
  src.offset = 0;
  reference_copy(dst, l, reinterpret_cast<const uint8_t*>(&pattern), src);
}

// Runs a plan's descriptors on host memory, as the DMA engine would.
inline void execute_plan(const CopyPlan& plan, uint8_t* dst, const uint8_t* src) {
  for (const CopyPiece& p : plan.pieces) {
    uint64_t total = 1;
    for (int k = 0; k < p.ndims; ++k) total *= p.sizes[k];
    for (uint64_t n = 0; n < total; ++n) {
      uint64_t so = p.src_offset, d_o = p.dst_offset, rest = n;
      for (int k = p.ndims - 1; k >= 0; --k) {  // innermost dimension varies fastest
        const uint64_t i = rest % p.sizes[k];
        rest /= p.sizes[k];
        so += i * p.src_strides[k];
        d_o += i * p.dst_strides[k];
      }
      std::memcpy(dst + d_o, src + so, plan.elem_size);
    }
  }
}

// Bytes a buffer needs to hold every element of `l` from its base pointer.
inline uint64_t span_end(const Layout& l) {
  int64_t last = l.offset;
  for (size_t d = 0; d < l.sizes.size(); ++d) {
    if (l.sizes[d] == 0) return 0;
    last += (l.sizes[d] - 1) * l.strides[d];
  }
  return static_cast<uint64_t>(last + 1) * l.elem_size;
}

// A random shape of rank 1..max_rank with at most max_elems elements (size-1 dimensions
// included, as real tensors have them).
inline std::vector<int64_t> random_shape(std::mt19937_64& rng, int max_rank, int64_t max_elems) {
  const int rank = std::uniform_int_distribution<int>(1, max_rank)(rng);
  std::vector<int64_t> sizes(rank, 1);
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) {
    const int64_t cap = std::max<int64_t>(1, max_elems / n);
    const int64_t hi = std::min<int64_t>(cap, rank <= 2 ? 40 : (rank <= 4 ? 9 : 4));
    sizes[d] = std::uniform_int_distribution<int64_t>(1, hi)(rng);
    n *= sizes[d];
  }
  return sizes;
}

// A random non-overlapping layout of `sizes`: dimensions laid out in a random order
// (permuted/transposed), optionally padded between dimensions and strided innermost, plus a
// random offset. Strides of size-1 dimensions are arbitrary, as in PyTorch.
inline Layout random_layout(std::mt19937_64& rng, const std::vector<int64_t>& sizes,
                            size_t elem_size) {
  Layout l;
  l.sizes = sizes;
  l.elem_size = elem_size;
  l.strides.assign(sizes.size(), 0);
  std::vector<size_t> order(sizes.size());  // order[0] is the innermost dimension
  std::iota(order.begin(), order.end(), 0);
  std::reverse(order.begin(), order.end());  // row-major by default
  auto coin = [&](int percent) { return std::uniform_int_distribution<int>(0, 99)(rng) < percent; };
  if (coin(50)) std::shuffle(order.begin(), order.end(), rng);
  const bool padded = coin(40);
  int64_t stride = coin(20) ? std::uniform_int_distribution<int64_t>(2, 3)(rng) : 1;
  for (size_t d : order) {
    l.strides[d] = stride;
    stride *= sizes[d];
    if (padded && coin(50)) stride += std::uniform_int_distribution<int64_t>(1, 5)(rng);
  }
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1 && coin(30))
      l.strides[d] = std::uniform_int_distribution<int64_t>(0, 99)(rng);
  }
  l.offset = coin(50) ? std::uniform_int_distribution<int64_t>(0, 7)(rng) : 0;
  return l;
}

inline size_t random_elem_size(std::mt19937_64& rng) {
  static constexpr size_t kSizes[] = {1, 2, 4, 8};
  return kSizes[std::uniform_int_distribution<int>(0, 3)(rng)];
}

inline std::vector<uint8_t> random_bytes(std::mt19937_64& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

}  // namespace mtia::test
