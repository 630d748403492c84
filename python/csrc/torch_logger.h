// The tensor layer's named logger ("torch"), behind plain functions.
//
// PyTorch's headers bring a newer {fmt} than the one Debian's spdlog is built against, so no
// file that includes a PyTorch header may include spdlog's. Messages are built by the caller
// (c10::str) and handed over as text; torch_logger.cpp, compiled without PyTorch, passes them to
// spdlog.
#pragma once

#include <string_view>

namespace mtia::torch_backend::log {

void debug(std::string_view message);
void warn(std::string_view message);
void error(std::string_view message);

}  // namespace mtia::torch_backend::log
