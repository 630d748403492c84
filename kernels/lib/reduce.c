/* Reductions along one dimension of a 4-D input: sum, mean, amax, amin, var, max_dim and
 * min_dim. The output has the input's shape with `dim` reduced to size 1 (keepdim); its
 * strides are given in the input's dimension order, and the stride of `dim` is ignored, so a
 * keepdim=False output is the same view. A full reduction of a contiguous tensor is a
 * reduction of dim 3 of the view [1, 1, 1, numel]. Accumulation is in fp32 for floating
 * inputs and int64 for integer ones; each result is rounded to the output dtype once. */
#include "klib.h"
#include "kred.h"
#include "ksig.h"

#define KSIG_REDUCE_TAIL "dim:i64 " KSIG_SIZES " " KSIG_STRIDES("in")

/* Fills j's input and single output from the common argument layout. */
static void rjob_io(rjob* j, uint64_t in, uint64_t dt) {
  j->in = in;
  j->dt = (uint8_t)dt;
  j->es = kdt_size(dt);
}

/* The accumulator dtype of sum: fp32 for floating inputs, int64 for integers and bool. */
static uint8_t sum_acc_dtype(uint64_t dt) {
  return kdt_is_float(dt) ? (uint8_t)MTIA_PE_DT_FP32 : (uint8_t)MTIA_PE_DT_INT64;
}

/* ---- sum, mean, amax, amin: one RE op per tile, accumulated across chunks ------------------ */
enum { SIMPLE_SUM, SIMPLE_MEAN, SIMPLE_MAX, SIMPLE_MIN };

static int proc_simple(rjob* j, const rtile* t, void* tile) {
  const int kind = (int)j->p[0];
  void* acc = j->w[0];
  void* stage = j->w[1];
  const uint8_t acc_dt = (kind == SIMPLE_SUM || kind == SIMPLE_MEAN) ? sum_acc_dtype(j->dt) : j->dt;
  const uint8_t op = kind == SIMPLE_MAX   ? MTIA_PE_RE_MAX
                     : kind == SIMPLE_MIN ? MTIA_PE_RE_MIN
                                          : MTIA_PE_RE_SUM;
  kre(op, j->dt, acc_dt, j->g.axis, !t->first, acc, tile, t->rows, t->cols);
  if (!t->last) return MTIA_KSTATUS_OK;
  if (kind == SIMPLE_MEAN) {
    kse_imm(MTIA_PE_SE_DIV, MTIA_PE_DT_FP32, acc, acc, ku64_to_f32_bits(j->g.R), t->clen);
  }
  mtia_wait(j->st_tag[0]); /* the previous block's result has left the staging buffer */
  kcast(acc_dt, j->odt[0], stage, acc, t->clen);
  rstore_vec(j, 0, t, stage);
  return MTIA_KSTATUS_OK;
}

static int run_simple(int kind, uint64_t out, uint64_t in, uint64_t in_dt, uint64_t out_dt,
                      int64_t dim, const int64_t* size, const int64_t* in_st,
                      const int64_t* out_st) {
  rjob j;
  MTIA_ZERO_(j);
  rjob_io(&j, in, in_dt);
  j.out[0] = out;
  j.odt[0] = (uint8_t)out_dt;
  for (int i = 0; i < 4; ++i) j.ost[0][i] = out_st[i];
  if (kcheck_shape(out_st, 4) != MTIA_KSTATUS_OK) return MTIA_KSTATUS_BAD_SHAPE;
  j.p[0] = (uint64_t)kind;
  j.proc = proc_simple;
  const rbuf bufs[2] = {{KB_CVEC, 8}, {KB_CVEC, 8}};
  int empty;
  const int s = rjob_setup(&j, size, in_st, dim, 1, bufs, 2, &empty);
  if (s != MTIA_KSTATUS_OK || empty) return s;
  return rjob_run(&j);
}

typedef struct {
  uint64_t out, in, in_dtype, out_dtype;
  int64_t dim, size[4], in_st[4], out_st[4];
} sum_args;

/* sum: floating inputs give fp32, fp16 or bf16; integer and bool inputs give int32 or int64. */
MTIA_KERNEL(sum, "out:ptr in:ptr in_dtype:dtype out_dtype:dtype " KSIG_REDUCE_TAIL
                 " " KSIG_STRIDES("out"));
int sum(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(sum_args, A);
  const int fin = kdt_is_float(A->in_dtype);
  const int iin = kdt_is_int(A->in_dtype) || A->in_dtype == MTIA_PE_DT_BOOL;
  const int ok = (fin && kdt_is_float(A->out_dtype)) ||
                 (iin && (A->out_dtype == MTIA_PE_DT_INT32 || A->out_dtype == MTIA_PE_DT_INT64));
  if (!ok) return MTIA_KSTATUS_BAD_DTYPE;
  return run_simple(SIMPLE_SUM, A->out, A->in, A->in_dtype, A->out_dtype, A->dim, A->size, A->in_st,
                    A->out_st);
}

typedef struct {
  uint64_t out, in, dtype;
  int64_t dim, size[4], in_st[4], out_st[4];
} reduce_args;

/* mean: floating dtypes; the output has the input's dtype. */
MTIA_KERNEL(mean, "out:ptr in:ptr dtype:dtype " KSIG_REDUCE_TAIL " " KSIG_STRIDES("out"));
int mean(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(reduce_args, A);
  if (!kdt_is_float(A->dtype)) return MTIA_KSTATUS_BAD_DTYPE;
  return run_simple(SIMPLE_MEAN, A->out, A->in, A->dtype, A->dtype, A->dim, A->size, A->in_st,
                    A->out_st);
}

/* amax / amin: every dtype; NaN propagates. */
MTIA_KERNEL(amax, "out:ptr in:ptr dtype:dtype " KSIG_REDUCE_TAIL " " KSIG_STRIDES("out"));
int amax(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(reduce_args, A);
  if (kdt_size(A->dtype) == 0) return MTIA_KSTATUS_BAD_DTYPE;
  return run_simple(SIMPLE_MAX, A->out, A->in, A->dtype, A->dtype, A->dim, A->size, A->in_st,
                    A->out_st);
}

MTIA_KERNEL(amin, "out:ptr in:ptr dtype:dtype " KSIG_REDUCE_TAIL " " KSIG_STRIDES("out"));
int amin(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(reduce_args, A);
  if (kdt_size(A->dtype) == 0) return MTIA_KSTATUS_BAD_DTYPE;
  return run_simple(SIMPLE_MIN, A->out, A->in, A->dtype, A->dtype, A->dim, A->size, A->in_st,
                    A->out_st);
}

/* ---- var: two passes, mean first, then the sum of squared deviations --------------------- */
enum { VAR_X, VAR_TMP, VAR_SUM, VAR_SQ, VAR_STAGE };

static int proc_var(rjob* j, const rtile* t, void* tile) {
  const rgeo* g = &j->g;
  void* x = rjob_f32(j, t, tile, j->w[VAR_X]);
  void* tmp = j->w[VAR_TMP];
  void* mean = j->w[VAR_SUM];
  void* sq = j->w[VAR_SQ];
  const uint32_t n = t->rows * t->cols;
  if (t->pass == KRED_PASS_ALL || t->pass == 0) {
    kre(MTIA_PE_RE_SUM, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, g->axis, !t->first, mean, x, t->rows,
        t->cols);
    if (t->last)
      kse_imm(MTIA_PE_SE_DIV, MTIA_PE_DT_FP32, mean, mean, ku64_to_f32_bits(g->R), t->clen);
  }
  if (t->pass == KRED_PASS_ALL || t->pass == 1) {
    kexpand(tmp, mean, t->rows, t->cols, g->axis == 1, 4);
    kse(MTIA_PE_SE_SUB, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, tmp, x, tmp, 0, n);
    kre(MTIA_PE_RE_SUMSQ, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, g->axis, !t->first, sq, tmp, t->rows,
        t->cols);
    if (t->last) {
      const int64_t corr = (int64_t)j->p[0];
      const uint64_t denom = (int64_t)g->R > corr ? (uint64_t)((int64_t)g->R - corr) : 0;
      kse_imm(MTIA_PE_SE_DIV, MTIA_PE_DT_FP32, sq, sq, ku64_to_f32_bits(denom), t->clen);
      mtia_wait(j->st_tag[0]);
      kcast(MTIA_PE_DT_FP32, j->odt[0], j->w[VAR_STAGE], sq, t->clen);
      rstore_vec(j, 0, t, j->w[VAR_STAGE]);
    }
  }
  return MTIA_KSTATUS_OK;
}

typedef struct {
  uint64_t out, in, dtype;
  int64_t correction, dim, size[4], in_st[4], out_st[4];
} var_args;

/* var: floating dtypes; sum((x - mean)^2) / max(R - correction, 0) (correction 1: unbiased). */
MTIA_KERNEL(var,
            "out:ptr in:ptr dtype:dtype correction:i64 " KSIG_REDUCE_TAIL " " KSIG_STRIDES("out"));
int var(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(var_args, A);
  if (!kdt_is_float(A->dtype)) return MTIA_KSTATUS_BAD_DTYPE;
  if (kcheck_shape(A->out_st, 4) != MTIA_KSTATUS_OK) return MTIA_KSTATUS_BAD_SHAPE;
  rjob j;
  MTIA_ZERO_(j);
  rjob_io(&j, A->in, A->dtype);
  j.out[0] = A->out;
  j.odt[0] = (uint8_t)A->dtype;
  for (int i = 0; i < 4; ++i) j.ost[0][i] = A->out_st[i];
  j.p[0] = (uint64_t)A->correction;
  j.proc = proc_var;
  const rbuf bufs[5] = {{KB_TILE, 4}, {KB_TILE, 4}, {KB_CVEC, 4}, {KB_CVEC, 4}, {KB_CVEC, 4}};
  int empty;
  const int s = rjob_setup(&j, A->size, A->in_st, A->dim, 2, bufs, 5, &empty);
  if (s != MTIA_KSTATUS_OK || empty) return s;
  return rjob_run(&j);
}

/* ---- max_dim / min_dim: values and int64 indices (the first extreme; a NaN is the extreme) --
 * Chunks of the reduced dimension are combined with the SE: a chunk's candidate replaces the
 * running one where it is strictly better, or where it is NaN and the running one is not. */
enum { MD_TV, MD_TI, MD_AV, MD_AI, MD_M1, MD_M2, MD_M3, MD_SV, MD_SI };

static int proc_maxmin(rjob* j, const rtile* t, void* tile) {
  const rgeo* g = &j->g;
  const int is_max = j->p[0] != 0;
  const uint8_t vop = is_max ? MTIA_PE_RE_MAX : MTIA_PE_RE_MIN;
  const uint8_t iop = is_max ? MTIA_PE_RE_ARGMAX : MTIA_PE_RE_ARGMIN;
  const uint8_t dt = j->dt;
  const uint32_t n = t->clen;
  void** w = j->w;
  if (t->first) {
    kre(vop, dt, dt, g->axis, 0, w[MD_AV], tile, t->rows, t->cols);
    kre(iop, dt, MTIA_PE_DT_INT64, g->axis, 0, w[MD_AI], tile, t->rows, t->cols);
  } else {
    kre(vop, dt, dt, g->axis, 0, w[MD_TV], tile, t->rows, t->cols);
    kre(iop, dt, MTIA_PE_DT_INT64, g->axis, 0, w[MD_TI], tile, t->rows, t->cols);
    kse_imm(MTIA_PE_SE_ADD, MTIA_PE_DT_INT64, w[MD_TI], w[MD_TI], t->r0, n);
    kse(is_max ? MTIA_PE_SE_GT : MTIA_PE_SE_LT, dt, MTIA_PE_DT_BOOL, w[MD_M1], w[MD_TV], w[MD_AV],
        0, n);
    if (kdt_is_float(dt)) {
      /* m1 |= isnan(candidate) && !isnan(running) */
      kse(MTIA_PE_SE_NE, dt, MTIA_PE_DT_BOOL, w[MD_M2], w[MD_TV], w[MD_TV], 0, n);
      kse(MTIA_PE_SE_EQ, dt, MTIA_PE_DT_BOOL, w[MD_M3], w[MD_AV], w[MD_AV], 0, n);
      kse(MTIA_PE_SE_LAND, MTIA_PE_DT_BOOL, MTIA_PE_DT_BOOL, w[MD_M2], w[MD_M2], w[MD_M3], 0, n);
      kse(MTIA_PE_SE_LOR, MTIA_PE_DT_BOOL, MTIA_PE_DT_BOOL, w[MD_M1], w[MD_M1], w[MD_M2], 0, n);
    }
    kse(MTIA_PE_SE_SELECT, dt, dt, w[MD_AV], w[MD_M1], w[MD_TV], w[MD_AV], n);
    kse(MTIA_PE_SE_SELECT, MTIA_PE_DT_INT64, MTIA_PE_DT_INT64, w[MD_AI], w[MD_M1], w[MD_TI],
        w[MD_AI], n);
  }
  if (!t->last) return MTIA_KSTATUS_OK;
  mtia_wait(j->st_tag[0]);
  mtia_wait(j->st_tag[1]);
  kcast(dt, dt, w[MD_SV], w[MD_AV], n);
  kcast(MTIA_PE_DT_INT64, MTIA_PE_DT_INT64, w[MD_SI], w[MD_AI], n);
  rstore_vec(j, 0, t, w[MD_SV]);
  rstore_vec(j, 1, t, w[MD_SI]);
  return MTIA_KSTATUS_OK;
}

typedef struct {
  uint64_t values, indices, in, dtype;
  int64_t dim, size[4], in_st[4], values_st[4], indices_st[4];
} maxmin_args;

static int run_maxmin(int is_max, const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(maxmin_args, A);
  if (kdt_size(A->dtype) == 0) return MTIA_KSTATUS_BAD_DTYPE;
  if (kcheck_shape(A->values_st, 4) != MTIA_KSTATUS_OK ||
      kcheck_shape(A->indices_st, 4) != MTIA_KSTATUS_OK) {
    return MTIA_KSTATUS_BAD_SHAPE;
  }
  rjob j;
  MTIA_ZERO_(j);
  rjob_io(&j, A->in, A->dtype);
  j.out[0] = A->values;
  j.odt[0] = (uint8_t)A->dtype;
  j.out[1] = A->indices;
  j.odt[1] = MTIA_PE_DT_INT64;
  for (int i = 0; i < 4; ++i) {
    j.ost[0][i] = A->values_st[i];
    j.ost[1][i] = A->indices_st[i];
  }
  j.p[0] = (uint64_t)is_max;
  j.proc = proc_maxmin;
  const rbuf bufs[9] = {{KB_CVEC, 8}, {KB_CVEC, 8}, {KB_CVEC, 8}, {KB_CVEC, 8}, {KB_CVEC, 1},
                        {KB_CVEC, 1}, {KB_CVEC, 1}, {KB_CVEC, 8}, {KB_CVEC, 8}};
  int empty;
  const int s = rjob_setup(&j, A->size, A->in_st, A->dim, 1, bufs, 9, &empty);
  if (s != MTIA_KSTATUS_OK || empty) return s;
  return rjob_run(&j);
}

#define KSIG_MAXMIN                                             \
  "values:ptr indices:ptr in:ptr dtype:dtype " KSIG_REDUCE_TAIL \
  " " KSIG_STRIDES("values") " " KSIG_STRIDES("indices")

/* max_dim / min_dim: every dtype; values in the input dtype, indices int64. */
MTIA_KERNEL(max_dim, KSIG_MAXMIN);
int max_dim(const uint64_t* args, uint64_t args_bytes) {
  return run_maxmin(1, args, args_bytes);
}

MTIA_KERNEL(min_dim, KSIG_MAXMIN);
int min_dim(const uint64_t* args, uint64_t args_bytes) {
  return run_maxmin(0, args, args_bytes);
}
