// The boundary between a PE's control core and everything it drives: the core hands every
// unit instruction (DMA, DPE, SE, RE, MLU, waits, barrier) to a UnitPort and goes on with
// the answer. The PE model implements it; tests implement it with a recorder.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "mtia/isa/pe/pe_ops.h"

namespace mtia::sim::pe {

class RiscvCore;

// The unit instructions (pe.info is answered by the core itself and never reaches the port).
enum class UnitOp : uint8_t {
  kIllegal = 0,
  kBarrier = 1,  // pe.barrier: rs1, rs2 unused
  kWait = 2,     // pe.wait: rs1 = tag
  kWaitAll = 3,  // pe.waitall
  kPoll = 4,     // pe.poll: rs1 = tag; answer 1 if complete, else 0
  kDma = 5,      // dma.start: rs1 = address of an mtia_pe_dma_desc; answer a tag
  kMatmul = 6,   // dpe.matmul: rs1 = address of an mtia_pe_matmul_desc; answer a tag
  kEltwise = 7,  // se.op: rs1 = address of an mtia_pe_se_desc; answer a tag
  kReduce = 8,   // re.reduce: rs1 = address of an mtia_pe_re_desc; answer a tag
  kLayout = 9,   // mlu.op: rs1 = address of an mtia_pe_mlu_desc; answer a tag
  kCount
};

// "dma.start", "pe.wait", ...
const char* unit_op_name(UnitOp op);

struct UnitRequest {
  UnitOp op = UnitOp::kIllegal;
  uint64_t pc = 0;     // address of the instruction
  uint64_t rs1 = 0;    // value of rs1: a descriptor address or a tag
  uint64_t rs2 = 0;    // value of rs2 (always x0 in this version of the extension)
  uint64_t cycle = 0;  // core cycle count at issue (RiscvCore::cycles(), issue cost included)
  uint64_t ra = 0;     // the return address register (x1): reports name the calling line
};

struct UnitResponse {
  enum class Status : uint8_t {
    kDone,   // the instruction retires now; rd = value
    kStall,  // the core stops (RunResult kUnitStall) until RiscvCore::resume() delivers rd
    kFault,  // the kernel faults (FaultKind::kUnit) with `reason`
  };
  Status status = Status::kDone;
  uint64_t value = 0;         // rd for kDone
  uint64_t extra_cycles = 0;  // cycles the core was held at issue (e.g. a full unit queue)
  std::string reason;         // for kFault: what was wrong with the operands, for people

  static UnitResponse done(uint64_t value, uint64_t extra_cycles = 0) {
    return {Status::kDone, value, extra_cycles, {}};
  }
  static UnitResponse stall(uint64_t extra_cycles = 0) {
    return {Status::kStall, 0, extra_cycles, {}};
  }
  static UnitResponse fault(std::string why) { return {Status::kFault, 0, 0, std::move(why)}; }
};

// Implemented by the PE model. `issue` runs on the thread that called RiscvCore::run; it may
// read and write the core's memory through `core` (descriptors, local store) but must not
// call run() or resume() from inside.
class UnitPort {
 public:
  virtual ~UnitPort() = default;
  virtual UnitResponse issue(RiscvCore& core, const UnitRequest& request) = 0;
  // The load or store at `pc` of `bytes` bytes at local-store offset `offset` touched the
  // core's guarded bytes (RiscvCore::guard): unit work still running on them must finish
  // first. Called before the access; the port normally finishes that work and clears the
  // guard. Returning false stops the access: the core faults (kAccessFault) at `pc`.
  virtual bool guarded_access(RiscvCore& core, uint64_t pc, uint64_t offset, uint64_t bytes,
                              bool write) {
    (void)core, (void)pc, (void)offset, (void)bytes, (void)write;
    return true;
  }
};

}  // namespace mtia::sim::pe
