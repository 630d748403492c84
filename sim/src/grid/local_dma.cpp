#include "local_dma.h"

#include <spdlog/fmt/fmt.h>

#include "mtia/isa/packets.h"
#include "mtia/sim/pe/descriptors.h"

namespace mtia::sim::detail {

LocalDma::LocalDma(MemorySystem& memory, uint64_t ls_device_base)
    : memory_(memory), ls_device_base_(ls_device_base) {}

uint64_t LocalDma::device_address(uint8_t space, uint64_t addr) const {
  if (space == MTIA_PE_SPACE_LOCAL) return ls_device_base_ + (addr - MTIA_PE_LS_BASE);
  return addr;
}

isa::Result<mtia_pe_dma_desc> LocalDma::validate(const sim::pe::RiscvCore& core,
                                                 uint64_t addr) const {
  auto desc = sim::pe::read_descriptor<mtia_pe_dma_desc>(core, addr);
  if (!desc.ok()) {
    return isa::reject(desc.error().code, "dma.start rejected: " + desc.error().reason);
  }
  return desc.value();
}

isa::Result<LocalDma::Job> LocalDma::check(const mtia_pe_dma_desc& d, uint64_t now_ps,
                                           const isa::AccessScope& scope) const {
  // The same job as a host DMA packet, so it goes through the shared memory system: its
  // address checks, its bandwidth timelines (contention with the other PEs and the host
  // DMA engines) and its copy loops.
  isa::DmaCopyPacket p{};
  p.ndims = d.ndims;
  p.elem_size = d.elem_size;
  for (int i = 0; i < d.ndims; ++i) {
    p.sizes[i] = d.sizes[i];
    p.src.strides[i] = d.src_strides[i];
    p.dst.strides[i] = d.dst_strides[i];
  }
  p.src.addr = device_address(d.src_space, d.src);
  p.dst.addr = device_address(d.dst_space, d.dst);
  p.src.space = p.dst.space = static_cast<uint8_t>(isa::AddressSpace::kDevice);
  Job job;
  job.plan = memory_.check_copy(p, now_ps, DmaReach{scope, /*launch_scratch=*/true});
  const isa::Status bound =
      job.plan.status.ok() ? memory_.bind(job.plan, job.copy) : job.plan.status;
  if (!bound.ok()) {
    const isa::Failure& f = bound.error();
    return isa::reject(
        f.code,
        fmt::format("dma.start: {}: device range 0x{:x} + {} bytes is not inside one device memory "
                    "that this launch may reach (source {} 0x{:x}, destination {} 0x{:x})",
                    isa::error_code_name(f.code), f.arg0, f.arg1,
                    d.src_space == MTIA_PE_SPACE_LOCAL ? "local" : "device", d.src,
                    d.dst_space == MTIA_PE_SPACE_LOCAL ? "local" : "device", d.dst));
  }
  return job;
}

void LocalDma::execute(const mtia_pe_dma_desc& d, const Job& job, const sim::pe::Touched& touched,
                       DeferredWork& work) {
  if (work.load_lazily(d, touched[1], job.plan, job.copy)) return;
  const BoundDma bound = job.copy;
  work.run_or_defer(
      touched, job.plan.payload_bytes / 8, [bound] { bound.run(); }, /*device=*/true);
}

}  // namespace mtia::sim::detail
