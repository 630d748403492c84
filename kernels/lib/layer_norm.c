/* layer_norm over the last dimension of a rows x cols input (the host folds the normalized
 * dimensions into cols and the others into rows), floating dtypes, in fp32:
 *   mean = sum(x) / cols, var = sum((x - mean)^2) / cols, rstd = 1 / sqrt(var + eps)
 *   out  = (x - mean) * rstd * weight + bias
 * weight and bias (contiguous, cols elements of dtype) are optional, and so are the mean and
 * rstd outputs (contiguous, rows fp32 values), as flags say. Three passes over a row's chunks
 * when a row does not fit in one tile; otherwise one visit. */
#include "klib.h"
#include "kred.h"
#include "ksig.h"

#define LN_HAS_WEIGHT 1u
#define LN_HAS_BIAS 2u
#define LN_WRITE_STATS 4u
#define LN_FLAGS_MASK 7u

enum { LN_X, LN_TMP, LN_MEAN, LN_RSTD, LN_STAGE, LN_W, LN_B, LN_RAW, LN_SMEAN, LN_SRSTD };

/* Loads weight or bias elements [r0, r0 + rlen) as fp32 into dst. */
static void ln_load_vec(rjob* j, uint64_t src, uint64_t r0, uint32_t rlen, void* dst) {
  mtia_wait(mtia_dma_in(j->w[LN_RAW], src + r0 * j->es, (uint64_t)rlen * j->es));
  kcast(j->dt, MTIA_PE_DT_FP32, dst, j->w[LN_RAW], rlen);
}

static int proc_ln(rjob* j, const rtile* t, void* tile) {
  const rgeo* g = &j->g;
  const uint64_t flags = j->p[0];
  const int per_row = g->axis == 1; /* the per-row statistics run along the tile's rows */
  void* x = rjob_f32(j, t, tile, j->w[LN_X]);
  void* tmp = j->w[LN_TMP];
  void* mean = j->w[LN_MEAN];
  void* rstd = j->w[LN_RSTD];
  const uint32_t n = t->rows * t->cols;
  const int all = t->pass == KRED_PASS_ALL;

  if (all || t->pass == 0) {
    kre(MTIA_PE_RE_SUM, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, g->axis, !t->first, mean, x, t->rows,
        t->cols);
    if (t->last) {
      kse_imm(MTIA_PE_SE_DIV, MTIA_PE_DT_FP32, mean, mean, ku64_to_f32_bits(g->R), t->clen);
    }
    if (!all) return MTIA_KSTATUS_OK;
  }
  kexpand(tmp, mean, t->rows, t->cols, per_row, 4);
  kse(MTIA_PE_SE_SUB, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, x, x, tmp, 0, n);
  if (all || t->pass == 1) {
    kre(MTIA_PE_RE_SUMSQ, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, g->axis, !t->first, rstd, x, t->rows,
        t->cols);
    if (t->last) {
      kse_imm(MTIA_PE_SE_DIV, MTIA_PE_DT_FP32, rstd, rstd, ku64_to_f32_bits(g->R), t->clen);
      kse_imm(MTIA_PE_SE_ADD, MTIA_PE_DT_FP32, rstd, rstd, j->p[1], t->clen);
      kse(MTIA_PE_SE_RSQRT, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, rstd, rstd, 0, 0, t->clen);
      if (flags & LN_WRITE_STATS) {
        mtia_wait(j->st_tag[1]);
        mtia_wait(j->st_tag[2]);
        kcast(MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, j->w[LN_SMEAN], mean, t->clen);
        kcast(MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, j->w[LN_SRSTD], rstd, t->clen);
        rstore_vec(j, 1, t, j->w[LN_SMEAN]);
        rstore_vec(j, 2, t, j->w[LN_SRSTD]);
      }
    }
    if (!all) return MTIA_KSTATUS_OK;
  }
  /* out = (x - mean) * rstd * weight + bias; x holds x - mean. */
  kexpand(tmp, rstd, t->rows, t->cols, per_row, 4);
  kse(MTIA_PE_SE_MUL, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, x, x, tmp, 0, n);
  /* weight and bias vary along the normalized dimension; reload them only when the chunk of
   * it changes (with one chunk per row they are loaded once per launch). */
  const int reload = j->p[2] != t->r0 + 1;
  if (flags & LN_HAS_WEIGHT) {
    if (reload) ln_load_vec(j, j->p[3], t->r0, t->rlen, j->w[LN_W]);
    kexpand(tmp, j->w[LN_W], t->rows, t->cols, !per_row, 4);
    kse(MTIA_PE_SE_MUL, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, x, x, tmp, 0, n);
  }
  if (flags & LN_HAS_BIAS) {
    if (reload) ln_load_vec(j, j->p[4], t->r0, t->rlen, j->w[LN_B]);
    kexpand(tmp, j->w[LN_B], t->rows, t->cols, !per_row, 4);
    kse(MTIA_PE_SE_ADD, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, x, x, tmp, 0, n);
  }
  j->p[2] = t->r0 + 1;
  mtia_wait(j->st_tag[0]);
  kcast(MTIA_PE_DT_FP32, j->odt[0], j->w[LN_STAGE], x, n);
  rstore_tile(j, 0, t, j->w[LN_STAGE]);
  return MTIA_KSTATUS_OK;
}

typedef struct {
  uint64_t out, mean, rstd, in, weight, bias, dtype, flags, eps;
  int64_t rows, cols, in_row_stride, in_col_stride, out_row_stride, out_col_stride;
} layer_norm_args;

/* flags: 1 apply weight, 2 apply bias, 4 write mean and rstd. eps is an fp32. */
MTIA_KERNEL(layer_norm,
            "out:ptr mean:ptr rstd:ptr in:ptr weight:ptr bias:ptr dtype:dtype flags:i64 eps:f32 "
            "rows:i64 cols:i64 in_row_stride:i64 in_col_stride:i64 out_row_stride:i64 "
            "out_col_stride:i64");
int layer_norm(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(layer_norm_args, A);
  if (!kdt_is_float(A->dtype)) return MTIA_KSTATUS_BAD_DTYPE;
  if ((A->flags & ~(uint64_t)LN_FLAGS_MASK) != 0) return MTIA_KSTATUS_BAD_OP;
  const int64_t out_st[4] = {0, 0, A->out_row_stride, A->out_col_stride};
  if (kcheck_shape(out_st, 4) != MTIA_KSTATUS_OK) return MTIA_KSTATUS_BAD_SHAPE;
  rjob j;
  MTIA_ZERO_(j);
  j.in = A->in;
  j.dt = (uint8_t)A->dtype;
  j.es = kdt_size(A->dtype);
  j.out[0] = A->out;
  j.odt[0] = (uint8_t)A->dtype;
  j.out[1] = A->mean;
  j.out[2] = A->rstd;
  j.odt[1] = j.odt[2] = MTIA_PE_DT_FP32;
  for (int i = 0; i < 4; ++i) j.ost[0][i] = out_st[i];
  /* mean and rstd: one fp32 per row, contiguous (rows run along dimension 2 of the view). */
  j.ost[1][2] = j.ost[2][2] = 1;
  j.p[0] = A->flags;
  j.p[1] = A->eps & 0xffffffffu;
  j.p[2] = 0; /* 1 + the first column of the weight/bias chunk loaded, 0 = none */
  j.p[3] = A->weight;
  j.p[4] = A->bias;
  j.proc = proc_ln;
  const int64_t size[4] = {1, 1, A->rows, A->cols};
  const int64_t in_st[4] = {0, 0, A->in_row_stride, A->in_col_stride};
  const rbuf bufs[10] = {{KB_TILE, 4},
                         {KB_TILE, 4},
                         {KB_CVEC, 4},
                         {KB_CVEC, 4},
                         {KB_TILE, (uint8_t)j.es},
                         {KB_RVEC, 4},
                         {KB_RVEC, 4},
                         {KB_RVEC, (uint8_t)j.es},
                         {KB_CVEC, 4},
                         {KB_CVEC, 4}};
  int empty;
  const int s = rjob_setup(&j, size, in_st, 3, 3, bufs, 10, &empty);
  if (s != MTIA_KSTATUS_OK || empty) return s;
  return rjob_run(&j);
}
