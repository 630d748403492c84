#include "torch_logger.h"

#include <memory>

#include "mtia/log/logger.h"

namespace mtia::torch_backend::log {

namespace {

spdlog::logger& logger() {
  static const std::shared_ptr<spdlog::logger> log = ::mtia::log::get("torch");
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
