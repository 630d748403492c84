/* softmax and log_softmax along one dimension of a 4-D input (any dim; the last one is the
 * usual case), floating dtypes, computed in fp32 and rounded to the dtype once:
 *   softmax(x)     = exp(x - max) / sum(exp(x - max))
 *   log_softmax(x) = (x - max) - log(sum(exp(x - max)))
 * When the dimension fits in one tile each block is loaded once; otherwise three passes over
 * its chunks: the running max, the running sum of exponentials, then the output. */
#include "klib.h"
#include "kred.h"
#include "ksig.h"

enum { SM_X, SM_TMP, SM_MAX, SM_SUM, SM_STAGE };

static int proc_softmax(rjob* j, const rtile* t, void* tile) {
  const rgeo* g = &j->g;
  const int log_form = j->p[0] != 0;
  const int per_row = g->axis == 1; /* the per-output vectors run along the tile's rows */
  void* x = rjob_f32(j, t, tile, j->w[SM_X]);
  void* tmp = j->w[SM_TMP];
  void* mx = j->w[SM_MAX];
  void* sm = j->w[SM_SUM];
  const uint32_t n = t->rows * t->cols;
  const int all = t->pass == KRED_PASS_ALL;

  if (all || t->pass == 0) {
    kre(MTIA_PE_RE_MAX, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, g->axis, !t->first, mx, x, t->rows,
        t->cols);
    if (!all) return MTIA_KSTATUS_OK;
  }
  /* x - max, in place */
  kexpand(tmp, mx, t->rows, t->cols, per_row, 4);
  kse(MTIA_PE_SE_SUB, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, x, x, tmp, 0, n);
  if (all || t->pass == 1) {
    kse(MTIA_PE_SE_EXP, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, tmp, x, 0, 0, n);
    kre(MTIA_PE_RE_SUM, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, g->axis, !t->first, sm, tmp, t->rows,
        t->cols);
    if (log_form && t->last) {
      kse(MTIA_PE_SE_LOG, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, sm, sm, 0, 0, t->clen);
    }
    if (!all) return MTIA_KSTATUS_OK;
  }
  /* The output: x holds x - max; sm holds the sum (log_softmax: its log). */
  kexpand(tmp, sm, t->rows, t->cols, per_row, 4);
  if (log_form) {
    kse(MTIA_PE_SE_SUB, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, x, x, tmp, 0, n);
  } else {
    kse(MTIA_PE_SE_EXP, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, x, x, 0, 0, n);
    kse(MTIA_PE_SE_DIV, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, x, x, tmp, 0, n);
  }
  mtia_wait(j->st_tag[0]); /* the previous tile has left the staging buffer */
  kcast(MTIA_PE_DT_FP32, j->odt[0], j->w[SM_STAGE], x, n);
  rstore_tile(j, 0, t, j->w[SM_STAGE]);
  return MTIA_KSTATUS_OK;
}

typedef struct {
  uint64_t out, in, dtype;
  int64_t dim, size[4], in_st[4], out_st[4];
} softmax_args;

static int run_softmax(int log_form, const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(softmax_args, A);
  if (!kdt_is_float(A->dtype)) return MTIA_KSTATUS_BAD_DTYPE;
  if (kcheck_shape(A->out_st, 4) != MTIA_KSTATUS_OK) return MTIA_KSTATUS_BAD_SHAPE;
  rjob j;
  MTIA_ZERO_(j);
  j.in = A->in;
  j.dt = (uint8_t)A->dtype;
  j.es = kdt_size(A->dtype);
  j.out[0] = A->out;
  j.odt[0] = (uint8_t)A->dtype;
  for (int i = 0; i < 4; ++i) j.ost[0][i] = A->out_st[i];
  j.p[0] = (uint64_t)log_form;
  j.proc = proc_softmax;
  const rbuf bufs[5] = {
      {KB_TILE, 4}, {KB_TILE, 4}, {KB_CVEC, 4}, {KB_CVEC, 4}, {KB_TILE, (uint8_t)j.es}};
  int empty;
  const int s = rjob_setup(&j, A->size, A->in_st, A->dim, 3, bufs, 5, &empty);
  if (s != MTIA_KSTATUS_OK || empty) return s;
  return rjob_run(&j);
}

#define KSIG_SOFTMAX \
  "out:ptr in:ptr dtype:dtype dim:i64 " KSIG_SIZES " " KSIG_STRIDES("in") " " KSIG_STRIDES("out")

MTIA_KERNEL(softmax, KSIG_SOFTMAX);
int softmax(const uint64_t* args, uint64_t args_bytes) {
  return run_softmax(0, args, args_bytes);
}

MTIA_KERNEL(log_softmax, KSIG_SOFTMAX);
int log_softmax(const uint64_t* args, uint64_t args_bytes) {
  return run_softmax(1, args, args_bytes);
}
