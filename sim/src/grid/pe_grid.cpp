#include "pe_grid.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <span>
#include <vector>

#include "mtia/host/wait.h"
#include "mtia/isa/address_map.h"
#include "mtia/sim/pe/descriptors.h"
#include "mtia/sim/pe/elf.h"
#include "mtia/sim/pe/unit_workers.h"
#include "processing_element.h"
#include "sim_loggers.h"
#include "sim_shared.h"

namespace mtia::sim::detail {
namespace {

template <typename T>
T read_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

// ---- the grid -------------------------------------------------------------------------------

PeGridParams PeGridParams::from(const ChipConfig& config, const PeGridHostSettings& host) {
  PeGridParams p;
  p.quantum_cycles = config.pe_quantum_cycles;
  p.slice_cycles = config.pe_slice_cycles;
  p.default_watchdog_cycles = config.pe_watchdog_cycles;
  p.max_image_bytes = config.kernel_image_max_bytes;
  p.unit_threads = host.unit_threads;
  p.inline_work_ns = host.inline_work_ns;
  p.lazy_loads = host.lazy_loads;
  return p;
}

PeGrid::PeGrid(sc_core::sc_module_name name, SimShared& shared)
    : sc_core::sc_module(name),
      launch_done_port("launch_done_port"),
      shared_(shared),
      params_(PeGridParams::from(shared.config, shared.grid_host)),
      clock_{shared.config.clock_hz, shared.config.timing} {
  pes_.resize(size_t{shared.config.pe_rows} * shared.config.pe_cols);
  workers_ =
      std::make_unique<pe::UnitWorkers>(params_.unit_threads, static_cast<uint32_t>(pes_.size()));
  shared_.memory->set_device_access_observer([this](isa::ByteSpan span, bool write) {
    // initcheck: host copies and fills write device bytes.
    if (write && shared_.initcheck.on()) [[unlikely]] {
      shared_.initcheck.written(span.lo, span.hi);
    }
    before_device_access(span, write);
  });
  SC_HAS_PROCESS(PeGrid);
  SC_THREAD(run);
  set_stack_size(kThreadStackBytes);
}

namespace {
constexpr const char* kSanitizerChecks[4] = {"memcheck", "racecheck", "initcheck", "synccheck"};
}  // namespace

PeGrid::~PeGrid() {
  shared_.memory->set_device_access_observer({});
  // The sanitizer's summary at the device's close: what each check found, and its first report.
  if (stats_.sanitizer_errors != 0) [[unlikely]] {
    const auto& n = stats_.sanitizer_by_check;
    logger("sim.pe")->warn(
        "sanitizer: {} launches failed by a finding (memcheck {}, racecheck {}, initcheck {}, "
        "synccheck {})",
        stats_.sanitizer_errors, n[0], n[1], n[2], n[3]);
    for (int i = 0; i < 4; ++i) {
      if (n[i] != 0) {
        logger("sim.pe")->warn("sanitizer: first {} report: {}", kSanitizerChecks[i],
                               stats_.first_sanitizer_report[i]);
      }
    }
  }
}

void PeGrid::before_device_access(isa::ByteSpan span, bool write) {
  // Local stores seen through their device windows hold what the program wrote to them.
  if (span.hi > isa::kLocalStoreBase) {
    const uint64_t first =
        (std::max(span.lo, isa::kLocalStoreBase) - isa::kLocalStoreBase) / isa::kLocalStoreStride;
    const uint64_t last = (span.hi - 1 - isa::kLocalStoreBase) / isa::kLocalStoreStride;
    for (uint64_t i = first; i <= last && i < pes_.size(); ++i) {
      if (pes_[i]) pes_[i]->flush();
    }
  }
  if (!write) return;
  for (auto& p : pes_) {
    if (p && p->reads_device(span.lo, span.hi)) p->flush();
  }
}

void PeGrid::join_units() {
  workers_->join_all();  // the simulator thread helps while it waits
  for (auto& p : pes_) {
    if (p) p->join();
  }
}

PeEnvironment PeGrid::pe_environment() {
  return PeEnvironment{shared_,
                       *workers_,
                       DeferredWork::Params{params_.inline_work_ns, params_.lazy_loads},
                       clock_,
                       scope_,
                       [this](uint32_t chip) {
                         if (chip < pes_.size() && pes_[chip]) pes_[chip]->flush();
                       },
                       [this](isa::ByteSpan span) { before_device_access(span, true); }};
}

void PeGrid::submit(const isa::LaunchPacket& launch, const isa::AccessScope& scope) {
  assert(!job_);
  job_ = launch;
  scope_ = scope;
  start_.notify(sc_core::SC_ZERO_TIME);
}

void PeGrid::sync_to(uint64_t ps) {
  join_units();  // the rest of the device may look at any memory once time moves
  const uint64_t now = sc_core::sc_time_stamp().value();
  if (ps <= now) return;
  ++stats_.syncs;
  wait(sc_core::sc_time::from_value(ps - now));
  shared_.sync_time();
}

void PeGrid::run() {
  for (;;) {
    while (!job_) wait(start_);
    shared_.sync_time();
    const uint64_t begin = sc_core::sc_time_stamp().value();
    const isa::LaunchPacket launch = *job_;
    // The helper threads may work during the launch: the host's wait policy counts them.
    const int helpers = static_cast<int>(params_.unit_threads);
    host::add_busy_threads(helpers);
    isa::Status outcome;
    try {
      outcome = execute(launch);
    } catch (...) {
      host::add_busy_threads(-helpers);
      throw;
    }
    host::add_busy_threads(-helpers);
    ++stats_.launches;
    stats_.busy_ps += sc_core::sc_time_stamp().value() - begin;
    if (!outcome.ok()) {
      ++stats_.failed_launches;
      // The completion record has room for two numbers; the reason reaches the host through
      // the queue's error record (isa/error_record.h).
      logger("sim.pe")->warn("launch of image 0x{:x} failed: {}", launch.image_addr,
                             outcome.error().reason);
    }
    job_.reset();
    launch_done_port->launch_done(outcome);
  }
}

isa::Status PeGrid::load_program(const isa::LaunchPacket& launch,
                                 std::shared_ptr<const pe::Program>& out) {
  DeviceMemory& mem = shared_.memory->device();
  const uint64_t addr = launch.image_addr;
  auto bad = [&](std::string why) {
    return isa::reject(isa::ErrorCode::kBadKernelImage,
                       fmt::format("kernel image at 0x{:x}: {}", addr, why), addr, 0);
  };
  // The file's extent, from its headers: the program header table and every segment's bytes
  // (sections are not needed to run it).
  constexpr uint64_t kEhdr = 64, kPhdr = 56;
  const auto outside_window = [&](uint64_t at, uint64_t bytes) {
    return isa::reject(isa::ErrorCode::kDeviceAddressFault,
                       fmt::format("kernel image 0x{:x} + {} bytes is outside the device memory "
                                   "of the launching queue's context",
                                   at, bytes),
                       at, bytes);
  };
  if (!scope_.covers(addr, kEhdr)) return outside_window(addr, kEhdr);
  const uint8_t* ehdr = mem.translate(addr, kEhdr);
  if (ehdr == nullptr) {
    return isa::reject(isa::ErrorCode::kDeviceAddressFault,
                       fmt::format("kernel image header at 0x{:x} is not in device memory", addr),
                       addr, kEhdr);
  }
  if (std::memcmp(ehdr,
                  "\x7f"
                  "ELF",
                  4) != 0 ||
      ehdr[4] != 2 || ehdr[5] != 1) {
    return bad("not a little-endian ELF64 file (bad magic or class)");
  }
  const uint64_t phoff = read_le<uint64_t>(ehdr + 32);
  const uint16_t phentsize = read_le<uint16_t>(ehdr + 54);
  const uint16_t phnum = read_le<uint16_t>(ehdr + 56);
  if (phentsize != kPhdr || phoff > params_.max_image_bytes ||
      phoff + uint64_t{phnum} * kPhdr > params_.max_image_bytes) {
    return bad(
        fmt::format("program header table (offset {}, {} entries of {} bytes) is not a "
                    "valid ELF64 table within {} bytes",
                    phoff, phnum, phentsize, params_.max_image_bytes));
  }
  uint64_t size = std::max(kEhdr, phoff + uint64_t{phnum} * kPhdr);
  if (!scope_.covers(addr + phoff, uint64_t{phnum} * kPhdr)) {
    return outside_window(addr + phoff, uint64_t{phnum} * kPhdr);
  }
  const uint8_t* phdrs = mem.translate(addr + phoff, uint64_t{phnum} * kPhdr);
  if (phdrs == nullptr) return bad("program header table lies outside device memory");
  for (uint16_t i = 0; i < phnum; ++i) {
    const uint8_t* ph = phdrs + uint64_t{i} * kPhdr;
    const uint64_t off = read_le<uint64_t>(ph + 8);
    const uint64_t filesz = read_le<uint64_t>(ph + 32);
    if (off > params_.max_image_bytes || filesz > params_.max_image_bytes - off) {
      return bad(
          fmt::format("segment {} (offset {}, {} bytes) extends past the {}-byte image "
                      "limit",
                      i, off, filesz, params_.max_image_bytes));
    }
    size = std::max(size, off + filesz);
  }
  if (!scope_.covers(addr, size)) return outside_window(addr, size);
  const uint8_t* bytes = mem.translate(addr, size);
  if (bytes == nullptr) {
    return isa::reject(
        isa::ErrorCode::kDeviceAddressFault,
        fmt::format("kernel image 0x{:x} + {} bytes is not in device memory", addr, size), addr,
        size);
  }
  if (launch.entry_offset >= MTIA_PE_IMAGE_MAX_BYTES || launch.entry_offset % 4 != 0) {
    return bad(
        fmt::format("entry offset {} is not a 4-byte aligned offset inside the {}-byte "
                    "image window",
                    launch.entry_offset, MTIA_PE_IMAGE_MAX_BYTES));
  }
  const uint64_t entry = MTIA_PE_IMAGE_BASE + launch.entry_offset;

  // Decoding is the expensive part; relaunching the same bytes reuses it, whichever of the
  // image's kernels the launch enters. An image in DRAM is watched (DeviceMemory's counted
  // writes): while no write has touched it since it was cached, its bytes are not compared
  // again.
  const bool counted = mem.kind_of(addr, size) == MemoryKind::kDram && !mem.writes_uncounted();
  auto it = cache_.find(addr);
  if (it == cache_.end() && cache_.size() >= params_.max_cached_programs) {
    cache_.clear();
    mem.unwatch_all();
  }
  if (counted) mem.watch(addr, size);
  const uint64_t writes = counted ? mem.watched_writes() : 0;
  if (it != cache_.end() && it->second.bytes.size() == size) {
    CachedProgram& cached = it->second;
    if ((counted && cached.counted && cached.writes == writes) ||
        std::memcmp(cached.bytes.data(), bytes, size) == 0) {
      cached.counted = counted;
      cached.writes = writes;
      auto known = cached.entries.find(entry);
      if (known == cached.entries.end()) {
        auto entered = cached.entries.begin()->second->with_entry(entry);
        if (!entered.ok()) return bad(entered.error().reason);
        known = cached.entries.emplace(entry, entered.value()).first;
      }
      ++stats_.program_cache_hits;
      out = known->second;
      return isa::Status{};
    }
  }
  auto elf = pe::parse_elf(std::span<const uint8_t>(bytes, size));
  if (!elf.ok()) return bad(elf.error().reason);
  pe::ElfImage image = std::move(elf.value());
  image.entry = entry;  // the launched kernel's entry, which need not be the ELF's
  auto program = pe::Program::create(image);
  if (!program.ok()) return bad(program.error().reason);
  ++stats_.program_loads;
  cache_[addr] = CachedProgram{std::vector<uint8_t>(bytes, bytes + size),
                               {{entry, program.value()}},
                               counted,
                               writes,
                               nullptr};
  out = program.value();
  return isa::Status{};
}

std::string PeGrid::with_source_lines(const isa::LaunchPacket& launch, const std::string& report,
                                      std::span<const pe::LineTable::Frame> frames) {
  auto it = cache_.find(launch.image_addr);
  if (it == cache_.end()) return report;  // the image did not load: no pc to place
  CachedProgram& cached = it->second;
  if (!cached.lines) {
    // The whole file, up to the end of its section header table or its last section, from
    // where the launch read the image. Without sections (or with unreadable ones) the reports
    // name pcs only.
    DeviceMemory& mem = shared_.memory->device();
    const uint64_t addr = launch.image_addr;
    auto read_table = [&]() -> isa::Result<pe::LineTable> {
      const uint8_t* ehdr = scope_.covers(addr, 64) ? mem.translate(addr, 64) : nullptr;
      if (ehdr == nullptr) return pe::LineTable{};
      const uint64_t shoff = read_le<uint64_t>(ehdr + 40);
      const uint64_t shnum = read_le<uint16_t>(ehdr + 60);
      if (shoff == 0 || shnum == 0 || shoff > params_.max_image_bytes ||
          shnum * 64 > params_.max_image_bytes - shoff) {
        return pe::LineTable{};
      }
      const uint8_t* shdrs = scope_.covers(addr + shoff, shnum * 64)
                                 ? mem.translate(addr + shoff, shnum * 64)
                                 : nullptr;
      if (shdrs == nullptr) return pe::LineTable{};
      uint64_t size = shoff + shnum * 64;
      for (uint64_t i = 0; i < shnum; ++i) {
        const uint64_t off = read_le<uint64_t>(shdrs + i * 64 + 24);
        const uint64_t bytes = read_le<uint64_t>(shdrs + i * 64 + 32);
        if (off <= params_.max_image_bytes && bytes <= params_.max_image_bytes - off) {
          size = std::max(size, off + bytes);
        }
      }
      const uint8_t* file = scope_.covers(addr, size) ? mem.translate(addr, size) : nullptr;
      if (file == nullptr) return pe::LineTable{};
      return pe::LineTable::from_elf(std::span<const uint8_t>(file, size));
    };
    auto table = read_table();
    if (!table.ok()) {
      logger("sim.pe")->warn("kernel image at 0x{:x}: reports name pcs only: {}", addr,
                             table.error().reason);
      table = pe::LineTable{};
    }
    cached.lines = std::make_shared<const pe::LineTable>(std::move(table.value()));
  }
  return cached.lines->annotate(report, frames);
}

isa::Status PeGrid::execute(const isa::LaunchPacket& launch) {
  const uint64_t t0 = sc_core::sc_time_stamp().value();
  std::shared_ptr<const pe::Program> program;
  if (isa::Status loaded = load_program(launch, program); !loaded) return loaded;

  if (launch.args_bytes > MTIA_PE_ARGS_MAX_BYTES) {
    return isa::reject(isa::ErrorCode::kBadDims,
                       fmt::format("argument block of {} bytes exceeds the {}-byte window",
                                   launch.args_bytes, MTIA_PE_ARGS_MAX_BYTES),
                       launch.args_bytes, MTIA_PE_ARGS_MAX_BYTES);
  }
  std::vector<uint8_t> args(launch.args_bytes);
  if (!args.empty()) {
    const uint8_t* p = scope_.covers(launch.args_addr, args.size())
                           ? shared_.memory->device().translate(launch.args_addr, args.size())
                           : nullptr;
    if (p == nullptr) {
      return isa::reject(isa::ErrorCode::kDeviceAddressFault,
                         fmt::format("argument block 0x{:x} + {} bytes is not in device memory",
                                     launch.args_addr, args.size()),
                         launch.args_addr, args.size());
    }
    std::memcpy(args.data(), p, args.size());
  }

  // Launch PE (row, col) runs on chip PE (row, col): its local store is that PE's window.
  const uint32_t rows = launch.grid_rows, cols = launch.grid_cols;
  const uint32_t n = rows * cols;
  const uint64_t watchdog =
      launch.watchdog_cycles != 0 ? launch.watchdog_cycles : params_.default_watchdog_cycles;
  std::vector<ProcessingElement*> pes;
  pes.reserve(n);
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t c = 0; c < cols; ++c) {
      const uint32_t chip = r * shared_.config.pe_cols + c;
      const uint32_t index = r * cols + c;
      std::unique_ptr<ProcessingElement>& slot = pes_.at(chip);
      if (!slot) {
        uint8_t* ls = shared_.memory->device().translate(
            isa::kLocalStoreBase + uint64_t{chip} * isa::kLocalStoreStride,
            shared_.config.local_store_bytes);
        assert(ls != nullptr && "DeviceMemory maps every PE's local store");
        slot = std::make_unique<ProcessingElement>(
            pe_environment(), chip, std::span<uint8_t>(ls, shared_.config.local_store_bytes),
            shared_.config.units);
      }
      slot->begin(t0);
      pe::LaunchContext ctx;
      ctx.grid_rows = rows;
      ctx.grid_cols = cols;
      ctx.pe_row = r;
      ctx.pe_col = c;
      ctx.args = args;
      ctx.watchdog_cycles = watchdog;
      ctx.sram_base = isa::kSramBase;
      ctx.sram_bytes = shared_.config.sram_bytes;
      if (isa::Status started = slot->core().start(program, ctx); !started) {
        return isa::reject(
            isa::ErrorCode::kBadKernelImage,
            fmt::format("PE {} cannot start the kernel: {}", index, started.error().reason),
            launch.image_addr, index);
      }
      if (shared_.sanitize & isa::kSanitizeInitcheck) [[unlikely]] {
        slot->poison_local_store(*program);
      }
      pes.push_back(slot.get());
    }
  }

  const bool initcheck = (shared_.sanitize & isa::kSanitizeInitcheck) != 0;
  if (initcheck) [[unlikely]] {
    shared_.initcheck.apply_host_writes();
  }
  // initcheck: what the PEs' DMA wrote becomes what every PE may read after the barrier.
  auto publish_writes = [&] {
    for (ProcessingElement* p : pes) {
      shared_.initcheck.written(p->dram_written);
      p->dram_written.clear();
    }
  };
  auto finish = [&](isa::Status outcome) {
    if (initcheck) [[unlikely]] {
      publish_writes();
    }
    // The local stores hold every load when the launch ends. All copies are queued before
    // any is waited for, so the simulator thread helps with any PE's work meanwhile.
    for (ProcessingElement* p : pes) p->copy_loads();
    join_units();
    uint64_t end = 0;
    for (ProcessingElement* p : pes) {
      end = std::max(end, p->core().cycles());
      stats_.pe_cycles += p->core().cycles();
      stats_.instructions += p->core().instret();
      ProcessingElement::Counters& c = p->counters;
      stats_.unit_ops += c.unit_ops;
      stats_.dma_ops += c.dma_ops;
      stats_.dma_bytes += c.dma_bytes;
      stats_.lazy.loads += c.lazy.loads;
      stats_.lazy.copied += c.lazy.copied;
      stats_.lazy.operand_reads += c.lazy.operand_reads;
      c = ProcessingElement::Counters{};
    }
    for (uint32_t i = 0; i < n; ++i) {
      shared_.tracer->pe_kernel(pes[i]->chip_index(), t0,
                                t0 + clock_.cycles_to_ps(pes[i]->core().cycles()));
    }
    sync_to(t0 + clock_.cycles_to_ps(end));
    return outcome;
  };
  // `check`: the finding's isa::kSanitize* bit; `frames`: the instructions it names with the
  // ra each ran with (where the failing PE stopped, earlier operations), for their callers.
  auto sanitizer_failure = [&](uint32_t check, const std::string& finding, uint64_t pc, uint32_t pe,
                               std::span<const pe::LineTable::Frame> frames = {}) {
    assert(std::has_single_bit(check) && (check & isa::kSanitizeChecksMask) != 0);
    ++stats_.sanitizer_errors;
    // Counted when it ends: this is launch number launches + 1 of the device.
    std::string report = with_source_lines(
        launch,
        fmt::format(
            "launch {} of the device (packet seq {}, image 0x{:x}, entry offset 0x{:x}), {}",
            stats_.launches + 1, launch.header.seq, launch.image_addr, launch.entry_offset,
            finding),
        frames);
    const int index = std::countr_zero(check);  // kSanitizerChecks' order is the bits'
    if (stats_.sanitizer_by_check[index]++ == 0) stats_.first_sanitizer_report[index] = report;
    shared_.tracer->sanitizer_finding(pes[pe]->chip_index(),
                                      t0 + clock_.cycles_to_ps(pes[pe]->core().cycles()),
                                      kSanitizerChecks[index], report);
    return isa::reject(isa::ErrorCode::kSanitizerError, std::move(report), pc, pe);
  };
  // racecheck: the PEs' accesses since the last barrier (or the start), compared when every PE
  // has reached the next one or the launch ends; `barriers` have been released before them.
  const bool racecheck = (shared_.sanitize & isa::kSanitizeRacecheck) != 0;
  const bool synccheck = (shared_.sanitize & isa::kSanitizeSynccheck) != 0;
  std::vector<RaceLog*> race_logs;
  if (racecheck) {
    for (ProcessingElement* p : pes) race_logs.push_back(&p->race_log);
  }
  uint64_t barriers = 0;
  auto race_found = [&](bool at_end) -> std::optional<isa::Failure> {
    std::optional<Race> race = find_race(race_logs);
    for (RaceLog* l : race_logs) l->clear();
    if (!race) return std::nullopt;
    auto pe = [&](uint32_t i) {
      return fmt::format("PE {} (row {}, col {})", i, i / cols, i % cols);
    };
    auto how = [](uint32_t i, const RaceLog::Run& run) {
      return fmt::format("PE {} {} them by the dma.start at pc 0x{:x}", i,
                         run.write ? "writes" : "reads", run.pc);
    };
    const std::string from =
        barriers == 0 ? "the launch's start" : fmt::format("barrier {}", barriers);
    const std::string to = at_end ? "the launch's end" : fmt::format("barrier {}", barriers + 1);
    const pe::LineTable::Frame frames[2] = {{race->a.pc, race->a.ra}, {race->b.pc, race->b.ra}};
    return sanitizer_failure(
        isa::kSanitizeRacecheck,
        fmt::format("{} and {}: racecheck: both touch the {} bytes at 0x{:x}..0x{:x} between {} "
                    "and {}, one of them writing: {}, {}",
                    pe(race->pe_a), pe(race->pe_b), race->hi - race->lo, race->lo, race->hi - 1,
                    from, to, how(race->pe_a, race->a), how(race->pe_b, race->b)),
        race->a.pc, race->pe_a, frames);
  };
  // synccheck: PEs wait at a barrier that others, having exited, never reach. The lowest PE
  // waiting names the barrier; the lowest PE that exited, and how many more did.
  auto barrier_not_reached = [&](uint64_t barrier) {
    uint32_t waiter = n, exited = n, more = 0;
    for (uint32_t i = 0; i < n; ++i) {
      if (pes[i]->core().state() == pe::RiscvCore::State::kExited) {
        more += exited != n;
        if (exited == n) exited = i;
      } else if (waiter == n) {
        waiter = i;
      }
    }
    assert(waiter != n && exited != n);
    const ProcessingElement& w = *pes[waiter];
    const pe::RiscvCore& x = pes[exited]->core();
    return sanitizer_failure(
        isa::kSanitizeSynccheck,
        fmt::format(
            "PE {} (row {}, col {}): synccheck: pe.barrier at pc 0x{:x} (barrier {} of the "
            "launch) is not reached by PE {} (row {}, col {}), which exited at pc 0x{:x} "
            "after {} barriers{}",
            waiter, waiter / cols, waiter % cols, w.barrier_pc, barrier, exited, exited / cols,
            exited % cols, x.pc(), barrier - 1,
            more == 0 ? std::string() : fmt::format(", nor by {} more PEs that exited", more)),
        w.barrier_pc, waiter);
  };
  auto kernel_failure = [&](uint32_t i) {
    pe::RiscvCore& core = pes[i]->core();
    const uint32_t r = i / cols, c = i % cols;
    if (core.state() == pe::RiscvCore::State::kExited) {
      return isa::Failure{isa::ErrorCode::kKernelFault,
                          fmt::format("PE {} (row {}, col {}) exited with status {} at pc 0x{:x}",
                                      i, r, c, core.exit_status(), core.pc()),
                          core.pc(), i, core.exit_status()};
    }
    const pe::Fault& f = core.fault();
    const pe::LineTable::Frame stop{f.pc, core.reg(1)};
    if (const ProcessingElement::Finding& found = pes[i]->sanitizer_finding; found.check != 0) {
      std::vector<pe::LineTable::Frame> frames{stop};
      frames.insert(frames.end(), found.frames.begin(), found.frames.end());
      return sanitizer_failure(found.check,
                               fmt::format("PE {} (row {}, col {}): {}", i, r, c, found.text), f.pc,
                               i, frames);
    }
    const bool watchdog_hit = f.kind == pe::FaultKind::kWatchdog;
    return isa::reject(
        watchdog_hit ? isa::ErrorCode::kWatchdog : isa::ErrorCode::kKernelFault,
        with_source_lines(launch, fmt::format("PE {} (row {}, col {}): {}", i, r, c, f.reason),
                          {&stop, 1}),
        f.pc, i);
  };

  uint64_t horizon = params_.quantum_cycles;
  for (;;) {
    run_slices(pes, horizon);
    // The first failure in the sequential order ends the launch.
    uint32_t failed = n;
    for (uint32_t i = 0; i < n; ++i) {
      if (pes[i]->failed_at != ProcessingElement::kNotFailed &&
          (failed == n || pes[i]->failed_at < pes[failed]->failed_at)) {
        failed = i;
      }
    }
    if (failed != n) return finish(kernel_failure(failed));
    // Release the barrier once every PE still running has reached it.
    uint32_t running = 0, waiting = 0;
    uint64_t release = 0;
    for (ProcessingElement* p : pes) {
      if (p->core().state() == pe::RiscvCore::State::kExited) continue;
      ++running;
      if (p->at_barrier) {
        ++waiting;
        release = std::max(release, p->barrier_arrival);
      }
    }
    if (running == 0) break;
    if (waiting == running) {
      if (synccheck && running < n) [[unlikely]] {
        return finish(barrier_not_reached(barriers + 1));
      }
      if (racecheck) [[unlikely]] {
        if (auto race = race_found(false)) return finish(std::move(*race));
      }
      if (initcheck) [[unlikely]] {
        publish_writes();
      }
      ++barriers;
      ++stats_.barriers;
      // What a PE wrote to device memory before the barrier is there for the others after it,
      // and what it reads there is read before they write. Its local store is its own: others
      // reach it through its device window, which finishes its work first (dma_side).
      for (ProcessingElement* p : pes) p->join_device();
      for (ProcessingElement* p : pes) {
        if (!p->at_barrier) continue;
        p->at_barrier = false;
        p->core().resume(0, release - p->barrier_arrival);
      }
      continue;  // the released cores may still be below the horizon
    }
    // Every core has reached the horizon or waits at the barrier: let simulated time catch up
    // (the host DMA engines and the command processor run meanwhile).
    sync_to(t0 + clock_.cycles_to_ps(horizon));
    horizon += params_.quantum_cycles;
  }
  if (racecheck) [[unlikely]] {
    if (auto race = race_found(true)) return finish(std::move(*race));
  }
  return finish(isa::Status{});
}

void PeGrid::run_pe(ProcessingElement& p, uint64_t order, uint64_t horizon_cycles) {
  pe::RiscvCore& core = p.core();
  if (core.state() != pe::RiscvCore::State::kReady || core.cycles() >= horizon_cycles) return;
  const pe::RunResult res = core.run(~0ull, horizon_cycles);
  if (res.reason == pe::StopReason::kFault ||
      (res.reason == pe::StopReason::kExit && core.exit_status() != 0)) {
    p.failed_at = order;
  }
  // kUnitStall is a barrier (waits never stall); kBudget: the slice's horizon.
}

void PeGrid::run_slices(const std::vector<ProcessingElement*>& pes, uint64_t horizon) {
  // Lockstep slices up to the horizon: requests to the shared memories stay nearly in time
  // order (a reservation timeline assumes requests arrive in order).
  const uint64_t n = pes.size();
  uint64_t k = 0;
  for (uint64_t h = horizon - params_.quantum_cycles; h != horizon; ++k) {
    h = std::min(horizon, h + params_.slice_cycles);
    for (uint64_t i = 0; i < n; ++i) run_pe(*pes[i], k * n + i, h);
  }
}

Json PeGrid::stats_json() const {
  Json m = Json::object();
  add_stat(m, "launches", stats_.launches, "launches", "kernel launches run (failed included)");
  add_stat(m, "failed_launches", stats_.failed_launches, "launches",
           "launches that ended in a fault, a bad image or a non-zero exit status (logged)");
  add_stat(m, "sanitizer_errors", stats_.sanitizer_errors, "launches",
           "launches failed by a sanitizer finding (docs/sanitizer.md; logged)");
  static constexpr const char* kByCheck[4] = {"sanitizer_memcheck", "sanitizer_racecheck",
                                              "sanitizer_initcheck", "sanitizer_synccheck"};
  Json first = Json::object();
  for (int i = 0; i < 4; ++i) {
    add_stat(m, kByCheck[i], stats_.sanitizer_by_check[i], "launches",
             "launches failed by this sanitizer check's finding");
    if (stats_.sanitizer_by_check[i] != 0) {
      first[kSanitizerChecks[i]] = stats_.first_sanitizer_report[i];
    }
  }
  add_stat(m, "sanitizer_first_reports", std::move(first), "reports",
           "the first report of each sanitizer check that found something");
  add_stat(m, "busy_ps", stats_.busy_ps, "ps", "simulated time the grid spent running launches");
  add_stat(m, "pe_cycles", stats_.pe_cycles, "cycles", "sum over PEs of their core cycles");
  add_stat(m, "instructions", stats_.instructions, "instructions",
           "RISC-V instructions retired, all PEs");
  add_stat(m, "unit_ops", stats_.unit_ops, "operations", "DPE, SE, RE and MLU operations");
  add_stat(m, "dma_ops", stats_.dma_ops, "operations", "local DMA operations");
  add_stat(m, "dma_bytes", stats_.dma_bytes, "bytes", "payload bytes moved by local DMA");
  add_stat(m, "lazy_loads", stats_.lazy.loads, "operations",
           "local DMA loads from DRAM or SRAM left there until their bytes were needed");
  add_stat(m, "lazy_loads_copied", stats_.lazy.copied, "operations",
           "lazy loads copied into the local store after all (the others were only read by "
           "the DPE, or loaded over)");
  add_stat(m, "lazy_operand_reads", stats_.lazy.operand_reads, "operands",
           "fp32 DPE operands read where a lazy load reads from");
  add_stat(m, "barrier_releases", stats_.barriers, "barriers", "PE barriers released");
  add_stat(m, "systemc_syncs", stats_.syncs, "waits",
           "SystemC waits the grid scheduler took (one per quantum, not per PE)");
  add_stat(m, "program_loads", stats_.program_loads, "images", "kernel images parsed and decoded");
  add_stat(m, "program_cache_hits", stats_.program_cache_hits, "launches",
           "launches that reused a decoded image");
  return m;
}

}  // namespace mtia::sim::detail
