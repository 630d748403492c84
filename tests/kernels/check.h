// Checking kernel outputs in the fake device DRAM against the CPU references of
// reference_ops.h.
#pragma once

#include <functional>
#include <string>

#include "ref.h"

namespace kt {

// Downloads `out` and checks each element of the view against want(index) within `tol`, and
// that the storage outside the view (gaps of a strided output) still holds the kGapByte fill.
inline void check_tensor(Device& dev, Tensor& out, const std::function<double(const Shape&)>& want,
                         Tol tol, const std::string& what) {
  out.download(dev);
  check_view(out, want, tol, what);
}

}  // namespace kt
