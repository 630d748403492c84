// How a strided copy or fill becomes DMA descriptors. Pure functions, no device needed: the
// Device uses them, and they are public so that tools and tests can see what a copy costs.
//
// Lowering, in order:
//  1. validate (element sizes, equal shapes, non-negative sizes/strides/offsets, no 64-bit
//     overflow, no zero strides on the written side where a dimension has size > 1);
//  2. drop dimensions of size 1;
//  3. order dimensions by the strides of one side (LoopOrder), outermost first: a copy is the
//     same whichever order its loops run in, this lets permuted-but-equal layouts merge, and
//     the chosen side gets the longest contiguous bursts (which the DMA engine rewards);
//  4. merge neighbours that are contiguous on BOTH sides (stride[i] == stride[i+1]*size[i+1]);
//  5. if more than kMaxCopyDims dimensions remain, keep the innermost one and the largest
//     others in the descriptor and loop over the rest on the host: one descriptor each.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "mtia/layout.h"

namespace mtia {

// Dimensions one DMA descriptor holds (isa::kMaxDims).
inline constexpr int kMaxCopyDims = 6;
// A plan needing more descriptors than this is rejected as unreasonably fragmented.
inline constexpr uint64_t kMaxCopyPieces = uint64_t{1} << 20;

// Bytes [lo, hi) relative to a base pointer.
struct ByteRange {
  uint64_t lo = 0;
  uint64_t hi = 0;  // exclusive
  uint64_t size() const { return hi - lo; }
};

// One descriptor's worth. Offsets and strides are bytes relative to each side's base pointer.
struct CopyPiece {
  int ndims = 0;  // 1..kMaxCopyDims
  std::array<uint64_t, kMaxCopyDims> sizes{};
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  std::array<uint64_t, kMaxCopyDims> src_strides{};
  std::array<uint64_t, kMaxCopyDims> dst_strides{};
};

struct CopyPlan {
  size_t elem_size = 0;
  uint64_t elements = 0;  // total elements moved (0: nothing to do, no pieces)
  ByteRange src_span;     // every byte read, relative to the source base (if elements > 0)
  ByteRange dst_span;     // every byte written, relative to the destination base
  std::vector<CopyPiece> pieces;
};

// Whose strides decide the loop order when the two sides disagree (e.g. a transpose): that
// side is walked contiguously, the other one strided. The Device picks the host side for
// host<->device copies, because PCIe is the slowest link and pays most for short bursts.
enum class LoopOrder {
  kDestinationContiguous,
  kSourceContiguous,
};

// Plans dst <- src. Both layouts must have the same element size, rank and sizes. Throws
// mtia::Error(kInvalidArgument) naming what is wrong.
CopyPlan plan_copy(const Layout& dst, const Layout& src,
                   LoopOrder order = LoopOrder::kDestinationContiguous);

// Plans a fill of `dst` (the source fields of the pieces and src_span are unused).
CopyPlan plan_fill(const Layout& dst);

}  // namespace mtia
