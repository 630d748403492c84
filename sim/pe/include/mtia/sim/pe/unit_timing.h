// The throughput and latency of a PE's fixed-function units, in PE clock cycles: the part of
// the chip configuration (ChipConfig::units) that the unit models (unit.h) cost operations
// with. The preset files say where each number comes from; the defaults are the mtia-v2
// preset's.
//
// Busy cycles of one operation:
//   DPE  dpe_issue_cycles + ceil(m*n*k / MACs per cycle of in_dtype)
//   SE   se_issue_cycles + ceil(count / lanes) * cycles per vector of the op,
//        lanes = min(se_elements_per_cycle,
//                    se_vector_bytes / (bytes of the widest element read or written))
//   RE   re_issue_cycles + ceil(rows*cols / re_elements_per_cycle)
//   MLU  mlu_issue_cycles + ceil(rows*cols*elem_size / mlu_bytes_per_cycle)
#pragma once

#include <cstdint>

namespace mtia::sim::pe {

struct UnitTiming {
  // DPE: multiply-accumulates per cycle (one MAC = c += a*b) by input dtype.
  uint32_t dpe_int8_macs_per_cycle = 2048;
  uint32_t dpe_fp16_macs_per_cycle = 1024;  // fp16 and bf16
  uint32_t dpe_fp32_macs_per_cycle = 256;
  uint32_t dpe_issue_cycles = 16;  // descriptor decode, array fill and drain, per matmul

  // SE: bytes of vector processed per cycle and the most elements per cycle whatever their
  // width (256 bytes and 64 elements: 64 lanes of fp32, fp16, bf16 and int8 alike), and
  // cycles each vector takes by op class (the cost column of isa/pe/se_ops.h).
  uint32_t se_vector_bytes = 256;
  uint32_t se_elements_per_cycle = 64;
  uint32_t se_simple_cycles = 1;          // arithmetic, compare, logic, select, clamp, cast
  uint32_t se_divide_cycles = 4;          // div, sqrt, rsqrt
  uint32_t se_transcendental_cycles = 8;  // exp, log, tanh, erf, sigmoid, silu
  uint32_t se_issue_cycles = 8;

  // RE: input elements consumed per cycle, any dtype.
  uint32_t re_elements_per_cycle = 32;
  uint32_t re_issue_cycles = 8;

  // MLU: bytes moved per cycle, copy and transpose alike.
  uint32_t mlu_bytes_per_cycle = 128;
  uint32_t mlu_issue_cycles = 8;
};

}  // namespace mtia::sim::pe
