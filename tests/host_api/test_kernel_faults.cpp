// Kernel faults of every kind, through the public API on the emulated device: an illegal
// instruction, a misaligned access, an out-of-range access, units given bad operands (a DPE
// tile outside the local store, a DMA outside device memory), a kernel past the watchdog, and
// kernels that return a non-zero status (a library kernel refusing a dtype pair). Each time the
// error is thrown by that stream's synchronize() with a message that names the kernel, the PE
// (index, row and column), the pc and the reason; another stream's work queued before and after
// the fault completes correctly; and the device, the failed stream included, keeps working.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "device_helpers.h"
#include "mtia/isa/pe/kernel_meta.h"
#include "mtia/isa/pe/pe_ops.h"

using namespace mtia;
using mtia::test::expect_error;
using mtia::test::file_bytes;
using mtia::test::hex;

namespace {

// The value of symbol `name` in the ELF64 file's symbol table (.symtab).
uint64_t symbol_address(const std::vector<uint8_t>& elf, const std::string& name) {
  const std::vector<test::ElfSection> sections = test::elf_sections(elf);
  for (const test::ElfSection& t : sections) {
    if (t.type != 2) continue;  // SHT_SYMTAB
    REQUIRE(t.link < sections.size());
    const uint64_t strings = sections[t.link].offset;
    for (uint64_t s = 0; t.entsize != 0 && s < t.size / t.entsize; ++s) {
      const auto str = test::elf_read<uint32_t>(elf, t.offset + s * t.entsize);
      const auto value = test::elf_read<uint64_t>(elf, t.offset + s * t.entsize + 8);
      REQUIRE(strings + str < elf.size());
      if (name == reinterpret_cast<const char*>(elf.data() + strings + str)) return value;
    }
  }
  FAIL("the ELF file has no symbol " << name);
  return 0;
}

// Work for the other stream: the smoke kernel (out[i] = in[i] + 1 over int32) on 2x2 PEs.
struct SmokeJob {
  DevicePtr in, out;
  std::vector<int32_t> data;
};

SmokeJob queue_smoke(Device& dev, const KernelModule& smoke, Stream stream, uint32_t seed) {
  SmokeJob job;
  std::mt19937 rng(seed);
  job.data.resize(5000);
  for (auto& x : job.data) x = static_cast<int32_t>(rng());
  const uint64_t bytes = 4 * job.data.size();
  job.in = dev.malloc(bytes);
  job.out = dev.malloc(bytes);
  dev.copy_async(job.in, job.data.data(), bytes, stream);  // pageable: staged at once
  dev.memset_async(job.out, 0xcd, bytes, stream);
  dev.launch(smoke.entry_kernel(), {2, 2}, {job.in, job.out, int64_t(job.data.size())}, stream);
  return job;
}

void check_smoke(Device& dev, const SmokeJob& job, Stream stream) {
  std::vector<int32_t> got(job.data.size());
  dev.copy(got.data(), job.out, 4 * got.size(), stream);
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    bad += got[i] != static_cast<int32_t>(static_cast<uint32_t>(job.data[i]) + 1u);
  }
  CHECK(bad == 0);
  dev.free(job.in);
  dev.free(job.out);
}

// A device with the fault module and the smoke kernel loaded, and two streams on different
// hardware queues.
struct Rig {
  Device dev = Device::open();
  std::vector<uint8_t> fault_elf = file_bytes(MTIA_FAULT_KERNELS_ELF);
  KernelModule faults = dev.load_module(fault_elf.data(), fault_elf.size());
  KernelModule smoke = dev.load_module(MTIA_SMOKE_KERNEL_ELF);
  Stream bad = dev.create_stream();
  Stream good = dev.create_stream();

  Rig() { REQUIRE(dev.hardware_queue(bad) != dev.hardware_queue(good)); }

  // Runs `fail` on the bad stream between two smoke jobs on the good one; the bad stream's
  // synchronize() must throw kDeviceFault with every piece of `expected` in its message.
  void check_contained(const std::function<void()>& fail,
                       const std::vector<std::string>& expected) {
    const SmokeJob before = queue_smoke(dev, smoke, good, 1);
    fail();
    const SmokeJob after = queue_smoke(dev, smoke, good, 2);
    std::string message;
    try {
      dev.synchronize(bad);
      FAIL("the faulting launch did not fail its stream");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kDeviceFault);
      message = e.what();
    }
    INFO("message: " << message);
    for (const std::string& piece : expected) CHECK_THAT(message, Catch::Contains(piece));
    dev.synchronize(good);  // no error here: the fault was the other stream's
    check_smoke(dev, before, good);
    check_smoke(dev, after, good);
    // The failed stream runs work again, and so does the device.
    const SmokeJob again = queue_smoke(dev, smoke, bad, 3);
    dev.synchronize(bad);
    check_smoke(dev, again, bad);
    test::check_device_works(dev, bad);
  }
};

// A fault kernel of tests/host_api/kernels/faults.c: the PE that faults, the routine whose
// first instruction faults, and what the reason must say.
struct FaultCase {
  std::string kernel;
  bool takes_addr = false;
  uint64_t addr = 0;  // the second argument, for kernels that take one
  std::string routine;
  std::string reason;
  uint64_t watchdog_cycles = 0;  // 0: the device's default
};

}  // namespace

TEST_CASE("every kind of PE fault fails its stream with kernel, PE, pc and reason",
          "[kernels][launch][fault]") {
  const FaultCase c = GENERATE(
      FaultCase{"illegal_instruction", false, 0, "fault_illegal", "illegal instruction at pc ", 0},
      FaultCase{"misaligned_load", false, 0, "fault_load", "misaligned access at pc ", 0},
      // 0x4000_0000: between the argument window and the local store, unmapped.
      FaultCase{"out_of_range_store", true, 0x4000'0000, "fault_store", "access fault at pc ", 0},
      FaultCase{"dpe_outside_local_store", false, 0, "fault_matmul", "unit fault at pc ", 0},
      // 2^50: far past the device's address map.
      FaultCase{"dma_outside_device_memory", true, uint64_t{1} << 50, "fault_dma",
                "unit fault at pc ", 0},
      FaultCase{"spin_forever", false, 0, "fault_spin", "watchdog at pc ", 50'000});
  INFO("kernel " << c.kernel);
  Rig rig;
  const uint64_t pc = symbol_address(rig.fault_elf, c.routine);
  const Kernel& k = rig.faults.kernel(c.kernel);
  const int64_t pe = 11;  // row 1, col 3 of an 8x8 grid
  std::vector<Arg> args = {pe};
  if (c.takes_addr) args.push_back(static_cast<int64_t>(c.addr));
  rig.check_contained(
      [&] {
        rig.dev.launch(k, {8, 8}, args, rig.bad, c.watchdog_cycles);
      },
      {"kernel '" + c.kernel + "' on a 8x8 grid failed: PE 11 (row 1, col 3): ",
       c.reason + hex(pc)});
}

TEST_CASE("a fault reason names the PE of a small grid too, and the watchdog's limit",
          "[kernels][launch][fault]") {
  Rig rig;
  const uint64_t pc = symbol_address(rig.fault_elf, "fault_spin");
  rig.check_contained(
      [&] {
        rig.dev.launch(rig.faults.kernel("spin_forever"), {1, 1}, {int64_t{0}}, rig.bad, 20'000);
      },
      {"kernel 'spin_forever' on a 1x1 grid failed: PE 0 (row 0, col 0): watchdog at pc " + hex(pc),
       "watchdog limit of 20000 cycles"});
}

TEST_CASE("a kernel's non-zero exit status is named in the error", "[kernels][launch][fault]") {
  Rig rig;
  const Kernel& exit_with = rig.faults.kernel("exit_with");
  // The trampoline calls the kernel (auipc + jalr), then ECALLs with its status.
  const std::string ecall_pc = hex(exit_with.entry + 8);
  SECTION("a status of the library ABI") {
    rig.check_contained(
        [&] {
          rig.dev.launch(exit_with, {2, 4}, {int64_t{6}, int64_t{MTIA_KSTATUS_BAD_SHAPE}}, rig.bad);
        },
        {"kernel 'exit_with' on a 2x4 grid failed: PE 6 (row 1, col 2) returned status 4 (bad "
         "shape: ",
         "at pc " + ecall_pc});
  }
  SECTION("a status of the kernel's own") {
    rig.check_contained(
        [&] {
          rig.dev.launch(exit_with, {1, 1}, {int64_t{0}, int64_t{42}}, rig.bad);
        },
        {"kernel 'exit_with' on a 1x1 grid failed: PE 0 (row 0, col 0) returned status 42 (not "
         "a kernel library status) at pc " +
         ecall_pc});
  }
}

#ifdef MTIA_KERNEL_LIBRARY_ELF
TEST_CASE("a library kernel refusing its arguments fails with the status by name",
          "[kernels][launch][fault]") {
  Rig rig;
  KernelModule lib = rig.dev.load_module(MTIA_KERNEL_LIBRARY_ELF);
  const Kernel& matmul = lib.kernel("matmul");
  DevicePtr a = rig.dev.malloc(64), c = rig.dev.malloc(64);
  rig.dev.memset(c, 0x5a, 64);
  // int8 inputs into an fp32 output: not a pair matmul takes (int8 gives int32).
  rig.check_contained(
      [&] {
        rig.dev.launch(matmul, {8, 8},
                       {c, a, a, Arg::dtype(MTIA_PE_DT_INT8), Arg::dtype(MTIA_PE_DT_FP32),
                        int64_t{4}, int64_t{4}, int64_t{4}, int64_t{4}, int64_t{1}, int64_t{4},
                        int64_t{1}, int64_t{4}, int64_t{1}},
                       rig.bad);
      },
      {"kernel 'matmul' on a 8x8 grid failed: PE 0 (row 0, col 0) returned status 2 (bad dtype: "
       "a dtype or dtype pair the kernel does not take) at pc " +
       hex(matmul.entry + 8)});
  // A status means nothing was written.
  std::vector<uint8_t> out(64);
  rig.dev.copy(out.data(), c, out.size());
  CHECK(out == std::vector<uint8_t>(64, 0x5a));
  rig.dev.free(a);
  rig.dev.free(c);
}
#endif

TEST_CASE("a rejected kernel image reaches the host with the loader's reason",
          "[kernels][launch][fault]") {
  Rig rig;
  // The module claiming another machine (x86-64): the host's metadata check passes, the
  // device's loader refuses it.
  std::vector<uint8_t> broken = rig.fault_elf;
  const uint16_t x86_64 = 62;
  std::memcpy(broken.data() + 18, &x86_64, 2);
  KernelModule m = rig.dev.load_module(broken.data(), broken.size());
  rig.check_contained(
      [&] {
        rig.dev.launch(m.kernel("illegal_instruction"), {1, 1}, {int64_t{0}}, rig.bad);
      },
      {"kernel 'illegal_instruction': the device rejected the image at " + hex(m.device_address()),
       "e_machine is 62, not EM_RISCV"});
}
