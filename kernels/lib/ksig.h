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
 * (*status = MTIA_KSTATUS_BAD_DTYPE). Reads the table of isa/pe/se_ops.h. */
static inline uint8_t kse_out_dtype(uint64_t op, uint64_t dt, int arity, int* status) {
  const mtia_pe_se_op_info info = mtia_pe_se_info(op);
  /* SELECT and CAST have kernels of their own (where, cast); they are not unary/binary ops. */
  if (info.arity != arity || op == MTIA_PE_SE_SELECT || op == MTIA_PE_SE_CAST) {
    *status = MTIA_KSTATUS_BAD_OP;
    return 0;
  }
  int ok;
  switch (info.in_class) {
    case MTIA_PE_SE_IN_NUMERIC:
      ok = kdt_is_float(dt) || kdt_is_int(dt);
      break;
    case MTIA_PE_SE_IN_FLOAT:
      ok = kdt_is_float(dt);
      break;
    case MTIA_PE_SE_IN_INT_OR_BOOL:
      ok = kdt_is_int(dt) || dt == MTIA_PE_DT_BOOL;
      break;
    case MTIA_PE_SE_IN_INT:
      ok = kdt_is_int(dt);
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
  return info.out_rule == MTIA_PE_SE_OUT_BOOL ? (uint8_t)MTIA_PE_DT_BOOL : (uint8_t)dt;
}

#endif /* MTIA_KERNELS_KSIG_H_ */
