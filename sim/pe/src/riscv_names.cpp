// Names of the core's faults, stop reasons and unit instructions, for messages and traces.
#include "mtia/sim/pe/riscv_core.h"

namespace mtia::sim::pe {

const char* fault_kind_name(FaultKind kind) {
  switch (kind) {
    case FaultKind::kIllegalInstruction:
      return "illegal instruction";
    case FaultKind::kFetchFault:
      return "instruction fetch fault";
    case FaultKind::kMisalignedFetch:
      return "misaligned jump target";
    case FaultKind::kMisalignedAccess:
      return "misaligned access";
    case FaultKind::kAccessFault:
      return "access fault";
    case FaultKind::kBreakpoint:
      return "breakpoint";
    case FaultKind::kWatchdog:
      return "watchdog";
    case FaultKind::kUnit:
      return "unit fault";
  }
  return "unknown fault";
}

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::kExit:
      return "exit";
    case StopReason::kFault:
      return "fault";
    case StopReason::kUnitStall:
      return "unit stall";
    case StopReason::kBudget:
      return "budget";
  }
  return "unknown";
}

const char* unit_op_name(UnitOp op) {
  switch (op) {
    case UnitOp::kBarrier:
      return "pe.barrier";
    case UnitOp::kWait:
      return "pe.wait";
    case UnitOp::kWaitAll:
      return "pe.waitall";
    case UnitOp::kPoll:
      return "pe.poll";
    case UnitOp::kDma:
      return "dma.start";
    case UnitOp::kMatmul:
      return "dpe.matmul";
    case UnitOp::kEltwise:
      return "se.op";
    case UnitOp::kReduce:
      return "re.reduce";
    case UnitOp::kLayout:
      return "mlu.op";
    case UnitOp::kIllegal:
    case UnitOp::kCount:
      break;
  }
  return "illegal";
}

}  // namespace mtia::sim::pe
