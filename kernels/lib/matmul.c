/* matmul, bmm and addmm on the DPE.
 *
 * C[b] = A[b] @ B[b] for every batch b, A m x k, B k x n, every operand a strided view (element
 * strides; a batch stride of 0 broadcasts). The output is cut into tm x tn tiles (the last
 * ones may be smaller), dealt round-robin to the PEs of the launch; each PE walks the k
 * dimension of its tiles in tk steps. A and B tiles are double-buffered: while the DPE
 * multiplies step s, the DMA brings in step s+1 (across tile boundaries too), and the output
 * of tile t leaves while tile t+1 is computed (two accumulators).
 *
 * Operands stored column-major (unit stride down the rows: e.g. the transposed weight of a
 * linear layer) are loaded as they lie and multiplied with the DPE's TRANS_A / TRANS_B flags,
 * so the DMA moves contiguous runs; any other layout is gathered by the DMA.
 *
 * dtypes: in fp32 -> out fp32; fp16 / bf16 -> out the same or fp32; int8 -> out int32.
 * Accumulation is fp32 (int32 for int8); the result is rounded to the output dtype once. */
#include "klib.h"
#include "ksig.h"

typedef struct mmjob {
  uint8_t in_dt, out_dt, acc_dt;
  unsigned ies, oes, aes;
  uint64_t batch, m, n, k;
  uint64_t a, b, c, bias;
  int64_t sa[3], sb[3], sc[3], sbias[2]; /* (batch,) row, column strides in elements */
  int trans_a, trans_b;
  int has_bias;
  uint32_t alpha, beta; /* fp32 bit patterns */
  uint64_t tm, tn, tk;
  uint64_t ntm, ntn, nk, ntiles;
  void* A[2];
  void* B[2];
  void* C[2];
  void* S[2]; /* output staging when the output dtype is not the accumulator's */
  void* bias_raw;
  void* bias_f;
} mmjob;

typedef struct mmtile {
  uint64_t bi, i0, j0, mlen, nlen;
} mmtile;

static void mm_tile(const mmjob* j, uint64_t t, mmtile* o) {
  const uint64_t ni = t % j->ntn;
  const uint64_t rest = t / j->ntn;
  const uint64_t mi = rest % j->ntm;
  o->bi = rest / j->ntm;
  o->i0 = mi * j->tm;
  o->j0 = ni * j->tn;
  o->mlen = KMIN(j->tm, j->m - o->i0);
  o->nlen = KMIN(j->tn, j->n - o->j0);
}

/* Local-store bytes for tiles tm x tn x tk. */
static uint64_t mm_need(const mmjob* j, uint64_t tm, uint64_t tn, uint64_t tk) {
  uint64_t need = 2 * (kalloc_bytes(tm * tk * j->ies) + kalloc_bytes(tk * tn * j->ies));
  need += 2 * kalloc_bytes(tm * tn * j->aes);
  if (j->out_dt != j->acc_dt) need += 2 * kalloc_bytes(tm * tn * j->oes);
  if (j->has_bias) need += kalloc_bytes(tm * tn * j->oes) + kalloc_bytes(tm * tn * 4);
  return need;
}

static int mm_plan(mmjob* j) {
  static const uint16_t cand[][3] = {{128, 128, 64}, {128, 128, 32}, {128, 64, 32}, {64, 64, 64},
                                     {64, 64, 32},   {32, 32, 32},   {16, 16, 16},  {8, 8, 8}};
  karena a;
  karena_init(&a);
  const uint64_t left = karena_left(&a);
  int found = 0;
  for (unsigned i = 0; i < sizeof cand / sizeof cand[0] && !found; ++i) {
    if (mm_need(j, cand[i][0], cand[i][1], cand[i][2]) <= left) {
      j->tm = cand[i][0];
      j->tn = cand[i][1];
      j->tk = cand[i][2];
      found = 1;
    }
  }
  if (!found) return MTIA_KSTATUS_NO_LOCAL_STORE;
  j->tm = KMIN(j->tm, j->m);
  j->tn = KMIN(j->tn, j->n);
  j->tk = KMIN(j->tk, KMAX(j->k, 1u));
  /* Small outputs: smaller tiles, so that the work spreads over the PEs. */
  const uint64_t pes = mtia_num_pes();
  for (;;) {
    const uint64_t tiles = j->batch * kceil_div(j->m, j->tm) * kceil_div(j->n, j->tn);
    if (tiles >= pes) break;
    if (j->tm >= j->tn && j->tm > 8) {
      j->tm = kceil_div(j->tm, 2);
    } else if (j->tn > 8) {
      j->tn = kceil_div(j->tn, 2);
    } else {
      break;
    }
  }
  j->ntm = kceil_div(j->m, j->tm);
  j->ntn = kceil_div(j->n, j->tn);
  j->nk = kceil_div(j->k, j->tk);
  j->ntiles = j->batch * j->ntm * j->ntn;
  for (int s = 0; s < 2; ++s) {
    j->A[s] = kalloc(&a, j->tm * j->tk * j->ies);
    j->B[s] = kalloc(&a, j->tk * j->tn * j->ies);
    j->C[s] = kalloc(&a, j->tm * j->tn * j->aes);
    j->S[s] = j->out_dt != j->acc_dt ? kalloc(&a, j->tm * j->tn * j->oes) : j->C[s];
  }
  if (j->has_bias) {
    j->bias_raw = kalloc(&a, j->tm * j->tn * j->oes);
    j->bias_f = kalloc(&a, j->tm * j->tn * 4);
  }
  return MTIA_KSTATUS_OK;
}

/* Issues the DMA of the A and B tiles of k-step kk of tile t into buffer set s. */
static void mm_load(const mmjob* j, const mmtile* t, uint64_t kk, int s, mtia_tag_t* la,
                    mtia_tag_t* lb) {
  const uint64_t k0 = kk * j->tk;
  const uint64_t klen = KMIN(j->tk, j->k - k0);
  const uint64_t a0 = j->a + (t->bi * j->sa[0] + t->i0 * j->sa[1] + k0 * j->sa[2]) * j->ies;
  const uint64_t b0 = j->b + (t->bi * j->sb[0] + k0 * j->sb[1] + t->j0 * j->sb[2]) * j->ies;
  *la = j->trans_a ? ktile_in(j->A[s], a0, j->sa[2], j->sa[1], klen, t->mlen, j->ies)
                   : ktile_in(j->A[s], a0, j->sa[1], j->sa[2], t->mlen, klen, j->ies);
  *lb = j->trans_b ? ktile_in(j->B[s], b0, j->sb[2], j->sb[1], t->nlen, klen, j->ies)
                   : ktile_in(j->B[s], b0, j->sb[1], j->sb[2], klen, t->nlen, j->ies);
}

static mtia_tag_t mm_bias_load(const mmjob* j, const mmtile* t) {
  const uint64_t src = j->bias + (t->i0 * j->sbias[0] + t->j0 * j->sbias[1]) * j->oes;
  return ktile_in(j->bias_raw, src, j->sbias[0], j->sbias[1], t->mlen, t->nlen, j->oes);
}

/* alpha, bias, the output dtype; then the store. Returns the store's tag. */
static mtia_tag_t mm_epilogue(const mmjob* j, const mmtile* t, int cs, mtia_tag_t bias_tag) {
  const uint32_t n = (uint32_t)(t->mlen * t->nlen);
  void* acc = j->C[cs];
  if (j->alpha != KF32_ONE) kse_imm(MTIA_PE_SE_MUL, MTIA_PE_DT_FP32, acc, acc, j->alpha, n);
  if (j->has_bias) {
    mtia_wait(bias_tag);
    kcast(j->out_dt, MTIA_PE_DT_FP32, j->bias_f, j->bias_raw, n);
    if (j->beta != KF32_ONE)
      kse_imm(MTIA_PE_SE_MUL, MTIA_PE_DT_FP32, j->bias_f, j->bias_f, j->beta, n);
    kse(MTIA_PE_SE_ADD, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, acc, acc, j->bias_f, 0, n);
  }
  if (j->out_dt != j->acc_dt) kcast(j->acc_dt, j->out_dt, j->S[cs], acc, n);
  const uint64_t dst = j->c + (t->bi * j->sc[0] + t->i0 * j->sc[1] + t->j0 * j->sc[2]) * j->oes;
  return ktile_out(dst, j->sc[1], j->sc[2], j->S[cs], t->mlen, t->nlen, j->oes);
}

static int mm_run(mmjob* j) {
  for (int i = 0; i < 3; ++i) {
    if (j->sa[i] < 0 || j->sb[i] < 0 || j->sc[i] < 0) return MTIA_KSTATUS_BAD_SHAPE;
  }
  if (j->sbias[0] < 0 || j->sbias[1] < 0) return MTIA_KSTATUS_BAD_SHAPE;
  if ((int64_t)j->batch < 0 || (int64_t)j->m < 0 || (int64_t)j->n < 0 || (int64_t)j->k < 0) {
    return MTIA_KSTATUS_BAD_SHAPE;
  }
  if (j->batch == 0 || j->m == 0 || j->n == 0) return MTIA_KSTATUS_OK;
  j->ies = kdt_size(j->in_dt);
  j->oes = kdt_size(j->out_dt);
  j->aes = kdt_size(j->acc_dt);
  j->trans_a = j->sa[2] != 1 && j->sa[1] == 1;
  j->trans_b = j->sb[2] != 1 && j->sb[1] == 1;
  const int s = mm_plan(j);
  if (s != MTIA_KSTATUS_OK) return s;

  const uint64_t pe = mtia_pe_id(), pes = mtia_num_pes();
  const uint64_t mine = j->ntiles > pe ? kceil_div(j->ntiles - pe, pes) : 0;
  mtia_tag_t st[2] = {0, 0};
  mtia_tag_t bias_tag = 0;
  if (j->k == 0) {
    /* An empty product: the output is alpha * 0 + beta * bias. */
    for (uint64_t q = 0; q < mine; ++q) {
      mmtile t;
      mm_tile(j, pe + q * pes, &t);
      const int cs = (int)(q & 1);
      mtia_wait(st[cs]);
      kse_fill(j->acc_dt, j->C[cs], 0, (uint32_t)(t.mlen * t.nlen));
      if (j->has_bias) bias_tag = mm_bias_load(j, &t);
      st[cs] = mm_epilogue(j, &t, cs, bias_tag);
    }
    mtia_wait_all();
    return MTIA_KSTATUS_OK;
  }

  const uint64_t steps = mine * j->nk;
  mtia_tag_t la[2] = {0, 0}, lb[2] = {0, 0}, dpe[2] = {0, 0};
  mmtile tiles[2]; /* the tile of the step in each buffer set */
  if (steps > 0) {
    mm_tile(j, pe, &tiles[0]);
    mm_load(j, &tiles[0], 0, 0, &la[0], &lb[0]);
  }
  for (uint64_t s = 0; s < steps; ++s) {
    const int cur = (int)(s & 1), nxt = cur ^ 1;
    const uint64_t q = s / j->nk, kk = s % j->nk;
    if (s + 1 < steps) {
      /* Buffer set nxt was read by the DPE at step s-1: wait for it, then refill. */
      mtia_wait(dpe[nxt]);
      const uint64_t q1 = (s + 1) / j->nk;
      mm_tile(j, pe + q1 * pes, &tiles[nxt]);
      mm_load(j, &tiles[nxt], (s + 1) % j->nk, nxt, &la[nxt], &lb[nxt]);
    }
    const mmtile* t = &tiles[cur];
    const int cs = (int)(q & 1);
    if (kk == 0) {
      mtia_wait(st[cs]); /* tile q-2's output has left this accumulator */
      if (j->has_bias) bias_tag = mm_bias_load(j, t);
    }
    mtia_wait(la[cur]);
    mtia_wait(lb[cur]);
    const uint64_t klen = KMIN(j->tk, j->k - kk * j->tk);
    uint16_t flags = kk > 0 ? MTIA_PE_MM_ACCUMULATE : 0;
    if (j->trans_a) flags |= MTIA_PE_MM_TRANS_A;
    if (j->trans_b) flags |= MTIA_PE_MM_TRANS_B;
    dpe[cur] = mtia_matmul(j->in_dt, j->acc_dt, flags, j->C[cs], (uint32_t)t->nlen, j->A[cur],
                           (uint32_t)(j->trans_a ? t->mlen : klen), j->B[cur],
                           (uint32_t)(j->trans_b ? klen : t->nlen), (uint32_t)t->mlen,
                           (uint32_t)t->nlen, (uint32_t)klen);
    if (kk == j->nk - 1) {
      mtia_wait(dpe[cur]);
      st[cs] = mm_epilogue(j, t, cs, bias_tag);
    }
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}

/* Checks and fills the dtypes: 0 or a status. */
static int mm_dtypes(mmjob* j, uint64_t in_dt, uint64_t out_dt, int float_only) {
  j->in_dt = (uint8_t)in_dt;
  j->out_dt = (uint8_t)out_dt;
  if (in_dt == MTIA_PE_DT_INT8 && !float_only) {
    if (out_dt != MTIA_PE_DT_INT32) return MTIA_KSTATUS_BAD_DTYPE;
    j->acc_dt = MTIA_PE_DT_INT32;
    return MTIA_KSTATUS_OK;
  }
  if (!kdt_is_float(in_dt)) return MTIA_KSTATUS_BAD_DTYPE;
  if (out_dt != in_dt && out_dt != MTIA_PE_DT_FP32) return MTIA_KSTATUS_BAD_DTYPE;
  j->acc_dt = MTIA_PE_DT_FP32;
  return MTIA_KSTATUS_OK;
}

typedef struct {
  uint64_t c, a, b, in_dtype, out_dtype;
  int64_t m, n, k, a_stride_m, a_stride_k, b_stride_k, b_stride_n, c_stride_m, c_stride_n;
} matmul_args;

MTIA_KERNEL(matmul,
            "c:ptr a:ptr b:ptr in_dtype:dtype out_dtype:dtype m:i64 n:i64 k:i64 "
            "a_stride_m:i64 a_stride_k:i64 b_stride_k:i64 b_stride_n:i64 "
            "c_stride_m:i64 c_stride_n:i64");
int matmul(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(matmul_args, A);
  mmjob j;
  MTIA_ZERO_(j);
  const int s = mm_dtypes(&j, A->in_dtype, A->out_dtype, 0);
  if (s != MTIA_KSTATUS_OK) return s;
  j.batch = 1;
  j.m = (uint64_t)A->m;
  j.n = (uint64_t)A->n;
  j.k = (uint64_t)A->k;
  j.a = A->a;
  j.b = A->b;
  j.c = A->c;
  j.sa[1] = A->a_stride_m;
  j.sa[2] = A->a_stride_k;
  j.sb[1] = A->b_stride_k;
  j.sb[2] = A->b_stride_n;
  j.sc[1] = A->c_stride_m;
  j.sc[2] = A->c_stride_n;
  j.alpha = KF32_ONE;
  return mm_run(&j);
}

typedef struct {
  uint64_t c, a, b, in_dtype, out_dtype;
  int64_t batch, m, n, k;
  int64_t a_stride_batch, a_stride_m, a_stride_k;
  int64_t b_stride_batch, b_stride_k, b_stride_n;
  int64_t c_stride_batch, c_stride_m, c_stride_n;
} bmm_args;

MTIA_KERNEL(bmm,
            "c:ptr a:ptr b:ptr in_dtype:dtype out_dtype:dtype batch:i64 m:i64 n:i64 k:i64 "
            "a_stride_batch:i64 a_stride_m:i64 a_stride_k:i64 "
            "b_stride_batch:i64 b_stride_k:i64 b_stride_n:i64 "
            "c_stride_batch:i64 c_stride_m:i64 c_stride_n:i64");
int bmm(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(bmm_args, A);
  mmjob j;
  MTIA_ZERO_(j);
  const int s = mm_dtypes(&j, A->in_dtype, A->out_dtype, 0);
  if (s != MTIA_KSTATUS_OK) return s;
  j.batch = (uint64_t)A->batch;
  j.m = (uint64_t)A->m;
  j.n = (uint64_t)A->n;
  j.k = (uint64_t)A->k;
  j.a = A->a;
  j.b = A->b;
  j.c = A->c;
  j.sa[0] = A->a_stride_batch;
  j.sa[1] = A->a_stride_m;
  j.sa[2] = A->a_stride_k;
  j.sb[0] = A->b_stride_batch;
  j.sb[1] = A->b_stride_k;
  j.sb[2] = A->b_stride_n;
  j.sc[0] = A->c_stride_batch;
  j.sc[1] = A->c_stride_m;
  j.sc[2] = A->c_stride_n;
  j.alpha = KF32_ONE;
  return mm_run(&j);
}

typedef struct {
  uint64_t out, bias, a, b, in_dtype, out_dtype;
  int64_t m, n, k;
  uint64_t alpha, beta;
  int64_t bias_stride_m, bias_stride_n, a_stride_m, a_stride_k, b_stride_k, b_stride_n;
  int64_t out_stride_m, out_stride_n;
} addmm_args;

/* addmm: out = beta * bias + alpha * (a @ b), floating dtypes; bias has the output dtype and
 * broadcasts with stride 0 (a bias vector: bias_stride_m = 0). beta = 0 ignores bias. */
MTIA_KERNEL(addmm,
            "out:ptr bias:ptr a:ptr b:ptr in_dtype:dtype out_dtype:dtype m:i64 n:i64 "
            "k:i64 alpha:f32 beta:f32 bias_stride_m:i64 bias_stride_n:i64 "
            "a_stride_m:i64 a_stride_k:i64 b_stride_k:i64 b_stride_n:i64 "
            "out_stride_m:i64 out_stride_n:i64");
int addmm(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(addmm_args, A);
  mmjob j;
  MTIA_ZERO_(j);
  const int s = mm_dtypes(&j, A->in_dtype, A->out_dtype, 1);
  if (s != MTIA_KSTATUS_OK) return s;
  j.batch = 1;
  j.m = (uint64_t)A->m;
  j.n = (uint64_t)A->n;
  j.k = (uint64_t)A->k;
  j.a = A->a;
  j.b = A->b;
  j.c = A->out;
  j.bias = A->bias;
  j.sa[1] = A->a_stride_m;
  j.sa[2] = A->a_stride_k;
  j.sb[1] = A->b_stride_k;
  j.sb[2] = A->b_stride_n;
  j.sc[1] = A->out_stride_m;
  j.sc[2] = A->out_stride_n;
  j.sbias[0] = A->bias_stride_m;
  j.sbias[1] = A->bias_stride_n;
  j.alpha = (uint32_t)A->alpha;
  j.beta = (uint32_t)A->beta;
  j.has_bias = (j.beta & 0x7fffffffu) != 0; /* beta = +-0: bias ignored, NaNs in it too */
  return mm_run(&j);
}
