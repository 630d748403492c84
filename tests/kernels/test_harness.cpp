// The test harness itself: the clang-built smoke kernel (a plain image with crt0, not a module)
// on 1, 4 and 64 PEs, through the harness's DMA, SE and barrier handling.
#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>

#include "mtia/sim/pe/elf.h"
#include "ref.h"

extern "C" unsigned long kernel_meta_c99_record_bytes(void);

using namespace kt;

TEST_CASE("the metadata record has the same layout in C99 and C++", "[kernels][harness]") {
  CHECK(kernel_meta_c99_record_bytes() == sizeof(mtia_kernel_meta));
}

TEST_CASE("the harness runs a barrier-using kernel on 1, 4 and 64 PEs", "[kernels][harness]") {
  auto elf = mtia::sim::pe::read_elf_file(MTIA_SMOKE_KERNEL_ELF);
  REQUIRE(elf.ok());
  auto program = mtia::sim::pe::Program::create(elf.value());
  REQUIRE(program.ok());
  for (uint32_t pes : {1u, 4u, 64u}) {
    Device dev;
    const uint32_t n = 20000;  // 79 chunks of 256: uneven over the PEs
    Tensor in = make_tensor(dev, kI32, {1, 1, 1, n});
    Tensor out = make_tensor(dev, kI32, {1, 1, 1, n});
    std::mt19937 rng(pes);
    randomize(dev, in, rng);
    std::vector<uint8_t> args(24, 0);
    std::memcpy(args.data(), &in.addr, 8);
    std::memcpy(args.data() + 8, &out.addr, 8);
    std::memcpy(args.data() + 16, &n, 4);
    auto r = dev.run(program.value(), args, grid(pes));
    INFO(r.describe());
    REQUIRE(r.ok());
    CHECK(r.stats.barriers == pes);  // every PE reached the barrier and was released
    CHECK(r.stats.eltwise == (n + 255) / 256);
    out.download(dev);
    for (uint32_t i = 0; i < n; ++i) REQUIRE(out.at({0, 0, 0, i}) == in.at({0, 0, 0, i}) + 1);
  }
}

TEST_CASE("the harness reports a kernel's fault with the PE and reason", "[kernels][harness]") {
  auto elf = mtia::sim::pe::read_elf_file(MTIA_SMOKE_KERNEL_ELF);
  REQUIRE(elf.ok());
  auto program = mtia::sim::pe::Program::create(elf.value());
  REQUIRE(program.ok());
  Device dev;
  // An input beyond the test DRAM: the first DMA faults.
  std::vector<uint8_t> args(24, 0);
  const uint64_t in = 1ull << 40, out = 4096;
  const uint32_t n = 100;
  std::memcpy(args.data(), &in, 8);
  std::memcpy(args.data() + 8, &out, 8);
  std::memcpy(args.data() + 16, &n, 4);
  auto r = dev.run(program.value(), args, grid(4));
  CHECK_FALSE(r.ok());
  CHECK_THAT(r.describe(),
             Catch::Contains("PE 0 faulted") && Catch::Contains("outside the test DRAM"));
}
