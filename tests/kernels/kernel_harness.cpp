#include "kernel_harness.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "mtia/sim/pe/descriptors.h"
#include "mtia/sim/pe/elf.h"
#include "mtia/sim/pe/riscv_core.h"
#include "mtia/sim/pe/units.h"

namespace kt {

using mtia::sim::pe::FunctionalUnits;
using mtia::sim::pe::Program;
using mtia::sim::pe::RiscvCore;
using mtia::sim::pe::StopReason;
using mtia::sim::pe::UnitOp;
using mtia::sim::pe::UnitRequest;
using mtia::sim::pe::UnitResponse;

// ---- Module ---------------------------------------------------------------------------------

namespace {

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open kernel module " + path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::shared_ptr<const Program> make_program(mtia::sim::pe::ElfImage image, uint64_t entry) {
  image.entry = entry;
  auto p = Program::create(image);
  if (!p.ok()) throw std::runtime_error("kernel image rejected: " + p.error().reason);
  return p.value();
}

}  // namespace

Module::Module(const std::string& path) {
  const std::vector<uint8_t> file = read_file(path);
  auto info = mtia::isa::parse_kernel_module(file);
  if (!info.ok()) throw std::runtime_error(path + ": " + info.error().reason);
  info_ = std::move(info.value());
  auto elf = mtia::sim::pe::parse_elf(file);
  if (!elf.ok()) throw std::runtime_error(path + ": " + elf.error().reason);
  for (const auto& k : info_.kernels) programs_.push_back(make_program(elf.value(), k.entry));
  elf_entry_ = make_program(elf.value(), elf.value().entry);
}

const Module& Module::library() {
  static const Module m(MTIA_KERNELS_ELF);
  return m;
}

const mtia::isa::KernelInfo& Module::kernel(std::string_view name) const {
  if (const auto* k = info_.find(name)) return *k;
  throw std::out_of_range(fmt::format("the module has no kernel '{}'", name));
}

std::shared_ptr<const Program> Module::program(std::string_view name) const {
  const auto& k = kernel(name);
  return programs_[static_cast<size_t>(&k - info_.kernels.data())];
}

// ---- LaunchResult ---------------------------------------------------------------------------

bool LaunchResult::ok() const {
  return error.empty() && status() == 0;
}

int64_t LaunchResult::status() const {
  if (pes.empty() || !error.empty()) return -1;
  for (const PeResult& p : pes) {
    if (!p.exited || p.exit_status != pes[0].exit_status) return -1;
  }
  return pes[0].exit_status;
}

std::string LaunchResult::describe() const {
  if (!error.empty()) return error;
  for (size_t i = 0; i < pes.size(); ++i) {
    if (pes[i].faulted) return fmt::format("PE {} faulted: {}", i, pes[i].fault);
    if (pes[i].exited && pes[i].exit_status != 0) {
      return fmt::format("PE {} exited with status {}", i, pes[i].exit_status);
    }
    if (!pes[i].exited) return fmt::format("PE {} did not finish", i);
  }
  return "ok";
}

// ---- The UnitPort -----------------------------------------------------------------------------

namespace {

// One PE: its local store, units and the bookkeeping of its operations.
struct Pe {
  std::vector<uint8_t> ls;
  std::unique_ptr<FunctionalUnits> units;
  std::unique_ptr<RiscvCore> core;
  uint64_t issued = 0;                        // tags 1..issued have been handed out
  std::set<uint64_t> dma_in_flight;           // DMA tags not yet waited for
  std::map<uint64_t, bool> matmul_in_flight;  // matmul tags not yet waited for: overlapped?
  bool at_barrier = false;
};

class TestPort : public mtia::sim::pe::UnitPort {
  // A matmul leaves flight when its own tag is waited for (or at pe.waitall: all of them).
  void settle_matmuls(Pe& pe, uint64_t tag, bool all) {
    for (auto it = pe.matmul_in_flight.begin(); it != pe.matmul_in_flight.end();) {
      if (!all && it->first != tag) {
        ++it;
        continue;
      }
      stats_.matmul_overlapping_dma += it->second ? 1 : 0;
      it = pe.matmul_in_flight.erase(it);
    }
  }

 public:
  TestPort(std::vector<uint8_t>& dram, std::vector<Pe>& pes, UnitStats& stats)
      : dram_(dram), pes_(pes), stats_(stats) {}

  UnitResponse issue(RiscvCore& core, const UnitRequest& r) override {
    Pe& pe = pes_[core.pe_id()];
    switch (r.op) {
      case UnitOp::kDma: {
        auto d = mtia::sim::pe::read_descriptor<mtia_pe_dma_desc>(core, r.rs1);
        if (!d.ok()) return UnitResponse::fault("dma.start rejected: " + d.error().reason);
        if (auto why = dma(core, d.value()); !why.empty()) return UnitResponse::fault(why);
        ++stats_.dma;
        pe.dma_in_flight.insert(pe.issued + 1);
        for (auto& [tag, overlapped] : pe.matmul_in_flight) overlapped = true;
        return UnitResponse::done(++pe.issued);
      }
      case UnitOp::kMatmul:
      case UnitOp::kEltwise:
      case UnitOp::kReduce:
      case UnitOp::kLayout: {
        auto outcome = pe.units->execute(core, r);
        if (!outcome.ok()) {
          return UnitResponse::fault(
              fmt::format("{} rejected: {}", unit_op_name(r.op), outcome.error().reason));
        }
        if (r.op == UnitOp::kMatmul) {
          ++stats_.matmul;
          pe.matmul_in_flight[pe.issued + 1] = !pe.dma_in_flight.empty();
          mtia_pe_matmul_desc d;
          if (core.read_memory(r.rs1, {reinterpret_cast<uint8_t*>(&d), sizeof d})) {
            stats_.matmul_trans_a += (d.hdr.flags & MTIA_PE_MM_TRANS_A) != 0;
            stats_.matmul_trans_b += (d.hdr.flags & MTIA_PE_MM_TRANS_B) != 0;
          }
        }
        stats_.eltwise += r.op == UnitOp::kEltwise;
        stats_.reduce += r.op == UnitOp::kReduce;
        stats_.layout += r.op == UnitOp::kLayout;
        return UnitResponse::done(++pe.issued);
      }
      case UnitOp::kWait:
        if (r.rs1 > pe.issued) {
          return UnitResponse::fault(
              fmt::format("pe.wait on tag {}, which was never issued (last {})", r.rs1, pe.issued));
        }
        pe.dma_in_flight.erase(r.rs1);
        settle_matmuls(pe, r.rs1, false);
        return UnitResponse::done(0);
      case UnitOp::kWaitAll:
        pe.dma_in_flight.clear();
        settle_matmuls(pe, 0, true);
        return UnitResponse::done(0);
      case UnitOp::kPoll:
        if (r.rs1 > pe.issued) {
          return UnitResponse::fault(fmt::format("pe.poll on tag {}, never issued", r.rs1));
        }
        return UnitResponse::done(1);
      case UnitOp::kBarrier:
        ++stats_.barriers;
        pe.at_barrier = true;
        return UnitResponse::stall();
      default:
        return UnitResponse::fault("unknown unit instruction");
    }
  }

 private:
  // The bytes of one side of a copy: the DRAM for device addresses, the local store else.
  // Empty when the region is outside it.
  std::span<uint8_t> side(RiscvCore& core, uint8_t space, uint64_t addr, uint64_t span) {
    if (space == MTIA_PE_SPACE_DEVICE) {
      if (addr > dram_.size() || span > dram_.size() - addr) return {};
      return {dram_.data() + addr, span};
    }
    auto off = core.local_offset(addr, span);
    if (!off) return {};
    return core.local_store().subspan(*off, span);
  }

  std::string dma(RiscvCore& core, const mtia_pe_dma_desc& d) {
    const unsigned es = d.elem_size;
    const int nd = d.ndims;
    uint64_t src_span = es, dst_span = es;
    for (int i = 0; i < nd; ++i) {
      src_span += (d.sizes[i] - 1) * d.src_strides[i];
      dst_span += (d.sizes[i] - 1) * d.dst_strides[i];
    }
    auto src = side(core, d.src_space, d.src, src_span);
    auto dst = side(core, d.dst_space, d.dst, dst_span);
    if (src.empty() || dst.empty()) {
      return fmt::format(
          "dma.start: [{:#x}, +{}) -> [{:#x}, +{}) is outside the test DRAM ({} "
          "bytes) or the local store",
          d.src, src_span, d.dst, dst_span, dram_.size());
    }
    // Innermost runs that are contiguous on both sides move with one memmove.
    const bool runs = d.src_strides[nd - 1] == es && d.dst_strides[nd - 1] == es;
    const uint64_t inner = runs ? d.sizes[nd - 1] : 1;
    const int outer_dims = runs ? nd - 1 : nd;
    uint64_t idx[MTIA_PE_DMA_MAX_DIMS] = {};
    for (;;) {
      uint64_t so = 0, dof = 0;
      for (int i = 0; i < outer_dims; ++i) {
        so += idx[i] * d.src_strides[i];
        dof += idx[i] * d.dst_strides[i];
      }
      std::memmove(dst.data() + dof, src.data() + so, inner * es);
      int i = outer_dims - 1;
      for (; i >= 0; --i) {
        if (++idx[i] < d.sizes[i]) break;
        idx[i] = 0;
      }
      if (i < 0) break;
    }
    return {};
  }

  std::vector<uint8_t>& dram_;
  std::vector<Pe>& pes_;
  UnitStats& stats_;
};

}  // namespace

// ---- Device ---------------------------------------------------------------------------------

uint64_t Device::alloc(uint64_t bytes, uint64_t align) {
  const uint64_t at = (next_ + align - 1) / align * align;
  if (at + bytes > dram_.size()) {
    throw std::runtime_error(fmt::format("test DRAM exhausted: {} bytes at {:#x}", bytes, at));
  }
  next_ = at + bytes;
  std::fill(dram_.begin() + static_cast<ptrdiff_t>(at),
            dram_.begin() + static_cast<ptrdiff_t>(at + bytes), 0xA5);
  return at;
}

void Device::write(uint64_t addr, const void* src, uint64_t n) {
  if (addr + n > dram_.size()) throw std::out_of_range("write outside the test DRAM");
  std::memcpy(dram_.data() + addr, src, n);
}

void Device::read(uint64_t addr, void* dst, uint64_t n) const {
  if (addr + n > dram_.size()) throw std::out_of_range("read outside the test DRAM");
  std::memcpy(dst, dram_.data() + addr, n);
}

LaunchResult Device::launch(const Module& module, std::string_view kernel,
                            const std::vector<Arg>& args, const LaunchConfig& config) {
  const auto& info = module.kernel(kernel);
  if (args.size() != info.args.size()) {
    throw std::invalid_argument(fmt::format("{} takes {} arguments, {} given", info.describe(),
                                            info.args.size(), args.size()));
  }
  std::vector<uint8_t> block(args.size() * 8);
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].kind != info.args[i].kind) {
      throw std::invalid_argument(
          fmt::format("{}: argument {} ({}) must be {}, got {}", info.name, i, info.args[i].name,
                      kernel_arg_kind_name(info.args[i].kind), kernel_arg_kind_name(args[i].kind)));
    }
    std::memcpy(block.data() + 8 * i, &args[i].bits, 8);
  }
  return run(module.program(kernel), block, config);
}

LaunchResult Device::run(std::shared_ptr<const Program> program,
                         const std::vector<uint8_t>& arg_block, const LaunchConfig& config) {
  const uint32_t n = config.grid_rows * config.grid_cols;
  LaunchResult result;
  result.pes.resize(n);
  std::vector<Pe> pes(n);
  TestPort port(dram_, pes, result.stats);
  for (uint32_t p = 0; p < n; ++p) {
    Pe& pe = pes[p];
    pe.ls.assign(config.ls_bytes, 0x5A);  // stale contents: kernels may not rely on zeroes
    pe.units = std::make_unique<FunctionalUnits>(pe.ls);
    pe.core = std::make_unique<RiscvCore>(mtia::sim::pe::CoreConfig{}, pe.ls, port);
    mtia::sim::pe::LaunchContext launch;
    launch.grid_rows = config.grid_rows;
    launch.grid_cols = config.grid_cols;
    launch.pe_row = p / config.grid_cols;
    launch.pe_col = p % config.grid_cols;
    launch.args = arg_block;
    launch.watchdog_cycles = config.watchdog_cycles;
    if (auto bad = pe.core->start(program, launch); !bad) {
      result.error = "launch rejected: " + bad.error().reason;
      return result;
    }
  }
  // Round-robin in large batches; a PE only stops early at a barrier, an exit or a fault.
  constexpr uint64_t kBatch = 1'000'000;
  for (;;) {
    bool progress = false, all_done = true;
    for (uint32_t p = 0; p < n; ++p) {
      Pe& pe = pes[p];
      RiscvCore& c = *pe.core;
      if (c.state() == RiscvCore::State::kExited) continue;
      all_done = false;
      if (c.state() != RiscvCore::State::kReady) continue;
      const auto r = c.run(kBatch);
      result.stats.instructions += r.instructions;
      progress = true;
      if (r.reason == StopReason::kFault) {
        result.pes[p].faulted = true;
        result.pes[p].fault = c.fault().reason;
        return result;
      }
      if (r.reason == StopReason::kExit) {
        result.pes[p].exited = true;
        result.pes[p].exit_status = c.exit_status();
        result.stats.max_core_cycles = std::max(result.stats.max_core_cycles, c.cycles());
      }
    }
    if (all_done) break;
    if (!progress) {
      // Every live PE waits at a barrier: release them if all PEs are there.
      const bool all_waiting =
          std::all_of(pes.begin(), pes.end(), [](const Pe& pe) { return pe.at_barrier; });
      if (!all_waiting) {
        result.error = "barrier deadlock: some PEs exited while others wait at a barrier";
        return result;
      }
      for (Pe& pe : pes) {
        pe.at_barrier = false;
        pe.core->resume(0, 0);
      }
    }
  }
  return result;
}

}  // namespace kt
