// Kernel modules, as load_module and the PE model read them: the metadata parser, the ELF
// reader, the program the PEs load and the line table that reports take source lines from.
// Any bytes must be accepted or refused with a reason, and a module the host accepts must not
// make the PE model allocate beyond its windows.
#include <cstdint>
#include <span>

#include "fuzz_check.h"
#include "mtia/isa/pe/kernel_meta.h"
#include "mtia/isa/pe/pe_ops.h"
#include "mtia/sim/pe/elf.h"
#include "mtia/sim/pe/line_table.h"
#include "mtia/sim/pe/program.h"

namespace isa = mtia::isa;
namespace pe = mtia::sim::pe;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> file(data, size);
  const auto module = isa::parse_kernel_module(file);
  if (!module) FUZZ_CHECK(!module.error().reason.empty());

  const auto lines = pe::LineTable::from_elf(file);
  if (lines) {
    const pe::LineTable::Frame frames[2] = {{0x10000, 0x10008}, {0x10004, 0x10000}};
    (void)lines.value().annotate("at pc 0x10000, pc 0x10004 and pc 0x", frames);
  } else {
    FUZZ_CHECK(!lines.error().reason.empty());
  }

  const auto image = pe::parse_elf(file);
  if (!image) {
    FUZZ_CHECK(!image.error().reason.empty());
    return 0;
  }
  if (module) {
    // What the host accepted fits the PE's windows, so loading it allocates at most that.
    for (const pe::Segment& s : image.value().segments) {
      FUZZ_CHECK(s.mem_bytes <= MTIA_PE_IMAGE_MAX_BYTES || s.mem_bytes <= MTIA_PE_LS_MAX_BYTES);
    }
  }
  const auto program = pe::Program::create(image.value());
  if (!program) FUZZ_CHECK(!program.error().reason.empty());
  return 0;
}
