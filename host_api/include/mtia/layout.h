// Layout: how a strided tensor sits in memory, the way PyTorch describes it.
//
// Element i = (i0, ..., i{n-1}) lives at byte
//   base + (offset + sum_k i_k * strides[k]) * elem_size.
// sizes, strides and offset are in elements and must be >= 0. Dimension 0 is outermost.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mtia {

struct Layout {
  std::vector<int64_t> sizes;    // elements per dimension
  std::vector<int64_t> strides;  // elements between neighbours in each dimension
  int64_t offset = 0;            // elements from the base pointer to element (0, ..., 0)
  size_t elem_size = 1;          // bytes per element: 1, 2, 4 or 8

  // A row-major (C-contiguous) layout of the given shape. Throws Error(kInvalidArgument) for
  // a negative size or strides that overflow 64 bits.
  static Layout contiguous(std::vector<int64_t> sizes, size_t elem_size, int64_t offset = 0);

  size_t rank() const { return sizes.size(); }
  // Number of elements (product of sizes; 1 for rank 0, 0 when any size is 0). Throws
  // Error(kInvalidArgument) for a negative size or a product past 64 bits.
  int64_t numel() const;

  // "[2, 3] strides [3, 1] offset 0 elem 4", for messages.
  std::string to_string() const;
};

}  // namespace mtia
