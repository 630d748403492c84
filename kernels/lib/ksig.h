/* Signature fragments shared by the library's MTIA_KERNEL declarations, and the op tables the
 * elementwise kernels check their op codes against. */
#ifndef MTIA_KERNELS_KSIG_H_
#define MTIA_KERNELS_KSIG_H_

#include "klib.h"

/* Four sizes (outermost first) and four element strides of one operand. */
#define KSIG_SIZES "size0:i64 size1:i64 size2:i64 size3:i64"
#define KSIG_STRIDES(p) p "_stride0:i64 " p "_stride1:i64 " p "_stride2:i64 " p "_stride3:i64"

/* The output dtype of SE op `op` on inputs of dtype `dt` with `arity` operands, or 0 when the
 * op is not one of that arity (*status = MTIA_KSTATUS_BAD_OP) or does not take that dtype
 * (*status = MTIA_KSTATUS_BAD_DTYPE). Mirrors the table in docs/pe-isa.md. */
static inline uint8_t kse_out_dtype(uint64_t op, uint64_t dt, int arity, int* status) {
  enum { kNumeric, kFloat, kAny, kIntOrBool } in_class;
  int bool_out = 0;
  int op_arity;
  switch (op) {
    case MTIA_PE_SE_ADD:
    case MTIA_PE_SE_SUB:
    case MTIA_PE_SE_MUL:
    case MTIA_PE_SE_DIV:
    case MTIA_PE_SE_MIN:
    case MTIA_PE_SE_MAX:
      op_arity = 2;
      in_class = kNumeric;
      break;
    case MTIA_PE_SE_ABS:
    case MTIA_PE_SE_NEG:
    case MTIA_PE_SE_RELU:
      op_arity = 1;
      in_class = kNumeric;
      break;
    case MTIA_PE_SE_EXP:
    case MTIA_PE_SE_LOG:
    case MTIA_PE_SE_SQRT:
    case MTIA_PE_SE_RSQRT:
    case MTIA_PE_SE_TANH:
    case MTIA_PE_SE_ERF:
    case MTIA_PE_SE_SIGMOID:
    case MTIA_PE_SE_SILU:
      op_arity = 1;
      in_class = kFloat;
      break;
    case MTIA_PE_SE_EQ:
    case MTIA_PE_SE_NE:
    case MTIA_PE_SE_LT:
    case MTIA_PE_SE_LE:
    case MTIA_PE_SE_GT:
    case MTIA_PE_SE_GE:
    case MTIA_PE_SE_LAND:
    case MTIA_PE_SE_LOR:
    case MTIA_PE_SE_LXOR:
      op_arity = 2;
      in_class = kAny;
      bool_out = 1;
      break;
    case MTIA_PE_SE_LNOT:
      op_arity = 1;
      in_class = kAny;
      bool_out = 1;
      break;
    case MTIA_PE_SE_BAND:
    case MTIA_PE_SE_BOR:
    case MTIA_PE_SE_BXOR:
      op_arity = 2;
      in_class = kIntOrBool;
      break;
    case MTIA_PE_SE_BNOT:
      op_arity = 1;
      in_class = kIntOrBool;
      break;
    default:
      *status = MTIA_KSTATUS_BAD_OP;
      return 0;
  }
  if (op_arity != arity) {
    *status = MTIA_KSTATUS_BAD_OP;
    return 0;
  }
  int ok;
  switch (in_class) {
    case kNumeric:
      ok = kdt_is_float(dt) || kdt_is_int(dt);
      break;
    case kFloat:
      ok = kdt_is_float(dt);
      break;
    case kIntOrBool:
      ok = kdt_is_int(dt) || dt == MTIA_PE_DT_BOOL;
      break;
    default:
      ok = kdt_size(dt) != 0;
      break;
  }
  if (!ok) {
    *status = MTIA_KSTATUS_BAD_DTYPE;
    return 0;
  }
  *status = MTIA_KSTATUS_OK;
  return bool_out ? (uint8_t)MTIA_PE_DT_BOOL : (uint8_t)dt;
}

#endif /* MTIA_KERNELS_KSIG_H_ */
