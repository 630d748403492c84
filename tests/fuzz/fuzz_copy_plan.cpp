// The copy planner against the nested-loop reference: two layouts of the same shape (sizes,
// strides, offsets and element size from the input). A plan must be refused with a reason or
// move exactly the bytes the reference moves; Layout arithmetic must not overflow.
#include <cstdint>
#include <set>
#include <vector>

#include "fuzz_check.h"
#include "mtia/copy_plan.h"
#include "mtia/error.h"
#include "reference.h"

namespace {

// Reads the input a byte at a time (zeros past its end).
struct Bytes {
  const uint8_t* p;
  size_t n;
  uint8_t next() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
};

// Whether two element indices of `l` land on the same bytes (a write order would matter).
bool overlaps(const mtia::Layout& l) {
  std::set<uint64_t> seen;
  std::vector<int64_t> idx(l.sizes.size(), 0);
  for (int64_t s : l.sizes) {
    if (s == 0) return false;
  }
  for (;;) {
    if (!seen.insert(mtia::test::element_byte(l, idx)).second) return true;
    size_t d = idx.size();
    while (d > 0) {
      --d;
      if (++idx[d] < l.sizes[d]) break;
      idx[d] = 0;
      if (d == 0) return false;
    }
    if (idx.empty()) return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in{data, size};
  const int rank = in.next() % 5;  // 0..4
  static constexpr size_t kElem[] = {1, 2, 4, 8};
  const size_t elem = kElem[in.next() % 4];
  mtia::Layout dst, src;
  dst.elem_size = src.elem_size = elem;
  for (int d = 0; d < rank; ++d) {
    const int64_t n = in.next() % 6;
    dst.sizes.push_back(n);
    src.sizes.push_back(n);
  }
  for (int d = 0; d < rank; ++d) dst.strides.push_back(in.next() % 40);
  for (int d = 0; d < rank; ++d) src.strides.push_back(in.next() % 40);
  dst.offset = in.next() % 16;
  src.offset = in.next() % 16;
  const auto order =
      in.next() % 2 ? mtia::LoopOrder::kSourceContiguous : mtia::LoopOrder::kDestinationContiguous;

  mtia::CopyPlan plan;
  try {
    plan = mtia::plan_copy(dst, src, order);
  } catch (const mtia::Error& e) {
    FUZZ_CHECK(e.kind() == mtia::ErrorKind::kInvalidArgument);
    return 0;
  }
  FUZZ_CHECK(static_cast<int64_t>(plan.elements) == dst.numel());
  if (plan.elements == 0 || overlaps(dst)) return 0;
  const uint64_t src_bytes = mtia::test::span_end(src);
  const uint64_t dst_bytes = mtia::test::span_end(dst);
  FUZZ_CHECK(plan.src_span.hi <= src_bytes && plan.dst_span.hi <= dst_bytes);
  std::vector<uint8_t> from(src_bytes);
  for (size_t i = 0; i < from.size(); ++i) from[i] = static_cast<uint8_t>(i * 131 + 7);
  std::vector<uint8_t> want(dst_bytes, 0xEE), got(dst_bytes, 0xEE);
  mtia::test::reference_copy(want.data(), dst, from.data(), src);
  mtia::test::execute_plan(plan, got.data(), from.data());
  FUZZ_CHECK(got == want);
  return 0;
}
