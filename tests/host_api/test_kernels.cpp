// Kernel modules and launches through the public API: the smoke kernel (out[i] = in[i] + 1
// over int32) on 1, 4 and 64 PEs against a CPU loop, argument checks against metadata, the
// device launch limits, faults confined to their stream, timing on/off and determinism.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include "device_helpers.h"

using namespace mtia;
using mtia::test::expect_error;
using mtia::test::file_bytes;

namespace {

// Runs the smoke kernel over n random int32 on `grid`; returns the output.
std::vector<int32_t> run_smoke(Device& dev, const KernelModule& m, Grid grid, uint32_t n,
                               const std::vector<int32_t>& in, Stream stream = {}) {
  DevicePtr din = dev.malloc(4ull * n);
  DevicePtr dout = dev.malloc(4ull * n);
  dev.copy(din, in.data(), 4ull * n, stream);
  dev.memset(dout, 0xcd, 4ull * n, stream);
  dev.launch(m.entry_kernel(), grid, {din, dout, n}, stream);
  std::vector<int32_t> out(n);
  dev.copy(out.data(), dout, 4ull * n, stream);
  dev.free(din);
  dev.free(dout);
  return out;
}

std::vector<int32_t> random_input(uint32_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(INT32_MIN, INT32_MAX);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> reference(const std::vector<int32_t>& in) {
  std::vector<int32_t> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    out[i] = static_cast<int32_t>(static_cast<uint32_t>(in[i]) + 1u);  // wraps like the SE
  }
  return out;
}

}  // namespace

TEST_CASE("the smoke module loads and runs on 1, 4 and 64 PEs", "[kernels][launch]") {
  Device dev = Device::open();
  KernelModule m = dev.load_module(MTIA_SMOKE_KERNEL_ELF);
  CHECK_FALSE(m.has_metadata());
  CHECK(m.kernel_names().empty());
  CHECK(m.image_bytes() == file_bytes(MTIA_SMOKE_KERNEL_ELF).size());
  expect_error(ErrorKind::kInvalidArgument, "entry_kernel()", [&] { m.kernel("smoke"); });
  for (Grid grid : {Grid{1, 1}, Grid{1, 4}, Grid{8, 8}}) {
    INFO("grid " << grid.rows << "x" << grid.cols);
    const uint32_t n = 70'001;  // not a multiple of 256 x PEs
    const auto in = random_input(n, grid.rows * 10 + grid.cols);
    CHECK(run_smoke(dev, m, grid, n, in) == reference(in));
  }
  // Loading from bytes works the same.
  const auto bytes = file_bytes(MTIA_SMOKE_KERNEL_ELF);
  KernelModule m2 = dev.load_module(bytes.data(), bytes.size());
  const auto in = random_input(1000, 3);
  CHECK(run_smoke(dev, m2, {2, 2}, 1000, in) == reference(in));
}

TEST_CASE("a module whose NOBITS sections point past the end of the file loads and runs",
          "[kernels][launch][load]") {
  // What `llvm-objcopy --strip-debug` leaves: a NOBITS section (the smoke module's .lstore,
  // which has no file bytes) with an offset beyond the shortened file.
  Device dev = Device::open(test::functional_options());
  std::vector<uint8_t> elf = file_bytes(MTIA_SMOKE_KERNEL_ELF);
  auto u64 = [&](uint64_t at) {
    uint64_t v = 0;
    std::memcpy(&v, elf.data() + at, 8);
    return v;
  };
  auto u16 = [&](uint64_t at) {
    uint16_t v = 0;
    std::memcpy(&v, elf.data() + at, 2);
    return v;
  };
  const uint64_t shoff = u64(40);
  int nobits = 0;
  for (uint16_t i = 0; i < u16(60); ++i) {
    const uint64_t sh = shoff + uint64_t{i} * u16(58);
    uint32_t type = 0;
    std::memcpy(&type, elf.data() + sh + 4, 4);
    if (type != 8 /* SHT_NOBITS */) continue;
    ++nobits;
    const uint64_t past_end = elf.size() + 4096;
    std::memcpy(elf.data() + sh + 24, &past_end, 8);  // sh_offset
  }
  REQUIRE(nobits == 1);
  KernelModule m = dev.load_module(elf.data(), elf.size());
  const auto in = random_input(5000, 21);
  CHECK(run_smoke(dev, m, {2, 2}, 5000, in) == reference(in));
}

TEST_CASE("launch results are identical with timing on and off, and deterministic",
          "[kernels][launch][timing]") {
  const auto in = random_input(50'000, 11);
  std::vector<int32_t> results[2];
  int64_t elapsed[2][2] = {};
  for (int timing = 0; timing < 2; ++timing) {
    DeviceOptions o;
    o.timing = timing == 1;
    Device dev = Device::open(o);
    KernelModule m = dev.load_module(MTIA_SMOKE_KERNEL_ELF);
    for (int run = 0; run < 2; ++run) {
      DevicePtr din = dev.malloc(4 * in.size());
      DevicePtr dout = dev.malloc(4 * in.size());
      dev.copy(din, in.data(), 4 * in.size());
      Event a = dev.create_event(), b = dev.create_event();
      dev.record(a);
      dev.launch(m.entry_kernel(), {4, 4}, {din, dout, int64_t(in.size())});
      dev.record(b);
      std::vector<int32_t> out(in.size());
      dev.copy(out.data(), dout, 4 * in.size());
      elapsed[timing][run] = dev.elapsed_ps(a, b);
      results[timing] = out;
      dev.free(din);
      dev.free(dout);
    }
  }
  CHECK(results[0] == reference(in));
  CHECK(results[1] == results[0]);
  CHECK(elapsed[0][0] == 0);
  CHECK(elapsed[0][1] == 0);
  CHECK(elapsed[1][0] > 0);
  CHECK(elapsed[1][0] == elapsed[1][1]);  // same work, same simulated time
}

TEST_CASE("launch limits and grid are checked with what was exceeded", "[kernels][launch]") {
  Device dev = Device::open(test::functional_options());
  const DeviceProperties& p = dev.properties();
  CHECK(p.max_kernel_args == 64);
  CHECK(p.max_kernel_buffers == 32);
  KernelModule m = dev.load_module(MTIA_SMOKE_KERNEL_ELF);
  std::vector<Arg> many(65, Arg(int64_t{0}));
  expect_error(ErrorKind::kInvalidArgument, "max_kernel_args = 64 by 1", [&] {
    dev.launch(m.entry_kernel(), {1, 1}, many);
  });
  // 33 allocations, each passed twice (the second time as an interior pointer, which is the
  // same buffer): 66 arguments would also break the argument limit, so pass 33 + 31.
  std::vector<DevicePtr> bufs;
  std::vector<Arg> ptrs;
  for (int i = 0; i < 33; ++i) {
    bufs.push_back(dev.malloc(64));
    ptrs.push_back(bufs.back());
  }
  for (int i = 0; i < 31; ++i) ptrs.push_back(bufs[i] + 8);
  REQUIRE(ptrs.size() == 64);
  expect_error(ErrorKind::kInvalidArgument,
               "touch 33 distinct buffers, exceeding the device limit max_kernel_buffers = 32 by 1",
               [&] {
                 dev.launch(m.entry_kernel(), {1, 1}, ptrs);
               });
  expect_error(ErrorKind::kInvalidArgument, "grid 9x1", [&] {
    dev.launch(m.entry_kernel(), {9, 1}, {});
  });
  expect_error(ErrorKind::kInvalidArgument, "grid 0x1", [&] {
    dev.launch(m.entry_kernel(), {0, 1}, {});
  });
  for (DevicePtr b : bufs) dev.free(b);
  expect_error(ErrorKind::kInvalidArgument, "cannot open kernel module",
               [&] { dev.load_module("/nonexistent/kernels.elf"); });
  const uint8_t junk[100] = {1, 2, 3};
  expect_error(ErrorKind::kInvalidArgument, "not a kernel module",
               [&] { dev.load_module(junk, sizeof junk); });
  test::check_device_works(dev);
}

#ifdef MTIA_KERNEL_LIBRARY_ELF
TEST_CASE("library kernels are found by name and their signatures are enforced",
          "[kernels][launch]") {
  Device dev = Device::open(test::functional_options());
  KernelModule lib = dev.load_module(MTIA_KERNEL_LIBRARY_ELF);
  REQUIRE(lib.has_metadata());
  const auto names = lib.kernel_names();
  REQUIRE_FALSE(names.empty());
  expect_error(ErrorKind::kInvalidArgument, "has no kernel 'no_such_kernel'; it has: " + names[0],
               [&] { lib.kernel("no_such_kernel"); });
  // The first kernel with at least one argument: one argument too few, then a wrong kind.
  const Kernel* k = nullptr;
  for (const auto& n : names) {
    if (!lib.kernel(n).params.empty()) {
      k = &lib.kernel(n);
      break;
    }
  }
  REQUIRE(k != nullptr);
  std::vector<Arg> args;
  for (const KernelParam& param : k->params) {
    args.push_back(param.kind == ArgKind::kPointer ? Arg(DevicePtr(0x1000)) : Arg(int64_t{1}));
  }
  std::vector<Arg> fewer(args.begin(), args.end() - 1);
  expect_error(ErrorKind::kInvalidArgument,
               "takes " + std::to_string(args.size()) + " arguments, " +
                   std::to_string(fewer.size()) + " given",
               [&] {
                 dev.launch(*k, {1, 1}, fewer);
               });
  std::vector<Arg> wrong = args;
  wrong[0] = k->params[0].kind == ArgKind::kPointer ? Arg(1.5) : Arg(DevicePtr(0x1000));
  expect_error(ErrorKind::kInvalidArgument, "argument 0 '" + k->params[0].name + "' is", [&] {
    dev.launch(*k, {1, 1}, wrong);
  });
}
#endif

TEST_CASE("a faulting launch fails its stream only; the device keeps working",
          "[kernels][launch][fault]") {
  Device dev = Device::open();
  KernelModule m = dev.load_module(MTIA_SMOKE_KERNEL_ELF);
  Stream bad = dev.create_stream();
  Stream good = dev.create_stream();
  REQUIRE(dev.hardware_queue(bad) != dev.hardware_queue(good));
  const uint32_t n = 4096;
  DevicePtr out = dev.malloc(4 * n);

  SECTION("a bad pointer argument") {
    dev.launch(m.entry_kernel(), {1, 4}, {DevicePtr(0xFFFF'0000'0000ull), out, n}, bad);
    const auto in = random_input(n, 5);
    CHECK(run_smoke(dev, m, {2, 2}, n, in, good) == reference(in));
    expect_error(ErrorKind::kDeviceFault,
                 "kernel '<elf entry>' on a 1x4 grid failed: PE 0 (row 0, col 0): unit fault at "
                 "pc 0x",
                 [&] { dev.synchronize(bad); });
  }
  SECTION("a corrupted image: an illegal instruction at the entry") {
    auto bytes = file_bytes(MTIA_SMOKE_KERNEL_ELF);
    // The file offset of the entry point, from the program headers.
    uint64_t entry = 0, phoff = 0, off = 0;
    uint16_t phnum = 0;
    std::memcpy(&entry, bytes.data() + 24, 8);
    std::memcpy(&phoff, bytes.data() + 32, 8);
    std::memcpy(&phnum, bytes.data() + 56, 2);
    for (uint16_t i = 0; i < phnum; ++i) {
      const uint8_t* ph = bytes.data() + phoff + 56 * i;
      uint32_t type;
      uint64_t p_off, vaddr, filesz;
      std::memcpy(&type, ph, 4);
      std::memcpy(&p_off, ph + 8, 8);
      std::memcpy(&vaddr, ph + 16, 8);
      std::memcpy(&filesz, ph + 32, 8);
      if (type == 1 && entry >= vaddr && entry < vaddr + filesz) off = p_off + (entry - vaddr);
    }
    REQUIRE(off != 0);
    const uint32_t illegal = 0xFFFF'FFFF;
    std::memcpy(bytes.data() + off, &illegal, 4);
    KernelModule broken = dev.load_module(bytes.data(), bytes.size());
    dev.launch(broken.entry_kernel(), {2, 2}, {out, out, n}, bad);
    const auto in = random_input(n, 6);
    CHECK(run_smoke(dev, m, {1, 1}, n, in, good) == reference(in));
    expect_error(ErrorKind::kDeviceFault, "PE 0 (row 0, col 0): illegal instruction at pc 0x10000",
                 [&] { dev.synchronize(bad); });
  }
  // The failed stream is usable again, and so is the device.
  const auto in = random_input(n, 7);
  CHECK(run_smoke(dev, m, {8, 8}, n, in, bad) == reference(in));
  test::check_device_works(dev, bad);
  dev.free(out);
}
