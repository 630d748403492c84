#include "sim_shared.h"

namespace mtia::sim::detail {

void add_stat(Json& module, const char* key, Json value, const char* unit,
              const char* description) {
  Json entry;
  entry["value"] = std::move(value);
  entry["unit"] = unit;
  entry["description"] = description;
  module[key] = std::move(entry);
}

void SimShared::sync_time() {
  now_ps.store(sc_core::sc_time_stamp().value(), std::memory_order_relaxed);
}

}  // namespace mtia::sim::detail
