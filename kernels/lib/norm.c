/* Per-channel statistics of [N, C, S] views (S the folded spatial dims), floating dtypes,
 * accumulated in fp32, for batch norm (channels over N and S) and group norm (the host views
 * [N * G, C / G * S] rows as channels):
 *   channel_moments     mean[c] = sum(x) / (N * S), var[c] = sum((x - mean)^2) / (N * S)
 *   channel_grad_sums   sum_dy[c] = sum(dy), sum_dyx[c] = sum(dy * (x - mean[c])) (mean[c]
 *                       taken as 0 without flag 1)
 * Outputs are contiguous fp32 vectors of C. Channels are dealt in blocks to the PEs, so each
 * PE writes only its own channels' results. A tile is channels x (a range of n, s), gathered by
 * the DMA in the memory's order: [channels][n][s] when channels are the outer dimension (NCHW;
 * RE axis 1), [n][s][channels] when they are the inner one (channels_last; RE axis 0); tiles
 * accumulate with the RE's ACCUMULATE. The variance takes a second pass over the block. */
#include "klib.h"
#include "ksig.h"

#define NORM_SUB_MEAN 1u
#define NORM_FLAGS_MASK 1u

enum { NB_X, NB_XF, NB_D, NB_DF, NB_T, NB_S1, NB_S2, NB_MEAN, NB_COUNT };

typedef struct {
  int64_t N, C, S;
  const int64_t* st[2]; /* element strides (n, c, s) of x and dy */
  uint64_t src[2];
  uint8_t dt;
  unsigned es;
  int cmaj;           /* channels outermost in the tile (RE axis 1) */
  int sub_mean;       /* channel_grad_sums: x - mean[c] rather than x */
  int64_t cb, nn, ns; /* tile extents: channels, n, s */
  void* b[NB_COUNT];
} njob;

/* Plans the tiles for `nin` inputs and allocates the buffers. */
static int njob_setup(njob* j, int nin) {
  const int64_t T = j->N * j->S;
  j->cmaj = !(j->st[0][1] < j->st[0][2]);
  karena a;
  karena_init(&a);
  const uint64_t left = karena_left(&a);
  /* Per tile element: x, x as fp32, dy, dy as fp32, a temporary; per channel: 3 vectors. */
  const uint64_t per = (uint64_t)(nin * (j->es + 4)) + 4 + 3 * 4;
  const uint64_t slack = (uint64_t)(NB_COUNT + 1) * 64u;
  if (left <= slack + 64 * per) return MTIA_KSTATUS_NO_LOCAL_STORE;
  const uint64_t cap = KMIN((left - slack) / per, 1u << 16);
  const uint64_t pes = mtia_num_pes();
  const uint64_t share = kceil_div((uint64_t)j->C, pes);
  uint64_t cb = KMIN(share, KMAX(cap / KMIN((uint64_t)T, cap), 1u));
  /* Channels innermost: a few of them per tile keep the DMA's runs longer. */
  if (!j->cmaj) cb = KMAX(cb, KMIN(share, 16u));
  const uint64_t L = KMAX(cap / cb, 1u);
  j->cb = (int64_t)cb;
  if (L >= (uint64_t)j->S) {
    j->ns = j->S;
    j->nn = (int64_t)KMIN((uint64_t)j->N, L / (uint64_t)j->S);
  } else {
    j->nn = 1;
    j->ns = (int64_t)L;
  }
  const uint64_t tile = (uint64_t)(j->cb * j->nn * j->ns);
  j->b[NB_X] = kalloc(&a, tile * j->es);
  j->b[NB_XF] = kalloc(&a, tile * 4);
  j->b[NB_T] = kalloc(&a, tile * 4);
  if (nin > 1) {
    j->b[NB_D] = kalloc(&a, tile * j->es);
    j->b[NB_DF] = kalloc(&a, tile * 4);
  }
  j->b[NB_S1] = kalloc(&a, cb * 4);
  j->b[NB_S2] = kalloc(&a, cb * 4);
  j->b[NB_MEAN] = kalloc(&a, cb * 4);
  return MTIA_KSTATUS_OK;
}

/* Loads input i's tile (channels [c0, c0 + nc), n [n0, n0 + nn), s [s0, s0 + ns)) as fp32;
 * returns the buffer holding it. */
static void* njob_load(const njob* j, int i, int64_t c0, int64_t nc, int64_t n0, int64_t nn,
                       int64_t s0, int64_t ns) {
  const int64_t* st = j->st[i];
  void* raw = j->b[i == 0 ? NB_X : NB_D];
  void* f32 = j->b[i == 0 ? NB_XF : NB_DF];
  const unsigned es = j->es;
  uint64_t sizes[3];
  int64_t ss[3], ds[3];
  if (j->cmaj) {
    sizes[0] = (uint64_t)nc;
    sizes[1] = (uint64_t)nn;
    sizes[2] = (uint64_t)ns;
    ss[0] = st[1] * es;
    ss[1] = st[0] * es;
    ss[2] = st[2] * es;
  } else {
    sizes[0] = (uint64_t)nn;
    sizes[1] = (uint64_t)ns;
    sizes[2] = (uint64_t)nc;
    ss[0] = st[0] * es;
    ss[1] = st[2] * es;
    ss[2] = st[1] * es;
  }
  ds[2] = es;
  ds[1] = (int64_t)(sizes[2] * es);
  ds[0] = (int64_t)(sizes[1] * sizes[2] * es);
  const uint64_t src = j->src[i] + (uint64_t)((n0 * st[0] + c0 * st[1] + s0 * st[2]) * (int64_t)es);
  mtia_wait(kdma(kaddr(raw), MTIA_PE_SPACE_LOCAL, ds, src, MTIA_PE_SPACE_DEVICE, ss, sizes, 3, es));
  if (j->dt == MTIA_PE_DT_FP32) return raw;
  kcast(j->dt, MTIA_PE_DT_FP32, f32, raw, (uint32_t)(nc * nn * ns));
  return f32;
}

/* The tile as the RE sees it: rows x cols, one result per channel along `axis`. */
static void njob_reduce(const njob* j, uint8_t op, int first, void* dst, const void* src,
                        int64_t nc, int64_t len) {
  const uint32_t rows = (uint32_t)(j->cmaj ? nc : len), cols = (uint32_t)(j->cmaj ? len : nc);
  kre(op, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, j->cmaj ? 1 : 0, !first, dst, src, rows, cols);
}

/* x -= mean[channel] over a tile (the mean broadcast along the tile's channel axis). */
static void njob_sub_mean(const njob* j, void* x, int64_t nc, int64_t len) {
  const uint32_t rows = (uint32_t)(j->cmaj ? nc : len), cols = (uint32_t)(j->cmaj ? len : nc);
  kexpand(j->b[NB_T], j->b[NB_MEAN], rows, cols, j->cmaj, 4);
  kse(MTIA_PE_SE_SUB, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, x, x, j->b[NB_T], 0, rows * cols);
}

/* Runs `pass` over every tile of channel block [c0, c0 + nc). */
typedef void (*npass_fn)(njob* j, int first, int64_t c0, int64_t nc, int64_t n0, int64_t nn,
                         int64_t s0, int64_t ns);
static void njob_block(njob* j, npass_fn pass, int64_t c0, int64_t nc) {
  int first = 1;
  for (int64_t n0 = 0; n0 < j->N; n0 += j->nn) {
    const int64_t nn = KMIN(j->nn, j->N - n0);
    for (int64_t s0 = 0; s0 < j->S; s0 += j->ns) {
      pass(j, first, c0, nc, n0, nn, s0, KMIN(j->ns, j->S - s0));
      first = 0;
    }
  }
}

static void pass_sum(njob* j, int first, int64_t c0, int64_t nc, int64_t n0, int64_t nn, int64_t s0,
                     int64_t ns) {
  void* x = njob_load(j, 0, c0, nc, n0, nn, s0, ns);
  njob_reduce(j, MTIA_PE_RE_SUM, first, j->b[NB_S1], x, nc, nn * ns);
}
static void pass_sq_dev(njob* j, int first, int64_t c0, int64_t nc, int64_t n0, int64_t nn,
                        int64_t s0, int64_t ns) {
  void* x = njob_load(j, 0, c0, nc, n0, nn, s0, ns); /* a scratch copy: changed in place */
  njob_sub_mean(j, x, nc, nn * ns);
  njob_reduce(j, MTIA_PE_RE_SUMSQ, first, j->b[NB_S2], x, nc, nn * ns);
}
static void pass_grad(njob* j, int first, int64_t c0, int64_t nc, int64_t n0, int64_t nn,
                      int64_t s0, int64_t ns) {
  const int64_t len = nn * ns;
  const uint32_t n = (uint32_t)(nc * len);
  void* dy = njob_load(j, 1, c0, nc, n0, nn, s0, ns);
  njob_reduce(j, MTIA_PE_RE_SUM, first, j->b[NB_S1], dy, nc, len);
  void* x = njob_load(j, 0, c0, nc, n0, nn, s0, ns);
  if (j->sub_mean) njob_sub_mean(j, x, nc, len);
  kse(MTIA_PE_SE_MUL, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, x, x, dy, 0, n);
  njob_reduce(j, MTIA_PE_RE_SUM, first, j->b[NB_S2], x, nc, len);
}

/* Stores nc fp32 values at out[c0..]. */
static void nstore(uint64_t out, int64_t c0, const void* v, int64_t nc) {
  mtia_wait(mtia_dma_out(out + (uint64_t)c0 * 4, v, (uint64_t)nc * 4));
}

static int ncheck(uint64_t dt, int64_t n, int64_t c, int64_t s, const int64_t* const* st, int nst) {
  if (!kdt_is_float(dt)) return MTIA_KSTATUS_BAD_DTYPE;
  const int64_t sizes[3] = {n, c, s};
  if (kcheck_shape(sizes, 3) != MTIA_KSTATUS_OK) return MTIA_KSTATUS_BAD_SHAPE;
  for (int i = 0; i < nst; ++i) {
    if (kcheck_shape(st[i], 3) != MTIA_KSTATUS_OK) return MTIA_KSTATUS_BAD_SHAPE;
  }
  /* A channel over no elements has no mean. */
  if (c > 0 && n * s == 0) return MTIA_KSTATUS_BAD_SHAPE;
  return MTIA_KSTATUS_OK;
}

typedef struct {
  uint64_t mean, var, in, dtype;
  int64_t n, c, s, in_st[3];
} channel_moments_args;

MTIA_KERNEL(channel_moments,
            "mean:ptr var:ptr in:ptr dtype:dtype n:i64 c:i64 s:i64 in_stride_n:i64 "
            "in_stride_c:i64 in_stride_s:i64");
int channel_moments(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(channel_moments_args, A);
  const int64_t* st[1] = {A->in_st};
  int s = ncheck(A->dtype, A->n, A->c, A->s, st, 1);
  if (s != MTIA_KSTATUS_OK || A->c == 0) return s;
  njob j;
  MTIA_ZERO_(j);
  j.N = A->n;
  j.C = A->c;
  j.S = A->s;
  j.st[0] = A->in_st;
  j.src[0] = A->in;
  j.dt = (uint8_t)A->dtype;
  j.es = kdt_size(A->dtype);
  s = njob_setup(&j, 1);
  if (s != MTIA_KSTATUS_OK) return s;
  const uint32_t count = ku64_to_f32_bits((uint64_t)(A->n * A->s));
  const uint64_t blocks = kceil_div((uint64_t)j.C, (uint64_t)j.cb);
  for (uint64_t blk = mtia_pe_id(); blk < blocks; blk += mtia_num_pes()) {
    const int64_t c0 = (int64_t)blk * j.cb, nc = KMIN(j.cb, j.C - c0);
    njob_block(&j, pass_sum, c0, nc);
    kse_imm(MTIA_PE_SE_DIV, MTIA_PE_DT_FP32, j.b[NB_MEAN], j.b[NB_S1], count, (uint32_t)nc);
    njob_block(&j, pass_sq_dev, c0, nc);
    kse_imm(MTIA_PE_SE_DIV, MTIA_PE_DT_FP32, j.b[NB_S2], j.b[NB_S2], count, (uint32_t)nc);
    nstore(A->mean, c0, j.b[NB_MEAN], nc);
    nstore(A->var, c0, j.b[NB_S2], nc);
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}

typedef struct {
  uint64_t sum_dy, sum_dyx, dy, x, mean, dtype;
  int64_t flags, n, c, s, dy_st[3], x_st[3];
} channel_grad_sums_args;

/* dy and x share the dtype; mean (fp32, C values) is read only with flag 1. */
MTIA_KERNEL(channel_grad_sums,
            "sum_dy:ptr sum_dyx:ptr dy:ptr x:ptr mean:ptr dtype:dtype flags:i64 n:i64 c:i64 "
            "s:i64 dy_stride_n:i64 dy_stride_c:i64 dy_stride_s:i64 x_stride_n:i64 "
            "x_stride_c:i64 x_stride_s:i64");
int channel_grad_sums(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(channel_grad_sums_args, A);
  if (((uint64_t)A->flags & ~(uint64_t)NORM_FLAGS_MASK) != 0) return MTIA_KSTATUS_BAD_OP;
  const int64_t* st[2] = {A->dy_st, A->x_st};
  int s = ncheck(A->dtype, A->n, A->c, A->s, st, 2);
  if (s != MTIA_KSTATUS_OK || A->c == 0) return s;
  njob j;
  MTIA_ZERO_(j);
  j.N = A->n;
  j.C = A->c;
  j.S = A->s;
  j.st[0] = A->x_st;
  j.st[1] = A->dy_st;
  j.src[0] = A->x;
  j.src[1] = A->dy;
  j.sub_mean = (A->flags & NORM_SUB_MEAN) != 0;
  j.dt = (uint8_t)A->dtype;
  j.es = kdt_size(A->dtype);
  s = njob_setup(&j, 2);
  if (s != MTIA_KSTATUS_OK) return s;
  const uint64_t blocks = kceil_div((uint64_t)j.C, (uint64_t)j.cb);
  for (uint64_t blk = mtia_pe_id(); blk < blocks; blk += mtia_num_pes()) {
    const int64_t c0 = (int64_t)blk * j.cb, nc = KMIN(j.cb, j.C - c0);
    if (j.sub_mean) {
      mtia_wait(mtia_dma_in(j.b[NB_MEAN], A->mean + (uint64_t)c0 * 4, (uint64_t)nc * 4));
    }
    njob_block(&j, pass_grad, c0, nc);
    nstore(A->sum_dy, c0, j.b[NB_S1], nc);
    nstore(A->sum_dyx, c0, j.b[NB_S2], nc);
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}
