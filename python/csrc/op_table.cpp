#include "op_table.h"

namespace mtia::torch_backend {

namespace {

struct Table {
  std::vector<OpRow> rows;
  std::vector<OpFamily> families;
};

Table make_table() {
  Table t;
  std::string family;
#define MTIA_OPS_ALL
#define MTIA_FAMILY(name, kernels) \
  family = #name;                  \
  t.families.push_back({family, kernels});
#define MTIA_OP(overload, kind, kernel) t.rows.push_back({overload, family, #kind});
#include "op_table.def"
#undef MTIA_OP
#undef MTIA_FAMILY
#undef MTIA_OPS_ALL
  return t;
}

const Table& table() {
  static const Table t = make_table();
  return t;
}

}  // namespace

const std::vector<OpRow>& op_table() {
  return table().rows;
}
const std::vector<OpFamily>& op_families() {
  return table().families;
}

}  // namespace mtia::torch_backend
