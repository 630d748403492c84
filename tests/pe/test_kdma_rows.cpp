// The kernel library's fast DMA path for contiguous rows (kdma_rows and kdma_rows_keyed,
// kernels/lib/klib.h) must issue exactly the descriptor of its general builder (kdma), whether
// it builds it or reuses the one it cached: the kdma_check kernel issues every case of a grid
// of boxes through all three, and a recording port compares each triple.
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "core_harness.h"
#include "mtia/sim/pe/descriptors.h"

using namespace pe_test;
using mtia::sim::pe::RiscvCore;
using mtia::sim::pe::StopReason;
using mtia::sim::pe::UnitOp;
using mtia::sim::pe::UnitRequest;
using mtia::sim::pe::UnitResponse;

namespace {

// Records every DMA descriptor; issues nothing else and moves no data.
class RecordingPort : public mtia::sim::pe::UnitPort {
 public:
  std::vector<mtia_pe_dma_desc> dmas;

  UnitResponse issue(RiscvCore& core, const UnitRequest& r) override {
    if (r.op != UnitOp::kDma) return UnitResponse::fault("kdma_check issues DMAs only");
    auto d = mtia::sim::pe::read_descriptor<mtia_pe_dma_desc>(core, r.rs1);
    if (!d.ok()) return UnitResponse::fault(d.error().reason);
    dmas.push_back(d.value());
    return UnitResponse::done(dmas.size());
  }
};

std::string describe(const mtia_pe_dma_desc& d) {
  std::string s = "ndims " + std::to_string(d.ndims) + " elem " + std::to_string(d.elem_size);
  for (int i = 0; i < MTIA_PE_DMA_MAX_DIMS; ++i) {
    s += " [" + std::to_string(d.sizes[i]) + " " + std::to_string(d.src_strides[i]) + " " +
         std::to_string(d.dst_strides[i]) + "]";
  }
  return s;
}

}  // namespace

TEST_CASE("kdma_rows and kdma_rows_keyed build the same DMA descriptor as kdma", "[pe][kernel]") {
  auto elf = mtia::sim::pe::read_elf_file(MTIA_KDMA_CHECK_KERNEL_ELF);
  REQUIRE(elf.ok());
  auto program = program_of(elf.value());
  RecordingPort port;
  std::vector<uint8_t> ls(128 * 1024, 0);
  RiscvCore core(mtia::sim::pe::CoreConfig{}, ls, port);
  mtia::sim::pe::LaunchContext launch;
  launch.grid_rows = launch.grid_cols = 1;
  REQUIRE(core.start(program, launch));
  const auto r = core.run(100'000'000);
  INFO(core.fault().reason);
  REQUIRE(r.reason == StopReason::kExit);

  // 4 element sizes x 4 x 4 extents x 4 source x 2 destination row strides x 3 address pairs.
  const int64_t cases = 4 * 4 * 4 * 4 * 2 * 3;
  CHECK(core.exit_status() == cases);
  REQUIRE(port.dmas.size() == 3 * static_cast<size_t>(cases));
  int merged = 0, widened = 0;
  for (size_t i = 0; i < port.dmas.size(); i += 3) {
    const mtia_pe_dma_desc& general = port.dmas[i];
    const mtia_pe_dma_desc& rows = port.dmas[i + 1];
    const mtia_pe_dma_desc& keyed = port.dmas[i + 2];
    INFO("case " << i / 3 << ": kdma " << describe(general) << ", kdma_rows " << describe(rows)
                 << ", kdma_rows_keyed " << describe(keyed));
    REQUIRE(std::memcmp(&general, &rows, sizeof general) == 0);
    REQUIRE(std::memcmp(&general, &keyed, sizeof general) == 0);
    merged += general.ndims == 1;
    widened += general.elem_size == 8 && general.sizes[0] > 1;
  }
  // The grid reaches both of the fast path's shapes and its widening.
  CHECK(merged > 0);
  CHECK(widened > 0);
}
