// The op table (op_table.def) as data, for Python and the docs.
#pragma once

#include <string>
#include <vector>

namespace mtia::torch_backend {

struct OpRow {
  std::string overload;  // the ATen overload, e.g. "sin.out"
  std::string family;    // the op family: python/csrc/ops_<family>.cpp
  std::string kind;      // "structured" or "op" (op_table.def)
};

struct OpFamily {
  std::string name;
  std::string kernels;  // the device kernels its ops run on
};

// Every row, in the table's order.
const std::vector<OpRow>& op_table();
// Every family, in the table's order.
const std::vector<OpFamily>& op_families();

}  // namespace mtia::torch_backend
