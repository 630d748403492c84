/* Upsampling over [N, C, D, H, W] views with any strides (NCHW, channels_last, slices); 1-D and
 * 2-D ops are the same views with leading spatial extents of 1:
 *   upsample           nearest, nearest-exact or linear (linear, bilinear, trilinear), forward;
 *   upsample_backward  the gradient of either, into grad_input.
 *
 * Source positions follow PyTorch's definitions (ATen's UpSample.h), computed in fp32 by the SE
 * from the host's per-axis ratio (`scale_*`, the fp32 bits of what area_pixel_compute_scale or
 * compute_scales_value gives):
 *   nearest        src = min(floor(o * ratio), in - 1); with flag SHORTCUTS, o when out == in
 *                  and o / 2 when out == 2 in (PyTorch takes these for some ops, not all)
 *   nearest-exact  src = min(floor((o + 0.5) * ratio), in - 1)
 *   linear         r = ratio * o (align_corners) or max(ratio * (o + 0.5) - 0.5, 0);
 *                  i0 = min(floor(r), in - 1), i1 = min(i0 + 1, in - 1),
 *                  l1 = clamp(r - i0, 0, 1), l0 = 1 - l1; out == in: i0 = i1 = o, l0 = 1, l1 = 0
 * Each PE builds these tables for the three axes once per launch. Axes beyond the op's `dims`
 * (the padded leading ones) take one source position and no weight.
 *
 * Forward: a unit of work is a block of output rows (an oh range times a channel range at fixed
 * n, od), with the whole width. For each depth and height corner the input rows are gathered by
 * the DMA (one box per output row), then the output columns are copied from their width
 * corner's input columns by local DMAs, each moving a progression of columns (up_boxes) for
 * every row of the block at once. Linear interpolation weighs the two
 * width corners with per-column weight tiles (fp32, SE), then the height corners and the depth
 * corners with per-row immediates, in PyTorch's order: ((x0 w0 + x1 w1) h0 + (...) h1) d0 + ...
 * Tiles run along the width, or along the channels when the input is channels_last.
 *
 * Backward: units are blocks of grad_input rows (an ih range times a channel range at fixed n,
 * id), so no two PEs write the same element. For each output depth that reaches the block, the
 * grad_output rows whose height corners land in the block are loaded and added, weighed, into
 * per-input-row sums (fp32, SE); then each input column receives the sum of the contiguous
 * range of output columns whose width corner it is, weighed: one RE reduction per column and
 * row that accumulates into the block's fp32 accumulator. The source positions are monotone in
 * the output index, so those ranges come from the tables by one scan. */
#include "klib.h"
#include "ksig.h"

#define UP_NEAREST 1
#define UP_NEAREST_EXACT 2
#define UP_LINEAR 3

#define UP_ALIGN_CORNERS 1u /* linear */
#define UP_SHORTCUTS 2u     /* nearest: equal and doubled extents map without arithmetic */
#define UP_FLAGS_MASK 3u

#define UP_MAX_EXTENT (1ll << 24) /* fp32 holds every output index exactly */

enum { UA_D = 0, UA_H = 1, UA_W = 2 };
/* Operand dims: n, c, d, h, w. */
enum { US_N = 0, US_C = 1, US_D = 2, US_H = 3, US_W = 4 };

typedef struct {
  uint64_t dst, src, dtype;
  int64_t mode, flags, dims, n, c, in[3], out[3];
  uint64_t scale[3];
  int64_t dst_st[5], src_st[5];
} upsample_args;

#define KSIG_UP_PARAMS                                                                        \
  "dtype:dtype mode:i64 flags:i64 dims:i64 n:i64 c:i64 in_d:i64 in_h:i64 in_w:i64 out_d:i64 " \
  "out_h:i64 out_w:i64 scale_d:f32 scale_h:f32 scale_w:f32"
#define KSIG_ST5(p) p "_st_n:i64 " p "_st_c:i64 " p "_st_d:i64 " p "_st_h:i64 " p "_st_w:i64"

/* ---- One axis: source positions and weights ------------------------------------------------ */
typedef struct {
  int64_t in, out;
  int real;        /* one of the op's spatial axes */
  int ncorner;     /* 2 for a linear axis of the op, else 1 */
  int64_t* idx[2]; /* source position of each output, per corner */
  uint32_t* w[2];  /* fp32 weight of each output, per corner (linear) */
  int64_t* lo[2];  /* backward: lo[e][i] = first output whose corner-e source is >= i (i <= in) */
} uax;

static void* uax_alloc(karena* a, uint64_t bytes, int* ok) {
  void* p = kalloc(a, bytes < 8 ? 8 : bytes);
  if (!p) *ok = 0;
  return p;
}

/* Builds one axis's tables; returns 0 when the local store cannot hold them. */
static int uax_build(uax* x, karena* ar, const upsample_args* A, int axis, int backward) {
  const int64_t I = A->in[axis], O = A->out[axis];
  const uint32_t n = (uint32_t)O;
  const uint64_t ratio = A->scale[axis] & 0xffffffffu;
  int ok = 1;
  x->in = I;
  x->out = O;
  x->real = axis >= 3 - A->dims;
  x->ncorner = (x->real && A->mode == UP_LINEAR) ? 2 : 1;
  for (int e = 0; e < x->ncorner; ++e) {
    x->idx[e] = (int64_t*)uax_alloc(ar, (uint64_t)O * 8, &ok);
    if (A->mode == UP_LINEAR) x->w[e] = (uint32_t*)uax_alloc(ar, (uint64_t)O * 4, &ok);
    if (backward) x->lo[e] = (int64_t*)uax_alloc(ar, (uint64_t)(I + 1) * 8, &ok);
  }
  if (!ok) return 0;
  int64_t* i0 = x->idx[0];
  if (!x->real || O == 0) {
    for (int64_t o = 0; o < O; ++o) i0[o] = 0;
  } else if (O == I &&
             (A->mode == UP_LINEAR || (A->mode == UP_NEAREST && (A->flags & UP_SHORTCUTS)))) {
    for (int64_t o = 0; o < O; ++o) i0[o] = o;
    if (A->mode == UP_LINEAR) {
      for (int64_t o = 0; o < O; ++o) {
        x->idx[1][o] = o;
        x->w[0][o] = KF32_ONE;
        x->w[1][o] = 0;
      }
    }
  } else if (A->mode == UP_NEAREST && (A->flags & UP_SHORTCUTS) && O == 2 * I) {
    for (int64_t o = 0; o < O; ++o) i0[o] = o >> 1;
  } else {
    /* fp32 arithmetic on the SE: r in a scratch vector borrowed from the arena's free space. */
    karena scratch = *ar;
    float* r = (float*)kalloc(&scratch, (uint64_t)O * 4);
    float* t = (float*)kalloc(&scratch, (uint64_t)O * 4);
    if (!r || !t) return 0;
    for (int64_t o = 0; o < O; ++o) i0[o] = o;
    kcast(MTIA_PE_DT_INT64, MTIA_PE_DT_FP32, r, i0, n);
    const uint8_t F = MTIA_PE_DT_FP32;
    if (A->mode == UP_NEAREST) {
      kse_imm(MTIA_PE_SE_MUL, F, r, r, ratio, n);
    } else if (A->mode == UP_NEAREST_EXACT) {
      kse_imm(MTIA_PE_SE_ADD, F, r, r, 0x3f000000u, n); /* + 0.5 */
      kse_imm(MTIA_PE_SE_MUL, F, r, r, ratio, n);
    } else if (A->flags & UP_ALIGN_CORNERS) {
      kse_imm(MTIA_PE_SE_MUL, F, r, r, ratio, n);
    } else {
      kse_imm(MTIA_PE_SE_ADD, F, r, r, 0x3f000000u, n);
      kse_imm(MTIA_PE_SE_MUL, F, r, r, ratio, n);
      kse_imm(MTIA_PE_SE_SUB, F, r, r, 0x3f000000u, n);
      kse_imm(MTIA_PE_SE_MAX, F, r, r, 0, n); /* a negative source is 0 */
    }
    kse(MTIA_PE_SE_FLOOR, F, F, t, r, 0, 0, n);
    kcast(F, MTIA_PE_DT_INT64, i0, t, n);
    kse_imm(MTIA_PE_SE_MIN, MTIA_PE_DT_INT64, i0, i0, (uint64_t)(I - 1), n);
    if (A->mode == UP_LINEAR) {
      uint32_t* l0 = x->w[0];
      uint32_t* l1 = x->w[1];
      kse_imm(MTIA_PE_SE_ADD, MTIA_PE_DT_INT64, x->idx[1], i0, 1, n);
      kse_imm(MTIA_PE_SE_MIN, MTIA_PE_DT_INT64, x->idx[1], x->idx[1], (uint64_t)(I - 1), n);
      kcast(MTIA_PE_DT_INT64, F, t, i0, n);
      kse(MTIA_PE_SE_SUB, F, F, l1, r, t, 0, n);
      kse_imm(MTIA_PE_SE_MAX, F, l1, l1, 0, n);
      kse_imm(MTIA_PE_SE_MIN, F, l1, l1, KF32_ONE, n);
      kse(MTIA_PE_SE_NEG, F, F, l0, l1, 0, 0, n);
      kse_imm(MTIA_PE_SE_ADD, F, l0, l0, KF32_ONE, n); /* -l1 + 1 == 1 - l1 */
    }
  }
  if (backward) {
    for (int e = 0; e < x->ncorner; ++e) {
      const int64_t* s = x->idx[e];
      int64_t o = 0;
      for (int64_t i = 0; i <= I; ++i) {
        while (o < O && s[o] < i) ++o;
        x->lo[e][i] = o;
      }
    }
  }
  return 1;
}

/* ---- Local tiles -----------------------------------------------------------------------------
 * A tile holds rows x channels x X columns (X = the width of the input or the output). Channels
 * inner ("cl", for channels_last operands) or columns inner; the channel extent is always the
 * block's capacity, so tiles of partial blocks keep the geometry. Byte strides per dim. */
typedef struct {
  int64_t row, ch, col;
} utile;

static utile utile_of(int cl, int64_t ccap, int64_t X, unsigned es) {
  utile t;
  t.row = ccap * X * (int64_t)es;
  t.ch = cl ? (int64_t)es : X * (int64_t)es;
  t.col = cl ? ccap * (int64_t)es : (int64_t)es;
  return t;
}

/* A DMA of a box of rows x channels x columns (counts), its inner dimension chosen by `cl`. */
static mtia_tag_t udma3(int cl, uint64_t dst, uint8_t dsp, const int64_t* dst_st, uint64_t src,
                        uint8_t ssp, const int64_t* src_st, const int64_t* cnt, unsigned es) {
  /* st and cnt in (row, ch, col) order. */
  const uint64_t sizes[3] = {(uint64_t)cnt[0], (uint64_t)cnt[cl ? 2 : 1],
                             (uint64_t)cnt[cl ? 1 : 2]};
  const int64_t ds[3] = {dst_st[0], dst_st[cl ? 2 : 1], dst_st[cl ? 1 : 2]};
  const int64_t ss[3] = {src_st[0], src_st[cl ? 2 : 1], src_st[cl ? 1 : 2]};
  return kdma(dst, dsp, ds, src, ssp, ss, sizes, 3, es);
}

static int up_check(const upsample_args* A) {
  if (A->mode != UP_NEAREST && A->mode != UP_NEAREST_EXACT && A->mode != UP_LINEAR) {
    return MTIA_KSTATUS_BAD_OP;
  }
  if (((uint64_t)A->flags & ~(uint64_t)UP_FLAGS_MASK) != 0) return MTIA_KSTATUS_BAD_OP;
  if (A->mode == UP_LINEAR ? !kdt_is_float(A->dtype) : kdt_size(A->dtype) == 0) {
    return MTIA_KSTATUS_BAD_DTYPE;
  }
  if (A->dims < 1 || A->dims > 3) return MTIA_KSTATUS_BAD_SHAPE;
  const int64_t sizes[8] = {A->n,     A->c,      A->in[0],  A->in[1],
                            A->in[2], A->out[0], A->out[1], A->out[2]};
  if (kcheck_shape(sizes, 8) != MTIA_KSTATUS_OK) return MTIA_KSTATUS_BAD_SHAPE;
  if (kcheck_shape(A->dst_st, 5) != MTIA_KSTATUS_OK) return MTIA_KSTATUS_BAD_SHAPE;
  if (kcheck_shape(A->src_st, 5) != MTIA_KSTATUS_OK) return MTIA_KSTATUS_BAD_SHAPE;
  for (int a = 0; a < 3; ++a) {
    if (A->in[a] >= UP_MAX_EXTENT || A->out[a] >= UP_MAX_EXTENT) return MTIA_KSTATUS_BAD_SHAPE;
    /* Padded axes are single positions; a real axis with outputs needs an input. */
    if (a < 3 - A->dims && (A->in[a] != 1 || A->out[a] != 1)) return MTIA_KSTATUS_BAD_SHAPE;
    if (A->in[a] == 0 && A->out[a] > 0) return MTIA_KSTATUS_BAD_SHAPE;
  }
  return MTIA_KSTATUS_OK;
}

/* The block capacities: channels and rows per unit, from the bytes one (row, channel) pair of
 * each side takes. */
static void up_caps(int64_t C, int64_t rows, int64_t total, uint64_t left, uint64_t per_row,
                    int64_t* ccap, int64_t* rcap) {
  int64_t cap = (int64_t)(left / per_row);
  const int64_t share = (int64_t)KMAX(kceil_div((uint64_t)total, mtia_num_pes()), 1u);
  if (cap > share) cap = share;
  if (cap < 1) cap = 1;
  *ccap = KMIN(C, cap);
  *rcap = KMIN(rows, KMAX(cap / *ccap, 1));
}

/* ---- Gathers along the width ------------------------------------------------------------------
 * Outputs o0 + q * ostep (q < count) whose source columns are i0 + q * istep: one DMA moves such
 * a set of columns for a whole block. The columns of a corner are covered greedily, each box
 * taking the longest such progression from the first column not yet covered (ostep up to
 * UP_MAX_PERIOD), so regular patterns (integer factors, equal sizes) take a few DMAs a row. */
#define UP_MAX_PERIOD 8

typedef struct {
  int32_t o0, count, ostep, i0, istep; /* extents are below 2^24 */
} ubox;

/* Fills boxes (room for O) for the source columns idx[0..O); returns how many. `seen` is
 * scratch of O bytes. */
static int64_t up_boxes(const int64_t* idx, int64_t O, ubox* boxes, uint8_t* seen) {
  for (int64_t o = 0; o < O; ++o) seen[o] = 0;
  int64_t nb = 0;
  for (int64_t o = 0; o < O; ++o) {
    if (seen[o]) continue;
    ubox best = {(int32_t)o, 1, 1, (int32_t)idx[o], 0};
    for (int64_t p = 1; p <= UP_MAX_PERIOD && o + p < O; ++p) {
      if (seen[o + p]) continue;
      const int64_t d = idx[o + p] - idx[o];
      if (d < 0) continue;
      int64_t len = 2;
      while (o + len * p < O && !seen[o + len * p] && idx[o + len * p] == idx[o] + len * d) ++len;
      if (len > best.count) {
        best.count = (int32_t)len;
        best.ostep = (int32_t)p;
        best.istep = (int32_t)d;
      }
    }
    for (int64_t q = 0; q < best.count; ++q) seen[o + q * best.ostep] = 1;
    boxes[nb++] = best;
  }
  return nb;
}

/* ---- upsample: forward --------------------------------------------------------------------- */
MTIA_KERNEL(upsample, "out:ptr in:ptr " KSIG_UP_PARAMS " " KSIG_ST5("out") " " KSIG_ST5("in"));
int upsample(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(upsample_args, A);
  int s = up_check(A);
  if (s != MTIA_KSTATUS_OK) return s;
  const int64_t N = A->n, C = A->c, OD = A->out[0], OH = A->out[1], OW = A->out[2];
  const int64_t W = A->in[2];
  if (N * C * OD * OH * OW == 0) return MTIA_KSTATUS_OK;
  const uint8_t dt = (uint8_t)A->dtype;
  const unsigned es = kdt_size(A->dtype);
  const int linear = A->mode == UP_LINEAR;
  const int64_t* is = A->src_st;
  const int64_t* os = A->dst_st;

  karena ar;
  karena_init(&ar);
  uax ax[3];
  for (int a = 0; a < 3; ++a) {
    if (!uax_build(&ax[a], &ar, A, a, 0)) return MTIA_KSTATUS_NO_LOCAL_STORE;
  }
  /* The width gathers of each corner: planned in the free space, then kept as long as needed. */
  ubox* boxes[2] = {0, 0};
  int64_t nbox[2] = {0, 0};
  for (int e = 0; e < ax[UA_W].ncorner; ++e) {
    karena tmp = ar;
    ubox* bx = (ubox*)kalloc(&tmp, (uint64_t)OW * sizeof(ubox));
    uint8_t* seen = (uint8_t*)kalloc(&tmp, (uint64_t)OW);
    if (!bx || !seen) return MTIA_KSTATUS_NO_LOCAL_STORE;
    nbox[e] = up_boxes(ax[UA_W].idx[e], OW, bx, seen);
    boxes[e] = (ubox*)kalloc(&ar, (uint64_t)nbox[e] * sizeof(ubox)); /* == bx */
  }
  /* Per (row, channel): the input row; the gathered row; linear: fp32 copy, width sum, height
   * sum, depth sum, two weight rows, the output stage. */
  const uint64_t per = (uint64_t)W * es + (uint64_t)OW * (linear ? 2 * es + 24 : es) + 64;
  const uint64_t slack = 12 * 64;
  if (karena_left(&ar) < slack + per) return MTIA_KSTATUS_NO_LOCAL_STORE;
  int64_t ccap, hcap;
  up_caps(C, OH, N * C * OD * OH, karena_left(&ar) - slack, per, &ccap, &hcap);
  const uint64_t tile = (uint64_t)(hcap * ccap * OW);
  const int cl = is[US_C] < is[US_W];
  uint8_t* in_t = (uint8_t*)kalloc(&ar, (uint64_t)(hcap * ccap * W) * es);
  /* fp32 linear gathers straight into f and stores from its sums: no g, no stage. */
  const int direct = linear && es == 4;
  uint8_t* g = direct ? 0 : (uint8_t*)kalloc(&ar, tile * es);
  float *f = 0, *tw = 0, *th = 0, *td = 0, *wt0 = 0, *wt1 = 0;
  uint8_t* stage = 0;
  if (linear) {
    f = (float*)kalloc(&ar, tile * 4);
    tw = (float*)kalloc(&ar, tile * 4);
    th = (float*)kalloc(&ar, tile * 4);
    td = (float*)kalloc(&ar, tile * 4);
    wt0 = (float*)kalloc(&ar, tile * 4);
    wt1 = (float*)kalloc(&ar, tile * 4);
    if (!direct) stage = (uint8_t*)kalloc(&ar, tile * es);
  }
  if (!in_t || (!direct && !g) ||
      (linear && (!f || !tw || !th || !td || !wt0 || !wt1 || (!direct && !stage)))) {
    return MTIA_KSTATUS_NO_LOCAL_STORE;
  }
  const utile ti = utile_of(cl, ccap, W, es), to = utile_of(cl, ccap, OW, es);
  const utile t4 = utile_of(cl, ccap, OW, 4);
  if (linear) {
    /* Weight tiles: every (row, channel) holds the width weights of its columns. */
    const int64_t cnt[3] = {hcap, ccap, OW};
    const int64_t zst[3] = {0, 0, 4};
    const int64_t dst[3] = {t4.row, t4.ch, t4.col};
    mtia_wait(udma3(cl, kaddr(wt0), MTIA_PE_SPACE_LOCAL, dst, kaddr(ax[UA_W].w[0]),
                    MTIA_PE_SPACE_LOCAL, zst, cnt, 4));
    mtia_wait(udma3(cl, kaddr(wt1), MTIA_PE_SPACE_LOCAL, dst, kaddr(ax[UA_W].w[1]),
                    MTIA_PE_SPACE_LOCAL, zst, cnt, 4));
  }

  const int64_t nhb = (OH + hcap - 1) / hcap, ncb = (C + ccap - 1) / ccap;
  const uint64_t units = (uint64_t)(N * OD * nhb * ncb);
  const uint8_t F = MTIA_PE_DT_FP32;
  for (uint64_t u = mtia_pe_id(); u < units; u += mtia_num_pes()) {
    uint64_t r = u;
    const int64_t cb = (int64_t)(r % (uint64_t)ncb);
    r /= (uint64_t)ncb;
    const int64_t hb = (int64_t)(r % (uint64_t)nhb);
    r /= (uint64_t)nhb;
    const int64_t od = (int64_t)(r % (uint64_t)OD);
    const int64_t n = (int64_t)(r / (uint64_t)OD);
    const int64_t c0 = cb * ccap, nc = KMIN(ccap, C - c0);
    const int64_t oh0 = hb * hcap, nh = KMIN(hcap, OH - oh0);
    const uint32_t cnt_all = (uint32_t)(nh * ccap * OW);
    const uint32_t cnt_row = (uint32_t)(ccap * OW);
    for (int a = 0; a < ax[UA_D].ncorner; ++a) {
      const int64_t id = ax[UA_D].idx[a][od];
      for (int b = 0; b < ax[UA_H].ncorner; ++b) {
        /* The input rows of this corner, one box per output row. */
        for (int64_t i = 0; i < nh; ++i) {
          const int64_t ih = ax[UA_H].idx[b][oh0 + i];
          const uint64_t src =
              A->src + (uint64_t)((n * is[US_N] + c0 * is[US_C] + id * is[US_D] + ih * is[US_H]) *
                                  (int64_t)es);
          const int64_t cnt[3] = {1, nc, W};
          const int64_t sst[3] = {0, is[US_C] * (int64_t)es, is[US_W] * (int64_t)es};
          const int64_t dst[3] = {ti.row, ti.ch, ti.col};
          udma3(cl, kaddr(in_t) + (uint64_t)(i * ti.row), MTIA_PE_SPACE_LOCAL, dst, src,
                MTIA_PE_SPACE_DEVICE, sst, cnt, es);
        }
        mtia_wait_all();
        for (int e = 0; e < ax[UA_W].ncorner; ++e) {
          /* Column ow of every row and channel from its corner's input column. */
          uint8_t* gd = (linear && es == 4) ? (uint8_t*)f : g;
          for (int64_t k = 0; k < nbox[e]; ++k) {
            const ubox* bx = &boxes[e][k];
            const int64_t cnt[3] = {nh, nc, bx->count};
            const int64_t sst[3] = {ti.row, ti.ch, (int64_t)bx->istep * ti.col};
            const int64_t dst[3] = {to.row, to.ch, (int64_t)bx->ostep * to.col};
            udma3(cl, kaddr(gd) + (uint64_t)((int64_t)bx->o0 * to.col), MTIA_PE_SPACE_LOCAL, dst,
                  kaddr(in_t) + (uint64_t)((int64_t)bx->i0 * ti.col), MTIA_PE_SPACE_LOCAL, sst, cnt,
                  es);
          }
          mtia_wait_all();
          if (!linear) break;
          if (es != 4) kcast(dt, F, f, g, cnt_all);
          if (e == 0) {
            kse(MTIA_PE_SE_MUL, F, F, tw, f, wt0, 0, cnt_all);
          } else {
            kse(MTIA_PE_SE_MUL, F, F, f, f, wt1, 0, cnt_all);
            kse(MTIA_PE_SE_ADD, F, F, tw, tw, f, 0, cnt_all);
          }
        }
        if (!linear) continue;
        if (ax[UA_H].real) {
          for (int64_t i = 0; i < nh; ++i) {
            const uint64_t lh = ax[UA_H].w[b][oh0 + i];
            float* rt = tw + i * ccap * OW;
            float* rh = th + i * ccap * OW;
            if (b == 0) {
              kse_imm(MTIA_PE_SE_MUL, F, rh, rt, lh, cnt_row);
            } else {
              kse_imm(MTIA_PE_SE_MUL, F, rt, rt, lh, cnt_row);
              kse(MTIA_PE_SE_ADD, F, F, rh, rh, rt, 0, cnt_row);
            }
          }
        }
      }
      if (linear && ax[UA_D].real) {
        const uint64_t ld = ax[UA_D].w[a][od];
        if (a == 0) {
          kse_imm(MTIA_PE_SE_MUL, F, td, th, ld, cnt_all);
        } else {
          kse_imm(MTIA_PE_SE_MUL, F, th, th, ld, cnt_all);
          kse(MTIA_PE_SE_ADD, F, F, td, td, th, 0, cnt_all);
        }
      }
    }
    const void* res = g;
    if (linear) {
      const float* acc = ax[UA_D].real ? td : ax[UA_H].real ? th : tw;
      if (es == 4) {
        res = acc;
      } else {
        kcast(F, dt, stage, acc, cnt_all);
        res = stage;
      }
    }
    const uint64_t out =
        A->dst +
        (uint64_t)((n * os[US_N] + c0 * os[US_C] + od * os[US_D] + oh0 * os[US_H]) * (int64_t)es);
    const int64_t cnt[3] = {nh, nc, OW};
    const int64_t dst[3] = {os[US_H] * (int64_t)es, os[US_C] * (int64_t)es, os[US_W] * (int64_t)es};
    const int64_t sst[3] = {to.row, to.ch, to.col};
    mtia_wait(
        udma3(cl, out, MTIA_PE_SPACE_DEVICE, dst, kaddr(res), MTIA_PE_SPACE_LOCAL, sst, cnt, es));
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}

/* ---- upsample_backward ------------------------------------------------------------------------
 */
MTIA_KERNEL(upsample_backward,
            "grad_in:ptr grad_out:ptr " KSIG_UP_PARAMS " " KSIG_ST5("gi") " " KSIG_ST5("go"));
int upsample_backward(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(upsample_args, A);
  int s = up_check(A);
  if (s != MTIA_KSTATUS_OK) return s;
  if (!kdt_is_float(A->dtype)) return MTIA_KSTATUS_BAD_DTYPE; /* gradients are floating */
  const int64_t N = A->n, C = A->c, ID = A->in[0], IH = A->in[1], W = A->in[2];
  const int64_t OH = A->out[1], OW = A->out[2];
  if (N * C * ID * IH * W == 0) return MTIA_KSTATUS_OK;
  const uint8_t dt = (uint8_t)A->dtype;
  const unsigned es = kdt_size(A->dtype);
  const int linear = A->mode == UP_LINEAR;
  const int64_t* gs = A->dst_st; /* grad_input */
  const int64_t* os = A->src_st; /* grad_output */

  karena ar;
  karena_init(&ar);
  uax ax[3];
  for (int a = 0; a < 3; ++a) {
    if (!uax_build(&ax[a], &ar, A, a, 1)) return MTIA_KSTATUS_NO_LOCAL_STORE;
  }
  /* Per (row, channel): grad_input's accumulator and stage; grad_output's row and its fp32 copy;
   * the height sums, their weighted copy and (linear) two weight rows. */
  const uint64_t per = (uint64_t)W * (4 + es) + (uint64_t)OW * (es + 4 + 8 + 8) + 64;
  const uint64_t slack = 10 * 64;
  if (karena_left(&ar) < slack + per) return MTIA_KSTATUS_NO_LOCAL_STORE;
  int64_t ccap, k;
  up_caps(C, KMAX(IH, OH), N * C * ID * IH, karena_left(&ar) - slack, per, &ccap, &k);
  const int64_t icap = KMIN(IH, k), ocap = KMIN(OH, k);
  const int cl = os[US_C] < os[US_W];
  const uint64_t itile = (uint64_t)(icap * ccap * W), otile = (uint64_t)(ocap * ccap * OW);
  const uint64_t qtile = (uint64_t)(icap * ccap * OW);
  float* acc = (float*)kalloc(&ar, itile * 4);
  uint8_t* stage = (uint8_t*)kalloc(&ar, itile * es);
  uint8_t* g = (uint8_t*)kalloc(&ar, otile * es);
  float* gf = (float*)kalloc(&ar, otile * 4);
  float* q = (float*)kalloc(&ar, qtile * 4);
  float* p = (float*)kalloc(&ar, qtile * 4);
  uint8_t* touched = (uint8_t*)kalloc(&ar, (uint64_t)icap);
  float *wt0 = 0, *wt1 = 0;
  if (linear) {
    wt0 = (float*)kalloc(&ar, qtile * 4);
    wt1 = (float*)kalloc(&ar, qtile * 4);
  }
  if (!acc || !stage || !g || !gf || !q || !p || !touched || (linear && (!wt0 || !wt1))) {
    return MTIA_KSTATUS_NO_LOCAL_STORE;
  }
  const utile to = utile_of(cl, ccap, OW, es), t4 = utile_of(cl, ccap, OW, 4);
  if (linear) {
    const int64_t cnt[3] = {icap, ccap, OW};
    const int64_t zst[3] = {0, 0, 4};
    const int64_t dst[3] = {t4.row, t4.ch, t4.col};
    mtia_wait(udma3(cl, kaddr(wt0), MTIA_PE_SPACE_LOCAL, dst, kaddr(ax[UA_W].w[0]),
                    MTIA_PE_SPACE_LOCAL, zst, cnt, 4));
    mtia_wait(udma3(cl, kaddr(wt1), MTIA_PE_SPACE_LOCAL, dst, kaddr(ax[UA_W].w[1]),
                    MTIA_PE_SPACE_LOCAL, zst, cnt, 4));
  }
  /* The accumulator: rows x columns x channels (channels inner: one RE result run). */
  const int64_t acc_row = W * ccap * 4, acc_col = ccap * 4;
  const uint32_t row_n = (uint32_t)(ccap * OW);

  const int64_t nib = (IH + icap - 1) / icap, ncb = (C + ccap - 1) / ccap;
  const uint64_t units = (uint64_t)(N * ID * nib * ncb);
  const uint8_t F = MTIA_PE_DT_FP32;
  for (uint64_t u = mtia_pe_id(); u < units; u += mtia_num_pes()) {
    uint64_t r = u;
    const int64_t cb = (int64_t)(r % (uint64_t)ncb);
    r /= (uint64_t)ncb;
    const int64_t ib = (int64_t)(r % (uint64_t)nib);
    r /= (uint64_t)nib;
    const int64_t id = (int64_t)(r % (uint64_t)ID);
    const int64_t n = (int64_t)(r / (uint64_t)ID);
    const int64_t c0 = cb * ccap, nc = KMIN(ccap, C - c0);
    const int64_t ih0 = ib * icap, nih = KMIN(icap, IH - ih0);
    const uint32_t q_all = (uint32_t)(nih * ccap * OW);
    kse_fill(F, acc, 0, (uint32_t)(nih * W * ccap));
    for (int a = 0; a < ax[UA_D].ncorner; ++a) {
      const int64_t od0 = ax[UA_D].lo[a][id], od1 = ax[UA_D].lo[a][id + 1];
      for (int64_t od = od0; od < od1; ++od) {
        /* q[ih] = sum of the weighted grad_output rows whose height corner is ih. */
        kse_fill(F, q, 0, q_all);
        for (int64_t i = 0; i < nih; ++i) touched[i] = 0;
        for (int b = 0; b < ax[UA_H].ncorner; ++b) {
          const int64_t oh_end = ax[UA_H].lo[b][ih0 + nih];
          for (int64_t oh0 = ax[UA_H].lo[b][ih0]; oh0 < oh_end; oh0 += ocap) {
            const int64_t nh = KMIN(ocap, oh_end - oh0);
            const uint64_t src =
                A->src +
                (uint64_t)((n * os[US_N] + c0 * os[US_C] + od * os[US_D] + oh0 * os[US_H]) *
                           (int64_t)es);
            const int64_t cnt[3] = {nh, nc, OW};
            const int64_t sst[3] = {os[US_H] * (int64_t)es, os[US_C] * (int64_t)es,
                                    os[US_W] * (int64_t)es};
            const int64_t dst[3] = {to.row, to.ch, to.col};
            uint8_t* gd = es == 4 ? (uint8_t*)gf : g;
            mtia_wait(udma3(cl, kaddr(gd), MTIA_PE_SPACE_LOCAL, dst, src, MTIA_PE_SPACE_DEVICE, sst,
                            cnt, es));
            if (es != 4) kcast(dt, F, gf, g, (uint32_t)(nh * ccap * OW));
            for (int64_t i = 0; i < nh; ++i) {
              const int64_t ir = ax[UA_H].idx[b][oh0 + i] - ih0;
              float* qr = q + ir * ccap * OW;
              float* gr = gf + i * ccap * OW;
              touched[ir] = 1;
              if (linear && ax[UA_H].real) {
                kse_imm(MTIA_PE_SE_MUL, F, p, gr, ax[UA_H].w[b][oh0 + i], row_n);
                gr = p;
              }
              kse(MTIA_PE_SE_ADD, F, F, qr, qr, gr, 0, row_n);
            }
          }
        }
        if (linear && ax[UA_D].real) {
          kse_imm(MTIA_PE_SE_MUL, F, q, q, ax[UA_D].w[a][od], q_all);
        }
        /* Each input column: the sum of the outputs whose width corner it is. */
        for (int e = 0; e < ax[UA_W].ncorner; ++e) {
          const float* pw = q;
          if (linear) {
            kse(MTIA_PE_SE_MUL, F, F, p, q, e == 0 ? wt0 : wt1, 0, q_all);
            pw = p;
          }
          const int64_t* lw = ax[UA_W].lo[e];
          for (int64_t i = 0; i < nih; ++i) {
            if (!touched[i]) continue;
            const uint8_t* row = (const uint8_t*)pw + i * t4.row;
            uint8_t* arow = (uint8_t*)acc + i * acc_row;
            for (int64_t iw = 0; iw < W; ++iw) {
              const int64_t o0 = lw[iw], o1 = lw[iw + 1];
              if (o1 <= o0) continue;
              if (cl) {
                mtia_wait(mtia_reduce(MTIA_PE_RE_SUM, F, F, 0, MTIA_PE_RE_ACCUMULATE,
                                      arow + iw * acc_col, row + o0 * t4.col, (uint32_t)(o1 - o0),
                                      (uint32_t)nc, (uint32_t)ccap));
              } else {
                mtia_wait(mtia_reduce(MTIA_PE_RE_SUM, F, F, 1, MTIA_PE_RE_ACCUMULATE,
                                      arow + iw * acc_col, row + o0 * t4.col, (uint32_t)nc,
                                      (uint32_t)(o1 - o0), (uint32_t)OW));
              }
            }
          }
        }
      }
    }
    const void* res = acc;
    const uint32_t nall = (uint32_t)(nih * W * ccap);
    if (es != 4) {
      kcast(F, dt, stage, acc, nall);
      res = stage;
    }
    const uint64_t out =
        A->dst +
        (uint64_t)((n * gs[US_N] + c0 * gs[US_C] + id * gs[US_D] + ih0 * gs[US_H]) * (int64_t)es);
    const int64_t cnt[3] = {nih, nc, W};
    const int64_t dst[3] = {gs[US_H] * (int64_t)es, gs[US_C] * (int64_t)es, gs[US_W] * (int64_t)es};
    const int64_t sst[3] = {W * ccap * (int64_t)es, (int64_t)es, ccap * (int64_t)es};
    mtia_wait(
        udma3(1, out, MTIA_PE_SPACE_DEVICE, dst, kaddr(res), MTIA_PE_SPACE_LOCAL, sst, cnt, es));
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}
