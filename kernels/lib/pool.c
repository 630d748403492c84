/* 2-D pooling over [N, C, H, W] views with any strides (NCHW, channels_last, slices):
 *   pool2d           max (values and int64 indices ih * W + iw) or average, forward;
 *   pool2d_backward  the gradient of either, into grad_input.
 * Windows are regular (kernel, stride, padding, dilation) or adaptive (output o of an axis of
 * `in` elements covers [floor(o * in / out), ceil((o + 1) * in / out))).
 *
 * An axis's outputs split into runs whose window starts are affine in the output index with
 * one window length (a regular axis is one run). For a run pair and one window offset
 * (jh, jw), the input elements the outputs of a box read form a strided box, so each offset
 * is one DMA gather into the local store; window positions outside the input (padding) are
 * the pad value that the SE writes first (-inf or the integer minimum for max, 0 for the
 * average). Max keeps the first maximum in window order (kh, then kw), a NaN replacing it as
 * PyTorch's CPU kernel does (`v > acc || v != v`); indices start at the first position inside
 * the input, so a window of -inf still names one of its elements.
 *
 * The backward pass is owned by input elements: each PE takes chunks of grad_input and, for
 * every run pair and window offset, gathers the grad_output (and indices) of the outputs whose
 * offset lands in the chunk, keeps the matching ones (max: index equal to the position;
 * average: divided by the window's divisor) and adds them into its fp32 accumulator through
 * a local strided gather/scatter. No two PEs write the same bytes, and each element's sum runs
 * in PyTorch's order (outputs in row-major order), so results are deterministic. */
#include "klib.h"
#include "ksig.h"

#define POOL_MAX 1
#define POOL_AVG 2

#define POOL_ADAPTIVE 1u  /* windows from the sizes; kernel/stride/padding/dilation unused */
#define POOL_COUNT_PAD 2u /* average: padding counts in the divisor */
#define POOL_FLAGS_MASK 3u

/* Logical dimensions of boxes: batch, channel, rows, columns. */
enum { PD_N = 0, PD_C = 1, PD_H = 2, PD_W = 3 };

/* ---- Integer helpers (signed, positive divisor) ---------------------------------------- */
static int64_t pfloor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}
static int64_t pceil_div(int64_t a, int64_t b) {
  return -pfloor_div(-a, b);
}

/* ---- One spatial axis -------------------------------------------------------------------- */
typedef struct {
  int64_t in, out; /* input and output extents */
  int64_t k, s, p, d;
  int adaptive;
} pax;

/* Output o's window: positions start + j * d for j < *len. */
static void pax_window(const pax* a, int64_t o, int64_t* start, int64_t* len) {
  if (a->adaptive) {
    *start = o * a->in / a->out;
    *len = ((o + 1) * a->in + a->out - 1) / a->out - *start;
  } else {
    *start = o * a->s - a->p;
    *len = a->k;
  }
}
static int64_t pax_dil(const pax* a) {
  return a->adaptive ? 1 : a->d;
}

/* Outputs [o0, o0 + len) whose window starts are start + q * step (q < len), one length K. */
typedef struct {
  int64_t o0, len, start, step, K;
} prun;

static void pax_run(const pax* a, int64_t o0, prun* r) {
  pax_window(a, o0, &r->start, &r->K);
  r->o0 = o0;
  if (!a->adaptive) {
    r->step = a->s;
    r->len = a->out - o0;
    return;
  }
  r->step = 0;
  r->len = 1;
  if (o0 + 1 >= a->out) return;
  int64_t st, k;
  pax_window(a, o0 + 1, &st, &k);
  if (k != r->K || st <= r->start) return; /* a repeated window stays a run of one */
  r->step = st - r->start;
  r->len = 2;
  while (o0 + r->len < a->out) {
    pax_window(a, o0 + r->len, &st, &k);
    if (k != r->K || st != r->start + r->len * r->step) break;
    ++r->len;
  }
}

/* The q range (within [q0, q1)) of a run's outputs whose offset-j position lies in [lo, hi). */
static void prun_valid(const prun* r, int64_t off, int64_t lo, int64_t hi, int64_t q0, int64_t q1,
                       int64_t* a, int64_t* b) {
  const int64_t base = r->start + off;
  int64_t qa, qb;
  if (r->step == 0) {
    const int in = base >= lo && base < hi;
    qa = in ? q0 : q1;
    qb = q1;
  } else {
    qa = pceil_div(lo - base, r->step);
    qb = pfloor_div(hi - 1 - base, r->step) + 1;
  }
  *a = KMAX(qa, q0);
  *b = KMIN(qb, q1);
  if (*b < *a) *b = *a;
}

/* The first position of a window inside the input (PyTorch's `while (ih0 < 0) ih0 += d`). */
static int64_t pfirst_inside(int64_t start, int64_t d) {
  return start >= 0 ? start : start + pceil_div(-start, d) * d;
}

/* ---- Boxes in the local store and their DMAs ---------------------------------------------- */
/* Contiguous local byte strides of a box laid out in `perm` order (perm[3] innermost). */
static void pbox_strides(const int* perm, const int64_t* cnt, unsigned es, int64_t* ls) {
  int64_t s = es;
  for (int i = 3; i >= 0; --i) {
    ls[perm[i]] = s;
    s *= cnt[perm[i]];
  }
}
static uint64_t pbox_elems(const int64_t* cnt) {
  return (uint64_t)(cnt[0] * cnt[1] * cnt[2] * cnt[3]);
}

/* A DMA of a box of cnt (by logical dim), byte strides by logical dim on each side. */
static mtia_tag_t pdma(const int* perm, uint64_t dst, uint8_t dsp, const int64_t* dst_st,
                       uint64_t src, uint8_t ssp, const int64_t* src_st, const int64_t* cnt,
                       unsigned es) {
  uint64_t sizes[4];
  int64_t ds[4], ss[4];
  for (int i = 0; i < 4; ++i) {
    const int d = perm[i];
    sizes[i] = (uint64_t)cnt[d];
    ds[i] = dst_st[d];
    ss[i] = src_st[d];
  }
  return kdma(dst, dsp, ds, src, ssp, ss, sizes, 4, es);
}

/* Fills a contiguous box with vec[i] along logical dim `dim` (a local broadcast DMA). */
static void pexpand(const int* perm, void* dst, const void* vec, const int64_t* cnt, int dim,
                    unsigned es) {
  int64_t ls[4], ss[4] = {0, 0, 0, 0};
  pbox_strides(perm, cnt, es, ls);
  ss[dim] = es;
  mtia_wait(pdma(perm, kaddr(dst), MTIA_PE_SPACE_LOCAL, ls, kaddr(vec), MTIA_PE_SPACE_LOCAL, ss,
                 cnt, es));
}

/* out = cond ? b : imm (select with an immediate third operand). */
static void pselect_imm(uint8_t dt, void* out, const void* cond, const void* b, uint64_t imm,
                        uint32_t n) {
  mtia_pe_se_desc d;
  MTIA_ZERO_(d);
  d.hdr = mtia_desc_header(MTIA_PE_DESC_SE, 0);
  d.op = MTIA_PE_SE_SELECT;
  d.in_dtype = dt;
  d.out_dtype = dt;
  d.count = n;
  d.src[0] = kaddr(cond);
  d.src[1] = kaddr(b);
  d.mode[2] = MTIA_PE_OPND_IMMEDIATE;
  d.imm[2] = imm;
  d.dst = kaddr(out);
  mtia_wait(mtia_se_op(&d));
}

/* ---- Chunks of a 4-D box: a range along one dimension times every dimension inside it ------ */
typedef struct {
  int perm[4];
  int64_t size[4];
  int k;           /* position (in perm) of the chunked dimension */
  int64_t len, nk; /* chunk length along it, chunks along it */
  uint64_t count;  /* chunks in all */
} pchunks;

static void pchunks_plan(pchunks* p, const int* perm, const int64_t* size, uint64_t cap) {
  for (int i = 0; i < 4; ++i) {
    p->perm[i] = perm[i];
    p->size[i] = size[i];
  }
  p->count = 0;
  if (size[0] == 0 || size[1] == 0 || size[2] == 0 || size[3] == 0) return;
  uint64_t inner = 1;
  int k = 3;
  while (k > 0 && inner * (uint64_t)size[perm[k]] <= cap) inner *= (uint64_t)size[perm[k--]];
  p->k = k;
  p->len = (int64_t)KMIN((uint64_t)size[perm[k]], KMAX(cap / inner, 1u));
  p->nk = (int64_t)kceil_div((uint64_t)size[perm[k]], (uint64_t)p->len);
  uint64_t outer = 1;
  for (int i = 0; i < k; ++i) outer *= (uint64_t)size[perm[i]];
  p->count = outer * (uint64_t)p->nk;
}

/* Chunk idx as lo / cnt per logical dimension. */
static void pchunks_get(const pchunks* p, uint64_t idx, int64_t* lo, int64_t* cnt) {
  const int64_t kk = (int64_t)(idx % (uint64_t)p->nk);
  uint64_t r = idx / (uint64_t)p->nk;
  for (int i = 3; i >= 0; --i) {
    const int d = p->perm[i];
    if (i > p->k) {
      lo[d] = 0;
      cnt[d] = p->size[d];
    } else if (i == p->k) {
      lo[d] = kk * p->len;
      cnt[d] = KMIN(p->len, p->size[d] - lo[d]);
    } else {
      lo[d] = (int64_t)(r % (uint64_t)p->size[d]);
      r /= (uint64_t)p->size[d];
      cnt[d] = 1;
    }
  }
}

/* ---- Arguments ------------------------------------------------------------------------------ */
typedef struct {
  uint64_t out, in, indices, dtype;
  int64_t op, flags, n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, divisor;
  int64_t in_st[4], out_st[4], idx_st[4];
} pool2d_args;

#define KSIG_POOL_PARAMS                                                                     \
  "dtype:dtype op:i64 flags:i64 n:i64 c:i64 h:i64 w:i64 oh:i64 ow:i64 kh:i64 kw:i64 sh:i64 " \
  "sw:i64 ph:i64 pw:i64 dh:i64 dw:i64 divisor:i64"

/* The fields both kernels share, checked before any data moves. */
typedef struct {
  uint64_t dtype;
  int64_t op, flags, n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, divisor;
} pool_params;

static int pool_check(const pool_params* P, const int64_t* const* strides, int nstrides) {
  if (P->op != POOL_MAX && P->op != POOL_AVG) return MTIA_KSTATUS_BAD_OP;
  if (((uint64_t)P->flags & ~(uint64_t)POOL_FLAGS_MASK) != 0) return MTIA_KSTATUS_BAD_OP;
  if (P->op == POOL_MAX ? !(kdt_is_float(P->dtype) || kdt_is_int(P->dtype))
                        : !kdt_is_float(P->dtype)) {
    return MTIA_KSTATUS_BAD_DTYPE;
  }
  const int64_t sizes[6] = {P->n, P->c, P->h, P->w, P->oh, P->ow};
  if (kcheck_shape(sizes, 6) != MTIA_KSTATUS_OK) return MTIA_KSTATUS_BAD_SHAPE;
  for (int i = 0; i < nstrides; ++i) {
    if (kcheck_shape(strides[i], 4) != MTIA_KSTATUS_OK) return MTIA_KSTATUS_BAD_SHAPE;
  }
  if ((P->flags & POOL_ADAPTIVE) == 0) {
    if (P->kh < 1 || P->kw < 1 || P->sh < 1 || P->sw < 1 || P->dh < 1 || P->dw < 1 || P->ph < 0 ||
        P->pw < 0) {
      return MTIA_KSTATUS_BAD_SHAPE;
    }
  }
  /* Outputs read windows of an input that has none. */
  const int64_t outs = P->n * P->c * P->oh * P->ow;
  if (outs > 0 && (P->h == 0 || P->w == 0)) return MTIA_KSTATUS_BAD_SHAPE;
  return MTIA_KSTATUS_OK;
}

static void pool_axes(const pool_params* P, pax* ah, pax* aw) {
  const int adaptive = (P->flags & POOL_ADAPTIVE) != 0;
  ah->in = P->h;
  ah->out = P->oh;
  ah->k = P->kh;
  ah->s = P->sh;
  ah->p = P->ph;
  ah->d = P->dh;
  ah->adaptive = adaptive;
  aw->in = P->w;
  aw->out = P->ow;
  aw->k = P->kw;
  aw->s = P->sw;
  aw->p = P->pw;
  aw->d = P->dw;
  aw->adaptive = adaptive;
}

/* The box order: channels innermost when they are the input's densest dimension. */
static void pool_perm(const int64_t* st, int* perm) {
  const int cl = st[PD_C] < st[PD_W];
  perm[0] = PD_N;
  perm[1] = cl ? PD_H : PD_C;
  perm[2] = cl ? PD_W : PD_H;
  perm[3] = cl ? PD_C : PD_W;
}

/* The average's divisor factor of output o along an axis (PyTorch's avg_pool2d and
 * adaptive_avg_pool2d); the divisor is the product of the two axes' factors. */
static int64_t pax_divisor(const pax* a, int64_t o, int count_pad) {
  int64_t start, len;
  pax_window(a, o, &start, &len);
  if (a->adaptive) return len;
  int64_t end = KMIN(start + a->k, a->in + a->p);
  const int64_t padded = end - start;
  start = KMAX(start, 0);
  end = KMIN(end, a->in);
  return count_pad ? padded : end - start;
}

/* The pad value of max pooling: -inf, or the integer type's minimum. */
static uint64_t pool_max_pad(uint64_t dt) {
  switch (dt) {
    case MTIA_PE_DT_FP32:
      return KF32_NEG_INF;
    case MTIA_PE_DT_FP16:
      return 0xfc00u;
    case MTIA_PE_DT_BF16:
      return 0xff80u;
    case MTIA_PE_DT_INT8:
      return 0x80u;
    case MTIA_PE_DT_INT32:
      return 0x80000000u;
    default:
      return 0x8000000000000000ull;
  }
}

/* Applies the average's divisors to a box of fp32 values: x /= override (when not 0), or per output
 * x /= fh[row] * fw[col] (x / fh / fw for adaptive windows, as PyTorch divides there). */
static void pool_divide(const pool_params* P, const int* perm, const int64_t* cnt, float* x,
                        const uint32_t* fh, const uint32_t* fw, float* t1, float* t2) {
  const uint32_t n = (uint32_t)pbox_elems(cnt);
  if (P->divisor != 0) { /* any non-zero override, negative ones too (as PyTorch) */
    const int64_t d = P->divisor;
    const uint32_t bits = ku64_to_f32_bits((uint64_t)(d < 0 ? -d : d)) | (d < 0 ? 0x80000000u : 0);
    kse_imm(MTIA_PE_SE_DIV, MTIA_PE_DT_FP32, x, x, bits, n);
    return;
  }
  pexpand(perm, t1, fh, cnt, PD_H, 4);
  pexpand(perm, t2, fw, cnt, PD_W, 4);
  if (P->flags & POOL_ADAPTIVE) {
    kse(MTIA_PE_SE_DIV, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, x, x, t1, 0, n);
    kse(MTIA_PE_SE_DIV, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, x, x, t2, 0, n);
  } else {
    kse(MTIA_PE_SE_MUL, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, t1, t1, t2, 0, n);
    kse(MTIA_PE_SE_DIV, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, x, x, t1, 0, n);
  }
}

/* Local-store plan of both kernels: per-element buffers plus four per-row/column vectors. */
typedef struct {
  void* b[8];
  void* vec[4];
  uint64_t cap;
} pplan;

static int pool_plan(pplan* pl, const unsigned* bpe, int nb, uint64_t total) {
  karena a;
  karena_init(&a);
  const uint64_t left = karena_left(&a);
  const uint64_t slack = (uint64_t)(nb + 4) * 64u;
  uint64_t per = 4 * 8; /* the vectors: up to cap entries each */
  for (int i = 0; i < nb; ++i) per += bpe[i];
  if (left <= slack + 64 * per) return MTIA_KSTATUS_NO_LOCAL_STORE;
  uint64_t cap = KMIN((left - slack) / per, 1u << 16);
  /* A PE's fair share, so that small problems still spread over the grid. */
  const uint64_t share = KMAX(kceil_div(total, mtia_num_pes()), 256u);
  cap = KMIN(cap, share);
  for (int i = 0; i < nb; ++i) pl->b[i] = kalloc(&a, cap * bpe[i]);
  for (int i = 0; i < 4; ++i) pl->vec[i] = kalloc(&a, cap * 8);
  pl->cap = cap;
  return MTIA_KSTATUS_OK;
}

/* ---- pool2d: forward ------------------------------------------------------------------------- */
enum { PF_ACC, PF_IDX, PF_V, PF_T, PF_M1, PF_M2, PF_VF, PF_STAGE };

typedef struct {
  const pool_params* P;
  pax ah, aw;
  int perm[4];
  uint64_t in, out, idx;
  const int64_t *in_st, *out_st, *idx_st;
  uint8_t dt;
  unsigned es;
  pplan pl;
  mtia_tag_t st_out, st_idx;
} pfwd;

static void pfwd_chunk(pfwd* f, const prun* rh, const prun* rw, const int64_t* lo,
                       const int64_t* cnt) {
  const pool_params* P = f->P;
  const int is_max = P->op == POOL_MAX;
  const uint32_t n = (uint32_t)pbox_elems(cnt);
  const unsigned es = f->es;
  void** b = f->pl.b;
  int64_t ls_es[4], ls8[4];
  pbox_strides(f->perm, cnt, es, ls_es);
  pbox_strides(f->perm, cnt, 8, ls8);
  const int64_t qh0 = lo[PD_H], qw0 = lo[PD_W];
  const int64_t nh = cnt[PD_H], nw = cnt[PD_W];
  const int64_t dH = pax_dil(&f->ah), dW = pax_dil(&f->aw);

  /* The outputs of the previous chunk have left the accumulators. */
  mtia_wait(f->st_out);
  mtia_wait(f->st_idx);
  int64_t* rv = (int64_t*)f->pl.vec[0];
  int64_t* cv = (int64_t*)f->pl.vec[1];
  if (is_max) {
    kse_fill(f->dt, b[PF_ACC], pool_max_pad(f->dt), n);
    /* Indices start at each window's first position inside the input. */
    for (int64_t i = 0; i < nh; ++i) {
      rv[i] = pfirst_inside(rh->start + (qh0 + i) * rh->step, dH) * P->w;
    }
    for (int64_t j = 0; j < nw; ++j) cv[j] = pfirst_inside(rw->start + (qw0 + j) * rw->step, dW);
    pexpand(f->perm, b[PF_IDX], rv, cnt, PD_H, 8);
    pexpand(f->perm, b[PF_T], cv, cnt, PD_W, 8);
    kse(MTIA_PE_SE_ADD, MTIA_PE_DT_INT64, MTIA_PE_DT_INT64, b[PF_IDX], b[PF_IDX], b[PF_T], 0, n);
    /* The window start's index of each output; an offset adds a constant to it. */
    for (int64_t i = 0; i < nh; ++i) rv[i] = (rh->start + (qh0 + i) * rh->step) * P->w;
    for (int64_t j = 0; j < nw; ++j) cv[j] = rw->start + (qw0 + j) * rw->step;
    pexpand(f->perm, b[PF_M1], rv, cnt, PD_H, 8); /* PF_M1/M2 span 8 bytes per element */
    pexpand(f->perm, b[PF_T], cv, cnt, PD_W, 8);
    kse(MTIA_PE_SE_ADD, MTIA_PE_DT_INT64, MTIA_PE_DT_INT64, b[PF_VF], b[PF_M1], b[PF_T], 0, n);
  } else {
    kse_fill(MTIA_PE_DT_FP32, b[PF_ACC], 0, n);
  }

  for (int64_t jh = 0; jh < rh->K; ++jh) {
    int64_t ha, hb;
    prun_valid(rh, jh * dH, 0, P->h, qh0, qh0 + nh, &ha, &hb);
    if (ha == hb) continue;
    for (int64_t jw = 0; jw < rw->K; ++jw) {
      int64_t wa, wb;
      prun_valid(rw, jw * dW, 0, P->w, qw0, qw0 + nw, &wa, &wb);
      if (wa == wb) continue;
      /* Gather the offset's elements; positions outside the input hold the pad value. */
      int64_t sub[4], src_st[4];
      for (int d = 0; d < 4; ++d) sub[d] = cnt[d];
      sub[PD_H] = hb - ha;
      sub[PD_W] = wb - wa;
      const int partial = sub[PD_H] != nh || sub[PD_W] != nw;
      if (partial) kse_fill(f->dt, b[PF_V], is_max ? pool_max_pad(f->dt) : 0, n);
      src_st[PD_N] = f->in_st[PD_N] * es;
      src_st[PD_C] = f->in_st[PD_C] * es;
      src_st[PD_H] = rh->step * f->in_st[PD_H] * es;
      src_st[PD_W] = rw->step * f->in_st[PD_W] * es;
      const int64_t ih = rh->start + ha * rh->step + jh * dH;
      const int64_t iw = rw->start + wa * rw->step + jw * dW;
      const uint64_t src =
          f->in + (uint64_t)((lo[PD_N] * f->in_st[PD_N] + lo[PD_C] * f->in_st[PD_C] +
                              ih * f->in_st[PD_H] + iw * f->in_st[PD_W]) *
                             (int64_t)es);
      const uint64_t dst =
          kaddr(b[PF_V]) + (uint64_t)((ha - qh0) * ls_es[PD_H] + (wa - qw0) * ls_es[PD_W]);
      mtia_wait(pdma(f->perm, dst, MTIA_PE_SPACE_LOCAL, ls_es, src, MTIA_PE_SPACE_DEVICE, src_st,
                     sub, es));
      if (is_max) {
        /* take = v > acc || v != v; acc, idx = take ? (v, this offset's index) : (acc, idx) */
        kse_imm(MTIA_PE_SE_ADD, MTIA_PE_DT_INT64, b[PF_T], b[PF_VF],
                (uint64_t)(jh * dH * P->w + jw * dW), n);
        kse(MTIA_PE_SE_GT, f->dt, MTIA_PE_DT_BOOL, b[PF_M1], b[PF_V], b[PF_ACC], 0, n);
        if (kdt_is_float(f->dt)) {
          kse(MTIA_PE_SE_NE, f->dt, MTIA_PE_DT_BOOL, b[PF_M2], b[PF_V], b[PF_V], 0, n);
          kse(MTIA_PE_SE_LOR, MTIA_PE_DT_BOOL, MTIA_PE_DT_BOOL, b[PF_M1], b[PF_M1], b[PF_M2], 0, n);
        }
        kse(MTIA_PE_SE_SELECT, f->dt, f->dt, b[PF_ACC], b[PF_M1], b[PF_V], b[PF_ACC], n);
        kse(MTIA_PE_SE_SELECT, MTIA_PE_DT_INT64, MTIA_PE_DT_INT64, b[PF_IDX], b[PF_M1], b[PF_T],
            b[PF_IDX], n);
      } else if (f->dt == MTIA_PE_DT_FP32) {
        kse(MTIA_PE_SE_ADD, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, b[PF_ACC], b[PF_ACC], b[PF_V], 0, n);
      } else {
        kcast(f->dt, MTIA_PE_DT_FP32, b[PF_VF], b[PF_V], n);
        kse(MTIA_PE_SE_ADD, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, b[PF_ACC], b[PF_ACC], b[PF_VF], 0, n);
      }
    }
  }

  /* Store: the box's outputs are (lo n, lo c, rh->o0 + qh, rw->o0 + qw). */
  int64_t ost[4], ist[4];
  for (int d = 0; d < 4; ++d) ost[d] = f->out_st[d] * es;
  const int64_t oh = rh->o0 + qh0, ow = rw->o0 + qw0;
  const uint64_t out =
      f->out + (uint64_t)((lo[PD_N] * f->out_st[PD_N] + lo[PD_C] * f->out_st[PD_C] +
                           oh * f->out_st[PD_H] + ow * f->out_st[PD_W]) *
                          (int64_t)es);
  const void* res = b[PF_ACC];
  if (is_max) {
    for (int d = 0; d < 4; ++d) ist[d] = f->idx_st[d] * 8;
    const uint64_t idx =
        f->idx + (uint64_t)((lo[PD_N] * f->idx_st[PD_N] + lo[PD_C] * f->idx_st[PD_C] +
                             oh * f->idx_st[PD_H] + ow * f->idx_st[PD_W]) *
                            8);
    f->st_idx = pdma(f->perm, idx, MTIA_PE_SPACE_DEVICE, ist, kaddr(b[PF_IDX]), MTIA_PE_SPACE_LOCAL,
                     ls8, cnt, 8);
  } else {
    float* acc = (float*)b[PF_ACC];
    uint32_t* fh = (uint32_t*)f->pl.vec[2];
    uint32_t* fw = (uint32_t*)f->pl.vec[3];
    const int count_pad = (P->flags & POOL_COUNT_PAD) != 0;
    for (int64_t i = 0; i < nh; ++i) {
      fh[i] = ku64_to_f32_bits((uint64_t)pax_divisor(&f->ah, oh + i, count_pad));
    }
    for (int64_t j = 0; j < nw; ++j) {
      fw[j] = ku64_to_f32_bits((uint64_t)pax_divisor(&f->aw, ow + j, count_pad));
    }
    pool_divide(P, f->perm, cnt, acc, fh, fw, (float*)b[PF_VF], (float*)b[PF_T]);
    if (f->dt != MTIA_PE_DT_FP32) {
      kcast(MTIA_PE_DT_FP32, f->dt, b[PF_STAGE], acc, n);
      res = b[PF_STAGE];
    }
  }
  f->st_out = pdma(f->perm, out, MTIA_PE_SPACE_DEVICE, ost, kaddr(res), MTIA_PE_SPACE_LOCAL, ls_es,
                   cnt, es);
}

/* out (and, for max, indices: int64 ih * W + iw) of N x C x OH x OW; in N x C x H x W. */
MTIA_KERNEL(pool2d, "out:ptr in:ptr indices:ptr " KSIG_POOL_PARAMS
                    " " KSIG_STRIDES("in") " " KSIG_STRIDES("out") " " KSIG_STRIDES("idx"));
int pool2d(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(pool2d_args, A);
  const pool_params* P = (const pool_params*)(const void*)&A->dtype;
  const int64_t* strides[3] = {A->in_st, A->out_st, A->idx_st};
  const int s = pool_check(P, strides, P->op == POOL_MAX ? 3 : 2);
  if (s != MTIA_KSTATUS_OK) return s;
  pfwd f;
  MTIA_ZERO_(f);
  f.P = P;
  pool_axes(P, &f.ah, &f.aw);
  pool_perm(A->in_st, f.perm);
  f.in = A->in;
  f.out = A->out;
  f.idx = A->indices;
  f.in_st = A->in_st;
  f.out_st = A->out_st;
  f.idx_st = A->idx_st;
  f.dt = (uint8_t)P->dtype;
  f.es = kdt_size(P->dtype);
  const uint64_t total = (uint64_t)(P->n * P->c * P->oh * P->ow);
  if (total == 0) return MTIA_KSTATUS_OK;
  /* Per element: acc, idx, v, t, m1, m2 (8 bytes: they also hold index boxes), vf, stage. */
  const unsigned e = f.es;
  const unsigned bpe[8] = {e > 4 ? e : 4, 8, e, 8, 8, 8, 8, e};
  const int st = pool_plan(&f.pl, bpe, 8, total);
  if (st != MTIA_KSTATUS_OK) return st;

  const uint64_t pe = mtia_pe_id(), pes = mtia_num_pes();
  uint64_t g = 0; /* chunks dealt so far, over every run pair */
  prun rh, rw;
  for (int64_t o = 0; o < P->oh; o += rh.len) {
    pax_run(&f.ah, o, &rh);
    for (int64_t q = 0; q < P->ow; q += rw.len) {
      pax_run(&f.aw, q, &rw);
      const int64_t size[4] = {P->n, P->c, rh.len, rw.len};
      pchunks ch;
      pchunks_plan(&ch, f.perm, size, f.pl.cap);
      const uint64_t first = (pe + pes - g % pes) % pes;
      for (uint64_t k = first; k < ch.count; k += pes) {
        int64_t lo[4], cnt[4];
        pchunks_get(&ch, k, lo, cnt);
        pfwd_chunk(&f, &rh, &rw, lo, cnt);
      }
      g += ch.count;
    }
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}

/* ---- pool2d_backward ------------------------------------------------------------------------ */
enum { PB_ACC, PB_TMP, PB_G, PB_GF, PB_I, PB_T, PB_M, PB_STAGE };

typedef struct {
  const pool_params* P;
  pax ah, aw;
  int perm[4];
  uint64_t gi, go, idx;
  const int64_t *gi_st, *go_st, *idx_st;
  uint8_t dt;
  unsigned es;
  pplan pl;
  mtia_tag_t st_out;
} pbwd;

/* Adds the contributions of the outputs [ha, hb) x [wa, wb) of runs rh, rw at window offset
 * (jh, jw) into the chunk's accumulator (box lo / cnt of grad_input). */
static void pbwd_offset(pbwd* f, const int64_t* lo, const int64_t* cnt, const prun* rh,
                        const prun* rw, int64_t jh, int64_t jw, int64_t ha, int64_t hb, int64_t wa,
                        int64_t wb) {
  const pool_params* P = f->P;
  void** b = f->pl.b;
  const unsigned es = f->es;
  const int64_t dH = pax_dil(&f->ah), dW = pax_dil(&f->aw);
  int64_t ob[4], ls_es[4], ls4[4], ls8[4], acc_ls[4], src[4];
  ob[PD_N] = cnt[PD_N];
  ob[PD_C] = cnt[PD_C];
  ob[PD_H] = hb - ha;
  ob[PD_W] = wb - wa;
  const uint32_t n = (uint32_t)pbox_elems(ob);
  pbox_strides(f->perm, ob, es, ls_es);
  pbox_strides(f->perm, ob, 4, ls4);
  pbox_strides(f->perm, ob, 8, ls8);
  pbox_strides(f->perm, cnt, 4, acc_ls);
  const int64_t oh = rh->o0 + ha, ow = rw->o0 + wa;

  /* grad_output of those outputs, as fp32. */
  for (int d = 0; d < 4; ++d) src[d] = f->go_st[d] * es;
  const uint64_t go = f->go + (uint64_t)((lo[PD_N] * f->go_st[PD_N] + lo[PD_C] * f->go_st[PD_C] +
                                          oh * f->go_st[PD_H] + ow * f->go_st[PD_W]) *
                                         (int64_t)es);
  mtia_wait(pdma(f->perm, kaddr(b[PB_G]), MTIA_PE_SPACE_LOCAL, ls_es, go, MTIA_PE_SPACE_DEVICE, src,
                 ob, es));
  void* g = b[PB_G];
  if (f->dt != MTIA_PE_DT_FP32) {
    kcast(f->dt, MTIA_PE_DT_FP32, b[PB_GF], g, n);
    g = b[PB_GF];
  }
  int64_t* rv = (int64_t*)f->pl.vec[0];
  int64_t* cv = (int64_t*)f->pl.vec[1];
  if (P->op == POOL_MAX) {
    /* Keep the outputs whose index is this offset's position. */
    for (int d = 0; d < 4; ++d) src[d] = f->idx_st[d] * 8;
    const uint64_t idx =
        f->idx + (uint64_t)((lo[PD_N] * f->idx_st[PD_N] + lo[PD_C] * f->idx_st[PD_C] +
                             oh * f->idx_st[PD_H] + ow * f->idx_st[PD_W]) *
                            8);
    mtia_wait(pdma(f->perm, kaddr(b[PB_I]), MTIA_PE_SPACE_LOCAL, ls8, idx, MTIA_PE_SPACE_DEVICE,
                   src, ob, 8));
    for (int64_t i = 0; i < ob[PD_H]; ++i) {
      rv[i] = (rh->start + (ha + i) * rh->step + jh * dH) * P->w;
    }
    for (int64_t j = 0; j < ob[PD_W]; ++j) cv[j] = rw->start + (wa + j) * rw->step + jw * dW;
    pexpand(f->perm, b[PB_T], rv, ob, PD_H, 8);
    pexpand(f->perm, b[PB_TMP], cv, ob, PD_W, 8);
    kse(MTIA_PE_SE_ADD, MTIA_PE_DT_INT64, MTIA_PE_DT_INT64, b[PB_T], b[PB_T], b[PB_TMP], 0, n);
    kse(MTIA_PE_SE_EQ, MTIA_PE_DT_INT64, MTIA_PE_DT_BOOL, b[PB_M], b[PB_I], b[PB_T], 0, n);
    pselect_imm(MTIA_PE_DT_FP32, g, b[PB_M], g, 0, n);
  } else {
    uint32_t* fh = (uint32_t*)f->pl.vec[2];
    uint32_t* fw = (uint32_t*)f->pl.vec[3];
    const int count_pad = (P->flags & POOL_COUNT_PAD) != 0;
    for (int64_t i = 0; i < ob[PD_H]; ++i) {
      fh[i] = ku64_to_f32_bits((uint64_t)pax_divisor(&f->ah, oh + i, count_pad));
    }
    for (int64_t j = 0; j < ob[PD_W]; ++j) {
      fw[j] = ku64_to_f32_bits((uint64_t)pax_divisor(&f->aw, ow + j, count_pad));
    }
    pool_divide(P, f->perm, ob, (float*)g, fh, fw, (float*)b[PB_T], (float*)b[PB_M]);
  }
  /* acc[lattice] += g: the positions of these outputs at this offset, strided by the runs'
   * steps inside the chunk (a local gather, an add, a local scatter). */
  int64_t lat[4];
  lat[PD_N] = acc_ls[PD_N];
  lat[PD_C] = acc_ls[PD_C];
  lat[PD_H] = acc_ls[PD_H] * rh->step;
  lat[PD_W] = acc_ls[PD_W] * rw->step;
  const int64_t ih = rh->start + ha * rh->step + jh * dH - lo[PD_H];
  const int64_t iw = rw->start + wa * rw->step + jw * dW - lo[PD_W];
  const uint64_t at = kaddr(b[PB_ACC]) + (uint64_t)(ih * acc_ls[PD_H] + iw * acc_ls[PD_W]);
  mtia_wait(pdma(f->perm, kaddr(b[PB_TMP]), MTIA_PE_SPACE_LOCAL, ls4, at, MTIA_PE_SPACE_LOCAL, lat,
                 ob, 4));
  kse(MTIA_PE_SE_ADD, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, b[PB_TMP], b[PB_TMP], g, 0, n);
  mtia_wait(pdma(f->perm, at, MTIA_PE_SPACE_LOCAL, lat, kaddr(b[PB_TMP]), MTIA_PE_SPACE_LOCAL, ls4,
                 ob, 4));
}

static void pbwd_chunk(pbwd* f, const int64_t* lo, const int64_t* cnt) {
  const pool_params* P = f->P;
  void** b = f->pl.b;
  const uint32_t n = (uint32_t)pbox_elems(cnt);
  const int64_t dH = pax_dil(&f->ah), dW = pax_dil(&f->aw);
  mtia_wait(f->st_out); /* the previous chunk has left the accumulator / staging buffer */
  kse_fill(MTIA_PE_DT_FP32, b[PB_ACC], 0, n);
  /* Outputs in row-major order reach an element with decreasing window offsets, so offsets
   * are visited from the last: each element's sum runs in PyTorch's order. */
  prun rh, rw;
  for (int64_t o = 0; o < P->oh; o += rh.len) {
    pax_run(&f->ah, o, &rh);
    for (int64_t jh = rh.K - 1; jh >= 0; --jh) {
      int64_t ha, hb;
      prun_valid(&rh, jh * dH, lo[PD_H], lo[PD_H] + cnt[PD_H], 0, rh.len, &ha, &hb);
      if (ha == hb) continue;
      for (int64_t q = 0; q < P->ow; q += rw.len) {
        pax_run(&f->aw, q, &rw);
        for (int64_t jw = rw.K - 1; jw >= 0; --jw) {
          int64_t wa, wb;
          prun_valid(&rw, jw * dW, lo[PD_W], lo[PD_W] + cnt[PD_W], 0, rw.len, &wa, &wb);
          if (wa == wb) continue;
          pbwd_offset(f, lo, cnt, &rh, &rw, jh, jw, ha, hb, wa, wb);
        }
      }
    }
  }
  const unsigned es = f->es;
  int64_t ls_es[4], dst[4];
  pbox_strides(f->perm, cnt, es, ls_es);
  const void* res = b[PB_ACC];
  if (f->dt != MTIA_PE_DT_FP32) {
    kcast(MTIA_PE_DT_FP32, f->dt, b[PB_STAGE], res, n);
    res = b[PB_STAGE];
  }
  for (int d = 0; d < 4; ++d) dst[d] = f->gi_st[d] * es;
  const uint64_t gi = f->gi + (uint64_t)((lo[PD_N] * f->gi_st[PD_N] + lo[PD_C] * f->gi_st[PD_C] +
                                          lo[PD_H] * f->gi_st[PD_H] + lo[PD_W] * f->gi_st[PD_W]) *
                                         (int64_t)es);
  f->st_out =
      pdma(f->perm, gi, MTIA_PE_SPACE_DEVICE, dst, kaddr(res), MTIA_PE_SPACE_LOCAL, ls_es, cnt, es);
}

typedef struct {
  uint64_t grad_in, grad_out, indices, dtype;
  int64_t op, flags, n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, divisor;
  int64_t gi_st[4], go_st[4], idx_st[4];
} pool2d_backward_args;

/* grad_in (N x C x H x W, every element written) from grad_out (N x C x OH x OW) and, for
 * max, the forward's indices. The dtype is grad_in's and grad_out's. */
MTIA_KERNEL(pool2d_backward, "grad_in:ptr grad_out:ptr indices:ptr " KSIG_POOL_PARAMS
                             " " KSIG_STRIDES("gi") " " KSIG_STRIDES("go") " " KSIG_STRIDES("idx"));
int pool2d_backward(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(pool2d_backward_args, A);
  const pool_params* P = (const pool_params*)(const void*)&A->dtype;
  const int64_t* strides[3] = {A->gi_st, A->go_st, A->idx_st};
  int s = pool_check(P, strides, P->op == POOL_MAX ? 3 : 2);
  if (s != MTIA_KSTATUS_OK) return s;
  if (!kdt_is_float(P->dtype)) return MTIA_KSTATUS_BAD_DTYPE; /* gradients are floating */
  pbwd f;
  MTIA_ZERO_(f);
  f.P = P;
  pool_axes(P, &f.ah, &f.aw);
  pool_perm(A->gi_st, f.perm);
  f.gi = A->grad_in;
  f.go = A->grad_out;
  f.idx = A->indices;
  f.gi_st = A->gi_st;
  f.go_st = A->go_st;
  f.idx_st = A->idx_st;
  f.dt = (uint8_t)P->dtype;
  f.es = kdt_size(P->dtype);
  const uint64_t total = (uint64_t)(P->n * P->c * P->h * P->w);
  if (total == 0) return MTIA_KSTATUS_OK;
  const unsigned e = f.es;
  const unsigned bpe[8] = {4, 8, e, 4, 8, 8, 8, e};
  s = pool_plan(&f.pl, bpe, 8, total);
  if (s != MTIA_KSTATUS_OK) return s;
  const int64_t size[4] = {P->n, P->c, P->h, P->w};
  pchunks ch;
  pchunks_plan(&ch, f.perm, size, f.pl.cap);
  for (uint64_t k = mtia_pe_id(); k < ch.count; k += mtia_num_pes()) {
    int64_t lo[4], cnt[4];
    pchunks_get(&ch, k, lo, cnt);
    pbwd_chunk(&f, lo, cnt);
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}
