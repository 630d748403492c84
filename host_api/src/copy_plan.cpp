// Layout validation and lowering of strided copies into DMA descriptors (see copy_plan.h).
#include "mtia/copy_plan.h"

#include <algorithm>
#include <sstream>

#include "mtia/error.h"
#include "mtia/isa/packets.h"

namespace mtia {

static_assert(kMaxCopyDims == isa::kMaxDims, "a copy piece is one isa::DmaCopyPacket");

Layout Layout::contiguous(std::vector<int64_t> sizes, size_t elem_size, int64_t offset) {
  Layout l;
  l.strides.assign(sizes.size(), 1);
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] < 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  "Layout::contiguous: size " + std::to_string(sizes[i]) + " in dimension " +
                      std::to_string(i) + " is negative; sizes count elements and must be >= 0");
    }
    // The stride of dimension i - 1 is the product of the sizes after it.
    if (i > 0 && __builtin_mul_overflow(l.strides[i], sizes[i], &l.strides[i - 1])) {
      throw Error(ErrorKind::kInvalidArgument,
                  "Layout::contiguous: the strides of sizes overflow 64 bits at dimension " +
                      std::to_string(i - 1) +
                      "; the shape holds more elements than an address "
                      "can count");
    }
  }
  l.sizes = std::move(sizes);
  l.offset = offset;
  l.elem_size = elem_size;
  return l;
}

int64_t Layout::numel() const {
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] < 0) {
      throw Error(ErrorKind::kInvalidArgument, "Layout::numel: size " + std::to_string(sizes[d]) +
                                                   " in dimension " + std::to_string(d) +
                                                   " is negative");
    }
  }
  if (std::find(sizes.begin(), sizes.end(), 0) != sizes.end()) return 0;
  int64_t n = 1;
  for (int64_t s : sizes) {
    if (__builtin_mul_overflow(n, s, &n)) {
      throw Error(ErrorKind::kInvalidArgument,
                  "Layout::numel: the sizes multiply past 64 bits; the shape holds more elements "
                  "than an address can count");
    }
  }
  return n;
}

namespace {

template <typename T>
std::string list(const std::vector<T>& v) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ']';
  return os.str();
}

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorKind::kInvalidArgument, message);
}

bool valid_elem_size(size_t e) {
  return e == 1 || e == 2 || e == 4 || e == 8;
}

// Checks one side's layout on its own and returns its byte span [lo, hi) (when it has
// elements). All arithmetic is overflow-checked: a layout whose last byte does not fit in
// 64 bits is rejected rather than wrapped.
ByteRange check_side(const Layout& l, const char* side, bool has_elements) {
  if (l.sizes.size() != l.strides.size()) {
    invalid(std::string(side) + " layout has " + std::to_string(l.sizes.size()) + " sizes but " +
            std::to_string(l.strides.size()) + " strides; give one stride per dimension");
  }
  if (l.offset < 0) {
    invalid(std::string(side) + " layout has negative offset " + std::to_string(l.offset) +
            "; offsets are in elements from the base pointer and must be >= 0 (move the base "
            "pointer instead)");
  }
  for (size_t d = 0; d < l.sizes.size(); ++d) {
    if (l.sizes[d] < 0) {
      invalid(std::string(side) + " layout has negative size " + std::to_string(l.sizes[d]) +
              " in dimension " + std::to_string(d) + " (sizes " + list(l.sizes) + ")");
    }
    if (l.strides[d] < 0) {
      invalid(std::string(side) + " layout has negative stride " + std::to_string(l.strides[d]) +
              " in dimension " + std::to_string(d) + " (strides " + list(l.strides) +
              "); negative strides are not supported: copy a flipped view on the host instead");
    }
  }
  if (!has_elements) return {};
  auto overflow = [&](const std::string& what) {
    invalid(std::string(side) + " layout " + l.to_string() + " overflows 64-bit addresses (" +
            what + "); check its sizes and strides");
  };
  uint64_t last = static_cast<uint64_t>(l.offset);  // index of the last element, in elements
  for (size_t d = 0; d < l.sizes.size(); ++d) {
    uint64_t step = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(l.sizes[d] - 1),
                               static_cast<uint64_t>(l.strides[d]), &step)) {
      overflow("dimension " + std::to_string(d) + ": (size - 1) x stride");
    }
    if (__builtin_add_overflow(last, step, &last)) {
      overflow("sum over dimensions up to " + std::to_string(d));
    }
  }
  ByteRange r;
  uint64_t hi_elems = 0;
  if (__builtin_add_overflow(last, uint64_t{1}, &hi_elems) ||
      __builtin_mul_overflow(hi_elems, static_cast<uint64_t>(l.elem_size), &r.hi)) {
    overflow("end of the last element in bytes");
  }
  r.lo = static_cast<uint64_t>(l.offset) * l.elem_size;  // <= r.hi, so no overflow
  return r;
}

// One dimension during lowering, strides in bytes for both sides.
struct Dim {
  uint64_t size;
  uint64_t dst_stride;
  uint64_t src_stride;
};

CopyPlan plan(const Layout& dst, const Layout& src, bool fill, LoopOrder order) {
  CopyPlan p;
  const char* what = fill ? "fill" : "copy";
  if (!valid_elem_size(dst.elem_size)) {
    invalid(std::string(what) + ": dst element size " + std::to_string(dst.elem_size) +
            " is not supported; use 1, 2, 4 or 8 bytes");
  }
  if (!fill) {
    if (!valid_elem_size(src.elem_size)) {
      invalid("copy: src element size " + std::to_string(src.elem_size) +
              " is not supported; use 1, 2, 4 or 8 bytes");
    }
    if (src.elem_size != dst.elem_size) {
      invalid("copy: element sizes differ (dst " + std::to_string(dst.elem_size) + " bytes, src " +
              std::to_string(src.elem_size) +
              " bytes); the DMA engines copy bytes and do not convert types");
    }
    if (dst.sizes != src.sizes) {
      invalid("copy: mismatched shapes: dst is " + list(dst.sizes) + " but src is " +
              list(src.sizes) + "; both sides need the same rank and sizes");
    }
  }
  p.elem_size = dst.elem_size;

  // Element count, overflow-checked; zero elements make the whole operation a no-op.
  uint64_t elements = 1;
  bool any_zero = false;
  for (int64_t s : dst.sizes) any_zero |= (s == 0);
  p.dst_span = check_side(dst, "dst", !any_zero);
  p.src_span = fill ? p.dst_span : check_side(src, "src", !any_zero);
  if (any_zero) return p;
  for (int64_t s : dst.sizes) {
    if (__builtin_mul_overflow(elements, static_cast<uint64_t>(s), &elements)) {
      invalid(std::string(what) + ": element count of shape " + list(dst.sizes) +
              " overflows 64 bits");
    }
  }
  p.elements = elements;

  // Gather the dimensions that matter, strides in bytes (no overflow: the span fits).
  std::vector<Dim> dims;
  const uint64_t e = dst.elem_size;
  for (size_t d = 0; d < dst.sizes.size(); ++d) {
    const auto size = static_cast<uint64_t>(dst.sizes[d]);
    if (size == 1) continue;
    if (dst.strides[d] == 0) {
      invalid(std::string(what) + ": dst dimension " + std::to_string(d) + " has size " +
              std::to_string(size) +
              " and stride 0, so several elements would be written to one address; "
              "give the destination distinct strides");
    }
    const auto& s = fill ? dst : src;
    dims.push_back(Dim{size, static_cast<uint64_t>(dst.strides[d]) * e,
                       static_cast<uint64_t>(s.strides[d]) * e});
  }
  if (dims.empty()) dims.push_back(Dim{1, e, e});  // a single element

  // Outermost first by the leading side's stride, so that its innermost loop runs along its
  // smallest stride; the copy is the same whichever order the loops run in.
  const bool by_src = order == LoopOrder::kSourceContiguous;
  std::stable_sort(dims.begin(), dims.end(), [by_src](const Dim& a, const Dim& b) {
    const uint64_t a1 = by_src ? a.src_stride : a.dst_stride;
    const uint64_t b1 = by_src ? b.src_stride : b.dst_stride;
    if (a1 != b1) return a1 > b1;
    return (by_src ? a.dst_stride : a.src_stride) > (by_src ? b.dst_stride : b.src_stride);
  });

  // Merge neighbours contiguous on both sides, from the inside out.
  std::vector<Dim> merged;
  for (const Dim& d : dims) {
    if (!merged.empty()) {
      Dim& outer = merged.back();
      uint64_t dst_run = 0, src_run = 0;  // bytes spanned by the inner dimension
      if (!__builtin_mul_overflow(d.dst_stride, d.size, &dst_run) &&
          !__builtin_mul_overflow(d.src_stride, d.size, &src_run) && outer.dst_stride == dst_run &&
          outer.src_stride == src_run) {
        outer = Dim{outer.size * d.size, d.dst_stride, d.src_stride};
        continue;
      }
    }
    merged.push_back(d);
  }

  // Choose which dimensions go into each descriptor: the innermost (best bursts) plus the
  // largest of the others; the rest are looped over here, one descriptor per index.
  const size_t n = merged.size();
  std::vector<bool> in_packet(n, true);
  uint64_t pieces = 1;
  if (n > static_cast<size_t>(kMaxCopyDims)) {
    std::vector<size_t> order(n - 1);
    for (size_t i = 0; i + 1 < n; ++i) order[i] = i;
    // Largest first; among equals prefer the inner one (keeps bursts long).
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (merged[a].size != merged[b].size) return merged[a].size > merged[b].size;
      return a > b;
    });
    for (size_t k = kMaxCopyDims - 1; k < order.size(); ++k) {
      in_packet[order[k]] = false;
      pieces *= merged[order[k]].size;  // <= elements, no overflow
    }
  }
  if (pieces > kMaxCopyPieces) {
    invalid(std::string(what) + " needs " + std::to_string(pieces) +
            " DMA descriptors (more than " + std::to_string(kMaxCopyPieces) +
            "): the layouts are too fragmented; make them more contiguous");
  }

  CopyPiece tmpl;
  std::vector<size_t> loops;
  for (size_t i = 0; i < n; ++i) {
    if (!in_packet[i]) {
      loops.push_back(i);
      continue;
    }
    const int k = tmpl.ndims++;
    tmpl.sizes[k] = merged[i].size;
    tmpl.dst_strides[k] = merged[i].dst_stride;
    tmpl.src_strides[k] = merged[i].src_stride;
  }
  tmpl.dst_offset = p.dst_span.lo;
  tmpl.src_offset = fill ? 0 : p.src_span.lo;
  if (fill) tmpl.src_strides = {};

  p.pieces.reserve(pieces);
  std::vector<uint64_t> idx(loops.size(), 0);
  for (uint64_t k = 0; k < pieces; ++k) {
    CopyPiece piece = tmpl;
    for (size_t j = 0; j < loops.size(); ++j) {
      piece.dst_offset += idx[j] * merged[loops[j]].dst_stride;
      if (!fill) piece.src_offset += idx[j] * merged[loops[j]].src_stride;
    }
    p.pieces.push_back(piece);
    // Odometer over the looped dimensions, innermost last.
    for (size_t j = loops.size(); j-- > 0;) {
      if (++idx[j] < merged[loops[j]].size) break;
      idx[j] = 0;
    }
  }
  return p;
}

}  // namespace

std::string Layout::to_string() const {
  return list(sizes) + " strides " + list(strides) + " offset " + std::to_string(offset) +
         " elem " + std::to_string(elem_size);
}

CopyPlan plan_copy(const Layout& dst, const Layout& src, LoopOrder order) {
  return plan(dst, src, false, order);
}

CopyPlan plan_fill(const Layout& dst) {
  return plan(dst, dst, true, LoopOrder::kDestinationContiguous);
}

}  // namespace mtia
