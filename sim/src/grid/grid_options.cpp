#include "mtia/sim/grid_options.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "mtia/settings/settings.h"
#include "sim_loggers.h"

namespace mtia::sim {
namespace {

constexpr uint64_t kMaxUnitThreads = 256;
constexpr uint64_t kMaxInlineWorkNs = 1'000'000'000;

// A whole number from the environment variable `name` in [0, max], or `fallback` when it is
// unset (or not such a number, with a warning).
uint64_t env_number(const char* name, uint64_t max, uint64_t fallback) {
  const std::optional<std::string> text = settings::read(name);
  if (!text) return fallback;
  const char* env = text->c_str();
  char* end = nullptr;
  const unsigned long long n = std::strtoull(env, &end, 10);
  if (end != nullptr && *end == 0 && *env != '-' && n <= max) return n;
  detail::logger("sim.pe")->warn("{}={} is not a whole number in 0..{}; ignored", name, env, max);
  return fallback;
}

// One host core stays with the simulator thread.
uint32_t default_unit_threads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return cores > 1 ? std::min(cores - 1, kDefaultMaxUnitThreads) : 0;
}

}  // namespace

isa::Result<PeGridHostSettings> resolve(const PeGridHostOptions& o) {
  if (o.unit_threads && *o.unit_threads > kMaxUnitThreads) {
    return isa::reject(isa::ErrorCode::kInvalidArgument,
                       fmt::format("unit_threads is {}; must be 0..{} host threads",
                                   *o.unit_threads, kMaxUnitThreads));
  }
  if (o.inline_work_ns && *o.inline_work_ns > kMaxInlineWorkNs) {
    return isa::reject(
        isa::ErrorCode::kInvalidArgument,
        fmt::format("inline_work_ns is {}; must be 0..{} ns", *o.inline_work_ns, kMaxInlineWorkNs));
  }
  PeGridHostSettings s;
  s.unit_threads = o.unit_threads
                       ? *o.unit_threads
                       : static_cast<uint32_t>(env_number("MTIA_EMU_UNIT_THREADS", kMaxUnitThreads,
                                                          default_unit_threads()));
  s.inline_work_ns = o.inline_work_ns
                         ? *o.inline_work_ns
                         : env_number("MTIA_EMU_INLINE_WORK_NS", kMaxInlineWorkNs, 5'000);
  s.lazy_loads = o.lazy_loads ? *o.lazy_loads : env_number("MTIA_EMU_LAZY_LOADS", 1, 1) != 0;
  return s;
}

}  // namespace mtia::sim
