// The registry of backends, filled by static registrars in the backend libraries.
#include "mtia/driver/backend.h"

#include <spdlog/fmt/fmt.h>

#include <map>
#include <mutex>

namespace mtia::driver {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, BackendFactory> factories;
};

// A function-local static: registrars in other libraries may run before this file's statics.
Registry& registry() {
  static Registry r;
  return r;
}

isa::Failure bad(std::string why) {
  return isa::reject(isa::ErrorCode::kInvalidArgument, std::move(why));
}

}  // namespace

isa::Status register_backend(const std::string& name, BackendFactory factory) {
  if (name.empty()) return bad("a backend needs a non-empty name");
  if (!factory) return bad(fmt::format("backend '{}' has no factory", name));
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  if (!r.factories.emplace(name, std::move(factory)).second) {
    return bad(fmt::format("backend '{}' is already registered", name));
  }
  return {};
}

isa::Result<std::unique_ptr<Backend>> create_backend(const std::string& name,
                                                     const BackendOptions& options) {
  BackendFactory factory;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    auto it = r.factories.find(name);
    if (it == r.factories.end()) {
      std::string known;
      for (const auto& [n, f] : r.factories) known += (known.empty() ? "" : ", ") + n;
      return bad(fmt::format(
          "unknown device backend '{}'; known backends: {}{}", name, known.empty() ? "none" : known,
          known.empty() ? " (link the executable with mtia_backend_inprocess)" : ""));
    }
    factory = it->second;
  }
  // Outside the lock: building a device can take a while and may log.
  return factory(options);
}

std::vector<std::string> backend_names() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [n, f] : r.factories) names.push_back(n);
  return names;
}

}  // namespace mtia::driver
