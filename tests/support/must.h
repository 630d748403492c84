// isa::Result in tests: must() unwraps a call expected to succeed (a failure fails the test
// case with its reason); failure() gives the Failure of a call expected to fail.
#pragma once

#include <catch2/catch.hpp>
#include <utility>

#include "mtia/isa/result.h"

namespace mtia::test {

template <typename T>
T must(mtia::isa::Result<T> r) {
  if (!r) FAIL("unexpected failure: " << r.error().reason);
  return std::move(r).value();
}

inline void must(const mtia::isa::Status& s) {
  if (!s) FAIL("unexpected failure: " << s.error().reason);
}

template <typename R>
mtia::isa::Failure failure(const R& r) {
  if (r.ok()) FAIL("expected a failure, but the call succeeded");
  return r.error();
}

}  // namespace mtia::test
