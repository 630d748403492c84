/* The SE's operations: the one table that the kernels (C99), the simulator's descriptor checks
 * and unit model (C++20) and the tests all read. docs/pe-isa.md explains the columns.
 *
 * Adding an op is a row here plus its math: in the SE unit model (sim/pe/src/se_math.h) and in
 * the tests' independent reference (tests/kernels/reference_ops.h). Codes are part of the
 * descriptor format: never renumber a row.
 *
 * Each row is X(NAME, code, arity, in_class, out_rule, cost, "name"):
 *   arity     operands read: 1 (a), 2 (a, b) or 3 (a, b, c)
 *   in_class  the input dtypes it takes (MTIA_PE_SE_IN_*)
 *   out_rule  its output dtype: the input's, bool, or any (a cast)
 *   cost      cycles per vector (MTIA_PE_SE_COST_*): simple, divide-class, transcendental
 *   "name"    for messages, the name PyTorch gives the op where it has one */
#ifndef MTIA_ISA_PE_SE_OPS_H_
#define MTIA_ISA_PE_SE_OPS_H_

#include <stdint.h>

/* Which input dtypes an op takes. */
enum mtia_pe_se_in_class {
  MTIA_PE_SE_IN_ANY = 0,         /* every dtype */
  MTIA_PE_SE_IN_NUMERIC = 1,     /* fp32 fp16 bf16 int8 int32 int64 */
  MTIA_PE_SE_IN_FLOAT = 2,       /* fp32 fp16 bf16 */
  MTIA_PE_SE_IN_INT_OR_BOOL = 3, /* int8 int32 int64 bool */
  MTIA_PE_SE_IN_INT = 4          /* int8 int32 int64 */
};

/* The output dtype. */
enum mtia_pe_se_out_rule {
  MTIA_PE_SE_OUT_SAME = 0, /* the input dtype */
  MTIA_PE_SE_OUT_BOOL = 1, /* bool */
  MTIA_PE_SE_OUT_ANY = 2   /* any dtype (cast) */
};

/* Cycles per vector: UnitTiming's se_simple_cycles, se_divide_cycles or
 * se_transcendental_cycles. */
enum mtia_pe_se_cost {
  MTIA_PE_SE_COST_SIMPLE = 0,
  MTIA_PE_SE_COST_DIVIDE = 1,
  MTIA_PE_SE_COST_TRANSCENDENTAL = 2
};

/* clang-format off */
#define MTIA_PE_SE_OPS(X)                                                   \
  /* arithmetic: integers wrap */                                           \
  X(ADD,         1, 2, NUMERIC,     SAME, SIMPLE,         "add")            \
  X(SUB,         2, 2, NUMERIC,     SAME, SIMPLE,         "sub")            \
  X(MUL,         3, 2, NUMERIC,     SAME, SIMPLE,         "mul")            \
  X(DIV,         4, 2, NUMERIC,     SAME, DIVIDE,         "div")            \
  X(MIN,         5, 2, NUMERIC,     SAME, SIMPLE,         "min")            \
  X(MAX,         6, 2, NUMERIC,     SAME, SIMPLE,         "max")            \
  X(ABS,         7, 1, NUMERIC,     SAME, SIMPLE,         "abs")            \
  X(NEG,         8, 1, NUMERIC,     SAME, SIMPLE,         "neg")            \
  /* transcendental and activation functions */                             \
  X(EXP,         9, 1, FLOAT,       SAME, TRANSCENDENTAL, "exp")            \
  X(LOG,        10, 1, FLOAT,       SAME, TRANSCENDENTAL, "log")            \
  X(SQRT,       11, 1, FLOAT,       SAME, DIVIDE,         "sqrt")           \
  X(RSQRT,      12, 1, FLOAT,       SAME, DIVIDE,         "rsqrt")          \
  X(TANH,       13, 1, FLOAT,       SAME, TRANSCENDENTAL, "tanh")           \
  X(ERF,        14, 1, FLOAT,       SAME, TRANSCENDENTAL, "erf")            \
  X(SIGMOID,    15, 1, FLOAT,       SAME, TRANSCENDENTAL, "sigmoid")        \
  X(RELU,       16, 1, NUMERIC,     SAME, SIMPLE,         "relu")           \
  X(SILU,       17, 1, FLOAT,       SAME, TRANSCENDENTAL, "silu")           \
  /* comparisons */                                                         \
  X(EQ,         18, 2, ANY,         BOOL, SIMPLE,         "eq")             \
  X(NE,         19, 2, ANY,         BOOL, SIMPLE,         "ne")             \
  X(LT,         20, 2, ANY,         BOOL, SIMPLE,         "lt")             \
  X(LE,         21, 2, ANY,         BOOL, SIMPLE,         "le")             \
  X(GT,         22, 2, ANY,         BOOL, SIMPLE,         "gt")             \
  X(GE,         23, 2, ANY,         BOOL, SIMPLE,         "ge")             \
  /* logical: operands are true when non-zero */                            \
  X(LAND,       24, 2, ANY,         BOOL, SIMPLE,         "logical_and")    \
  X(LOR,        25, 2, ANY,         BOOL, SIMPLE,         "logical_or")     \
  X(LXOR,       26, 2, ANY,         BOOL, SIMPLE,         "logical_xor")    \
  X(LNOT,       27, 1, ANY,         BOOL, SIMPLE,         "logical_not")    \
  /* bitwise */                                                             \
  X(BAND,       28, 2, INT_OR_BOOL, SAME, SIMPLE,         "bitwise_and")    \
  X(BOR,        29, 2, INT_OR_BOOL, SAME, SIMPLE,         "bitwise_or")     \
  X(BXOR,       30, 2, INT_OR_BOOL, SAME, SIMPLE,         "bitwise_xor")    \
  X(BNOT,       31, 1, INT_OR_BOOL, SAME, SIMPLE,         "bitwise_not")    \
  /* a ? b : c with a bool, b and c of the input dtype */                   \
  X(SELECT,     32, 3, ANY,         SAME, SIMPLE,         "select")         \
  /* min(max(a, b), c) */                                                   \
  X(CLAMP,      33, 3, NUMERIC,     SAME, SIMPLE,         "clamp")          \
  /* (out_dtype)a */                                                        \
  X(CAST,       34, 1, ANY,         ANY,  SIMPLE,         "cast")           \
  /* trigonometric, hyperbolic, exponential and logarithmic functions */    \
  X(SIN,        35, 1, FLOAT,       SAME, TRANSCENDENTAL, "sin")            \
  X(COS,        36, 1, FLOAT,       SAME, TRANSCENDENTAL, "cos")            \
  X(TAN,        37, 1, FLOAT,       SAME, TRANSCENDENTAL, "tan")            \
  X(ASIN,       38, 1, FLOAT,       SAME, TRANSCENDENTAL, "asin")           \
  X(ACOS,       39, 1, FLOAT,       SAME, TRANSCENDENTAL, "acos")           \
  X(ATAN,       40, 1, FLOAT,       SAME, TRANSCENDENTAL, "atan")           \
  X(SINH,       41, 1, FLOAT,       SAME, TRANSCENDENTAL, "sinh")           \
  X(COSH,       42, 1, FLOAT,       SAME, TRANSCENDENTAL, "cosh")           \
  X(ASINH,      43, 1, FLOAT,       SAME, TRANSCENDENTAL, "asinh")          \
  X(ACOSH,      44, 1, FLOAT,       SAME, TRANSCENDENTAL, "acosh")          \
  X(ATANH,      45, 1, FLOAT,       SAME, TRANSCENDENTAL, "atanh")          \
  X(EXPM1,      46, 1, FLOAT,       SAME, TRANSCENDENTAL, "expm1")          \
  X(LOG1P,      47, 1, FLOAT,       SAME, TRANSCENDENTAL, "log1p")          \
  X(LOG2,       48, 1, FLOAT,       SAME, TRANSCENDENTAL, "log2")           \
  X(LOG10,      49, 1, FLOAT,       SAME, TRANSCENDENTAL, "log10")          \
  X(EXP2,       50, 1, FLOAT,       SAME, TRANSCENDENTAL, "exp2")           \
  X(ERFC,       51, 1, FLOAT,       SAME, TRANSCENDENTAL, "erfc")           \
  X(LGAMMA,     52, 1, FLOAT,       SAME, TRANSCENDENTAL, "lgamma")         \
  /* rounding: floor, ceil, to nearest even, toward zero */                 \
  X(FLOOR,      53, 1, FLOAT,       SAME, SIMPLE,         "floor")          \
  X(CEIL,       54, 1, FLOAT,       SAME, SIMPLE,         "ceil")           \
  X(ROUND,      55, 1, FLOAT,       SAME, SIMPLE,         "round")          \
  X(TRUNC,      56, 1, FLOAT,       SAME, SIMPLE,         "trunc")          \
  X(RECIPROCAL, 57, 1, FLOAT,       SAME, DIVIDE,         "reciprocal")     \
  /* -1, 0 or 1 (NaN stays NaN) */                                          \
  X(SIGN,       58, 1, NUMERIC,     SAME, SIMPLE,         "sign")           \
  X(POW,        59, 2, FLOAT,       SAME, TRANSCENDENTAL, "pow")            \
  X(ATAN2,      60, 2, FLOAT,       SAME, TRANSCENDENTAL, "atan2")          \
  /* remainders and floor division; an integer divisor of 0 gives 0 */      \
  X(FMOD,       61, 2, NUMERIC,     SAME, DIVIDE,         "fmod")           \
  X(REMAINDER,  62, 2, NUMERIC,     SAME, DIVIDE,         "remainder")      \
  X(FLOOR_DIV,  63, 2, NUMERIC,     SAME, DIVIDE,         "floor_divide")   \
  /* shifts by b bits: past the width, 0 (left) or the sign (right) */      \
  X(SHL,        64, 2, INT,         SAME, SIMPLE,         "bitwise_left_shift")  \
  X(SHR,        65, 2, INT,         SAME, SIMPLE,         "bitwise_right_shift") \
  /* GELU, exact (erf) and with the tanh approximation */                   \
  X(GELU,       66, 1, FLOAT,       SAME, TRANSCENDENTAL, "gelu")           \
  X(GELU_TANH,  67, 1, FLOAT,       SAME, TRANSCENDENTAL, "gelu_tanh")      \
  X(HYPOT,      68, 2, FLOAT,       SAME, DIVIDE,         "hypot")          \
  X(COPYSIGN,   69, 2, FLOAT,       SAME, SIMPLE,         "copysign")       \
  /* the derivatives of GELU and GELU_TANH (their backward passes) */       \
  X(GELU_GRAD,      70, 1, FLOAT,   SAME, TRANSCENDENTAL, "gelu_grad")      \
  X(GELU_TANH_GRAD, 71, 1, FLOAT,   SAME, TRANSCENDENTAL, "gelu_tanh_grad")
/* clang-format on */

/* What the table says about one op; arity 0 and name NULL for a code that is not an op. */
typedef struct mtia_pe_se_op_info {
  uint8_t arity;    /* 1..3 */
  uint8_t in_class; /* enum mtia_pe_se_in_class */
  uint8_t out_rule; /* enum mtia_pe_se_out_rule */
  uint8_t cost;     /* enum mtia_pe_se_cost */
  const char* name;
} mtia_pe_se_op_info;

static inline mtia_pe_se_op_info mtia_pe_se_info(uint64_t op) {
  mtia_pe_se_op_info info = {0, 0, 0, 0, 0};
  switch (op) {
#define MTIA_PE_SE_INFO_CASE(NAME_, code_, arity_, in_, out_, cost_, name_) \
  case code_:                                                               \
    info.arity = arity_;                                                    \
    info.in_class = MTIA_PE_SE_IN_##in_;                                    \
    info.out_rule = MTIA_PE_SE_OUT_##out_;                                  \
    info.cost = MTIA_PE_SE_COST_##cost_;                                    \
    info.name = name_;                                                      \
    break;
    MTIA_PE_SE_OPS(MTIA_PE_SE_INFO_CASE)
#undef MTIA_PE_SE_INFO_CASE
    default:
      break;
  }
  return info;
}

#endif /* MTIA_ISA_PE_SE_OPS_H_ */
