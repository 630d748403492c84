#include "mtia/sim/device_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "mtia/isa/address_map.h"

namespace mtia::sim {
namespace {

// True if [addr, addr + bytes) lies inside [base, base + size), written so that no sum can
// overflow: addr >= base, then both offset and length are compared against size.
bool contains(uint64_t base, uint64_t size, uint64_t addr, uint64_t bytes) {
  if (addr < base) return false;
  const uint64_t offset = addr - base;
  return offset < size && bytes <= size - offset;
}

}  // namespace

DeviceMemory::Mapping DeviceMemory::map(uint64_t bytes, const std::string& what, bool shareable) {
  auto refused = [&](const char* step) {
    const int err = errno;
    return std::runtime_error("cannot reserve " + std::to_string(bytes) + " bytes of host " +
                              "address space for device " + what + " (" + step +
                              "): " + std::strerror(err) +
                              " (check ulimit -v and vm.overcommit_memory, or lower the size "
                              "with a config override)");
  };
  // MAP_NORESERVE: the kernel commits pages on first touch, so a 128 GiB DRAM costs only the
  // pages the program writes. Fresh pages read as zero, like reset memory. A shareable memory
  // is a sparse memfd (pages allocated on first touch too) that another process may map: a
  // device server hands it to its client as the BAR memory window.
  int fd = -1;
  if (shareable) {
    fd = memfd_create(("mtia-" + what).c_str(), MFD_CLOEXEC);
    if (fd < 0) throw refused("memfd_create");
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const auto e = refused("ftruncate");
      close(fd);
      throw e;
    }
  }
  void* p = mmap(
      nullptr, bytes, PROT_READ | PROT_WRITE,
      shareable ? MAP_SHARED | MAP_NORESERVE : MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    const auto e = refused("mmap");
    if (fd >= 0) close(fd);
    throw e;
  }
  return {static_cast<uint8_t*>(p), bytes, fd};
}

void DeviceMemory::unmap(Mapping& m) {
  if (m.base != nullptr) munmap(m.base, m.bytes);
  if (m.fd >= 0) close(m.fd);
  m = {};
}

DeviceMemory::DeviceMemory(const ChipConfig& config)
    : local_store_bytes_(config.local_store_bytes), num_pes_(config.pe_rows * config.pe_cols) {
  try {
    dram_ = map(config.dram_bytes, "DRAM", /*shareable=*/true);
    sram_ = map(config.sram_bytes, "SRAM", false);
    local_stores_ = map(local_store_bytes_ * num_pes_, "local stores", false);
  } catch (...) {
    unmap(dram_);
    unmap(sram_);
    unmap(local_stores_);
    throw;
  }
}

isa::Result<int> DeviceMemory::split_dram(uint64_t addr, uint64_t bytes) {
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (bytes == 0 || !contains(isa::kDramBase, dram_.bytes, addr, bytes) || addr % page != 0 ||
      bytes % page != 0) {
    return isa::reject(isa::ErrorCode::kInvalidArgument,
                       "split_dram: " + std::to_string(bytes) + " bytes at device address " +
                           std::to_string(addr) + " are not a page-aligned range of DRAM");
  }
  const uint64_t offset = addr - isa::kDramBase;
  for (const Split& s : splits_) {
    if (offset < s.offset + s.bytes && s.offset < offset + bytes) {
      return isa::reject(isa::ErrorCode::kInvalidArgument,
                         "split_dram: the range overlaps one already split off");
    }
  }
  const int fd = memfd_create("mtia-DRAM-window", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) close(fd);
    return isa::reject(isa::ErrorCode::kOutOfMemory, "split_dram: no memory file: " + why);
  }
  // Keep what the range holds: copy its written parts (the file is sparse; reading its holes
  // would allocate them), then release them from the whole-DRAM file.
  uint8_t* at = dram_.base + offset;
  for (uint64_t pos = offset; pos < offset + bytes;) {
    const off_t data = lseek(dram_.fd, static_cast<off_t>(pos), SEEK_DATA);
    if (data < 0 || static_cast<uint64_t>(data) >= offset + bytes) break;
    const off_t hole = lseek(dram_.fd, data, SEEK_HOLE);
    const uint64_t stop = std::min<uint64_t>(static_cast<uint64_t>(hole), offset + bytes);
    const uint64_t n = stop - static_cast<uint64_t>(data);
    if (pwrite(fd, dram_.base + data, n, static_cast<off_t>(data - static_cast<off_t>(offset))) !=
        static_cast<ssize_t>(n)) {
      const std::string why = std::strerror(errno);
      close(fd);
      return isa::reject(isa::ErrorCode::kOutOfMemory, "split_dram: copying the range: " + why);
    }
    pos = stop;
  }
  void* p = mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    const std::string why = std::strerror(errno);
    close(fd);
    return isa::reject(isa::ErrorCode::kOutOfMemory, "split_dram: mapping the range: " + why);
  }
  fallocate(dram_.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
            static_cast<off_t>(bytes));  // best effort: only frees memory
  splits_.push_back({offset, bytes, fd});
  uncounted_writers_.store(true, std::memory_order_relaxed);
  return fd;
}

// One mutex orders a write's report against a reader's watch: a write reported before the
// reader watches was in place before the reader read the bytes; one reported after it sees the
// watched span and is counted.
void DeviceMemory::watch(uint64_t addr, uint64_t bytes) {
  const std::pair<uint64_t, uint64_t> range{addr, addr + std::max<uint64_t>(bytes, 1)};
  std::lock_guard lock(watch_mu_);
  for (const auto& w : watched_) {
    if (w.first <= range.first && range.second <= w.second) return;
  }
  watched_.push_back(range);
}

void DeviceMemory::unwatch_all() {
  std::lock_guard lock(watch_mu_);
  watched_.clear();
}

uint64_t DeviceMemory::watched_writes() const {
  std::lock_guard lock(watch_mu_);
  return watched_writes_;
}

void DeviceMemory::note_written(uint64_t addr, uint64_t bytes) {
  const uint64_t hi = addr + std::max<uint64_t>(bytes, 1);
  std::lock_guard lock(watch_mu_);
  for (const auto& w : watched_) {
    if (addr < w.second && w.first < hi) {
      ++watched_writes_;
      return;
    }
  }
}

DeviceMemory::~DeviceMemory() {
  for (Split& s : splits_) close(s.fd);  // their pages go with dram_'s address range
  unmap(dram_);
  unmap(sram_);
  unmap(local_stores_);
}

MemoryKind DeviceMemory::locate(uint64_t addr, uint64_t bytes, uint8_t** out) const {
  if (bytes == 0) bytes = 1;
  if (contains(isa::kDramBase, dram_.bytes, addr, bytes)) {
    *out = dram_.base + (addr - isa::kDramBase);
    return MemoryKind::kDram;
  }
  if (contains(isa::kSramBase, sram_.bytes, addr, bytes)) {
    *out = sram_.base + (addr - isa::kSramBase);
    return MemoryKind::kSram;
  }
  if (addr >= isa::kLocalStoreBase) {
    const uint64_t pe = (addr - isa::kLocalStoreBase) / isa::kLocalStoreStride;
    if (pe < num_pes_) {
      const uint64_t window = isa::kLocalStoreBase + pe * isa::kLocalStoreStride;
      if (contains(window, local_store_bytes_, addr, bytes)) {
        *out = local_stores_.base + pe * local_store_bytes_ + (addr - window);
        return MemoryKind::kLocalStore;
      }
    }
  }
  *out = nullptr;
  return MemoryKind::kNone;
}

uint8_t* DeviceMemory::translate(uint64_t addr, uint64_t bytes) const {
  uint8_t* p = nullptr;
  locate(addr, bytes, &p);
  return p;
}

MemoryKind DeviceMemory::kind_of(uint64_t addr, uint64_t bytes) const {
  uint8_t* p = nullptr;
  return locate(addr, bytes, &p);
}

}  // namespace mtia::sim
