#include "log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>

namespace mtia::torch_backend::log {

namespace {

spdlog::logger& logger() {
  static const std::shared_ptr<spdlog::logger> log = [] {
    auto l = spdlog::get("torch");
    if (!l) l = spdlog::stderr_color_mt("torch");
    return l;
  }();
  return *log;
}

}  // namespace

void debug(std::string_view message) {
  logger().debug("{}", message);
}
void warn(std::string_view message) {
  logger().warn("{}", message);
}
void error(std::string_view message) {
  logger().error("{}", message);
}

}  // namespace mtia::torch_backend::log
