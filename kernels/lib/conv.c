/* im2col: the column matrix of a convolution, gathered by the DMA.
 *
 * The input is a 5-D view [N, C, D, H, W] with any element strides (conv1d and conv2d pass
 * size-1 leading spatial dims). The output is contiguous [C*KD*KH*KW, N*OD*OH*OW]: row
 * ((c*KD + kd)*KH + kh)*KW + kw, column (n*OD + od)*OH*OW + oh*OW + ow holds
 *
 *   in[n, c, od*sd + origin_d + kd*dil_d, oh*sh + origin_h + kh*dil_h, ow*sw + ...]
 *
 * or zero where that position is outside the input (the padding). Rows of one group are
 * consecutive, so [G, Cg*K, N*L] is the same buffer: the product of a convolution is one bmm.
 * Origins and dilations are signed: a negative origin is padding, a negative dilation walks the
 * kernel backwards (the flipped kernel of a convolution's input gradient).
 *
 * Per row and spatial dim the output positions whose input position is inside form one range
 * [lo, hi), so a row is one strided device-to-device DMA of the valid box [N, hd-ld, hh-lh,
 * hw-lw] and at most six broadcast DMAs of a zeroed local element over the slabs around it.
 * Units of work are (row, batch part) pairs, dealt round-robin to the PEs; every unit writes
 * its own output bytes, so no two PEs touch the same memory. */
#include "klib.h"
#include "ksig.h"

/* Scalars beyond this are a bad shape: keeps every product of two of them inside int64. */
#define CONV_SCALAR_LIMIT (1ll << 31)
/* Element counts beyond this are a bad shape. */
#define CONV_COUNT_LIMIT (1ull << 56)

typedef struct {
  uint64_t out, in, dtype;
  int64_t n, c;
  int64_t in_size[3];
  int64_t in_st[5]; /* N, C, D, H, W; elements */
  int64_t ksize[3];
  int64_t out_size[3];
  int64_t stride[3];
  int64_t origin[3];
  int64_t dil[3];
} im2col_args;

/* a * b, or 0 with *ok cleared when it passes CONV_COUNT_LIMIT. */
static uint64_t conv_mul(uint64_t a, uint64_t b, int* ok) {
  if (a != 0 && b > CONV_COUNT_LIMIT / a) {
    *ok = 0;
    return 0;
  }
  return a * b;
}

static int64_t conv_floor_div(int64_t a, int64_t b) { /* b > 0 */
  int64_t q = a / b;
  if (a % b != 0 && a < 0) --q;
  return q;
}

/* The output positions o in [0, out) whose input position o*s + base lies in [0, in). */
static void conv_valid(int64_t in, int64_t out, int64_t s, int64_t base, int64_t* lo, int64_t* hi) {
  int64_t l = -conv_floor_div(base, s); /* ceil(-base / s) */
  int64_t h = conv_floor_div(in - 1 - base, s) + 1;
  l = KMAX(l, 0);
  h = KMIN(h, out);
  *lo = l;
  *hi = KMAX(h, l);
}

/* Broadcasts the zero element at `zero` over a box of the output (dst strides in bytes). A
 * contiguous run goes out in 8-byte elements where the alignment allows. */
static void conv_zero(uint64_t dst, const int64_t* dst_st, const uint64_t* sizes, unsigned es,
                      uint64_t zero) {
  for (int i = 0; i < 4; ++i) {
    if (sizes[i] == 0) return;
  }
  static const int64_t kNoStride[4] = {0, 0, 0, 0};
  mtia_pe_dma_desc d;
  kdma_build(&d, dst, MTIA_PE_SPACE_DEVICE, dst_st, zero, MTIA_PE_SPACE_LOCAL, kNoStride, sizes, 4,
             es);
  if (d.ndims == 1 && d.dst_strides[0] == es) {
    const uint64_t bytes = d.sizes[0] * es;
    unsigned w = es;
    while (w < 8 && ((bytes | dst) & (2 * w - 1)) == 0) w *= 2;
    d.elem_size = (uint8_t)w;
    d.sizes[0] = bytes / w;
    d.dst_strides[0] = w;
  }
  mtia_dma_start(&d);
}

MTIA_KERNEL(im2col,
            "out:ptr in:ptr dtype:dtype n:i64 c:i64 in_d:i64 in_h:i64 in_w:i64 in_stride_n:i64 "
            "in_stride_c:i64 in_stride_d:i64 in_stride_h:i64 in_stride_w:i64 k_d:i64 k_h:i64 "
            "k_w:i64 out_d:i64 out_h:i64 out_w:i64 stride_d:i64 stride_h:i64 stride_w:i64 "
            "origin_d:i64 origin_h:i64 origin_w:i64 dil_d:i64 dil_h:i64 dil_w:i64");
int im2col(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(im2col_args, A);
  const unsigned es = kdt_size(A->dtype);
  if (es == 0) return MTIA_KSTATUS_BAD_DTYPE;
  /* Sizes and strides are non-negative, conv strides positive, and everything small enough
   * that no position or offset below can overflow. */
  const int64_t* nonneg[5] = {&A->n, A->in_size, A->in_st, A->ksize, A->out_size};
  const int counts[5] = {2, 3, 5, 3, 3};
  for (int g = 0; g < 5; ++g) {
    for (int i = 0; i < counts[g]; ++i) {
      if (nonneg[g][i] < 0 || nonneg[g][i] >= CONV_SCALAR_LIMIT) return MTIA_KSTATUS_BAD_SHAPE;
    }
  }
  for (int i = 0; i < 3; ++i) {
    if (A->stride[i] < 1 || A->stride[i] >= CONV_SCALAR_LIMIT) return MTIA_KSTATUS_BAD_SHAPE;
    if (A->origin[i] <= -CONV_SCALAR_LIMIT || A->origin[i] >= CONV_SCALAR_LIMIT) {
      return MTIA_KSTATUS_BAD_SHAPE;
    }
    if (A->dil[i] <= -CONV_SCALAR_LIMIT || A->dil[i] >= CONV_SCALAR_LIMIT) {
      return MTIA_KSTATUS_BAD_SHAPE;
    }
  }
  int ok = 1;
  const uint64_t kvol = conv_mul(conv_mul((uint64_t)A->ksize[0], (uint64_t)A->ksize[1], &ok),
                                 (uint64_t)A->ksize[2], &ok);
  const uint64_t plane = conv_mul((uint64_t)A->out_size[1], (uint64_t)A->out_size[2], &ok);
  const uint64_t L = conv_mul((uint64_t)A->out_size[0], plane, &ok);
  const uint64_t rows = conv_mul((uint64_t)A->c, kvol, &ok);
  const uint64_t cols = conv_mul((uint64_t)A->n, L, &ok);
  conv_mul(conv_mul(rows, cols, &ok), es, &ok);
  if (!ok) return MTIA_KSTATUS_BAD_SHAPE;
  if (rows == 0 || cols == 0) return MTIA_KSTATUS_OK;

  karena a;
  karena_init(&a);
  uint64_t* zero = (uint64_t*)kalloc(&a, 8);
  if (zero == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;
  *zero = 0;

  /* Too few rows for the grid: split the batch too. */
  const uint64_t pes = mtia_num_pes();
  const uint64_t N = (uint64_t)A->n;
  const uint64_t parts = rows >= pes ? 1 : KMIN(N, kceil_div(pes, rows));
  const uint64_t per_part = kceil_div(N, parts);
  const uint64_t units = rows * parts;
  const int64_t os[3] = {(int64_t)(plane * es), A->out_size[2] * (int64_t)es, (int64_t)es};

  for (uint64_t u = mtia_pe_id(); u < units; u += pes) {
    const uint64_t r = u / parts, part = u % parts;
    const uint64_t n0 = part * per_part;
    if (n0 >= N) continue;
    const uint64_t nb = KMIN(per_part, N - n0);
    /* The row's channel and kernel offsets. */
    int64_t k[3];
    uint64_t rest = r;
    for (int i = 2; i >= 0; --i) {
      k[i] = (int64_t)(rest % (uint64_t)A->ksize[i]);
      rest /= (uint64_t)A->ksize[i];
    }
    const int64_t ch = (int64_t)rest;
    int64_t lo[3], hi[3], base[3];
    int valid = 1;
    for (int i = 0; i < 3; ++i) {
      base[i] = A->origin[i] + k[i] * A->dil[i];
      conv_valid(A->in_size[i], A->out_size[i], A->stride[i], base[i], &lo[i], &hi[i]);
      valid = valid && hi[i] > lo[i];
    }
    const uint64_t dst = A->out + ((r * N + n0) * L) * es;
    const int64_t dst_st[4] = {(int64_t)(L * es), os[0], os[1], os[2]};
    if (!valid) {
      const uint64_t box[4] = {nb, (uint64_t)A->out_size[0], (uint64_t)A->out_size[1],
                               (uint64_t)A->out_size[2]};
      conv_zero(dst, dst_st, box, es, kaddr(zero));
      continue;
    }
    /* The valid box, straight from the input's strides. */
    int64_t src_off = (int64_t)n0 * A->in_st[0] + ch * A->in_st[1];
    int64_t dst_off = 0;
    int64_t src_st[4] = {A->in_st[0] * (int64_t)es, 0, 0, 0};
    uint64_t box[4] = {nb, 0, 0, 0};
    for (int i = 0; i < 3; ++i) {
      src_off += (lo[i] * A->stride[i] + base[i]) * A->in_st[2 + i];
      dst_off += lo[i] * os[i];
      src_st[1 + i] = A->stride[i] * A->in_st[2 + i] * (int64_t)es;
      box[1 + i] = (uint64_t)(hi[i] - lo[i]);
    }
    kdma(dst + (uint64_t)dst_off, MTIA_PE_SPACE_DEVICE, dst_st, A->in + (uint64_t)src_off * es,
         MTIA_PE_SPACE_DEVICE, src_st, box, 4, es);
    /* The padding around it: per dim, the slabs before and after the valid range, over the
     * valid ranges of the outer dims and the whole of the inner ones. */
    for (int i = 0; i < 3; ++i) {
      uint64_t slab[4] = {nb, 0, 0, 0};
      int64_t at = 0;
      for (int j = 0; j < 3; ++j) {
        if (j < i) {
          slab[1 + j] = (uint64_t)(hi[j] - lo[j]);
          at += lo[j] * os[j];
        } else {
          slab[1 + j] = (uint64_t)A->out_size[j];
        }
      }
      slab[1 + i] = (uint64_t)lo[i];
      conv_zero(dst + (uint64_t)at, dst_st, slab, es, kaddr(zero));
      slab[1 + i] = (uint64_t)(A->out_size[i] - hi[i]);
      conv_zero(dst + (uint64_t)(at + hi[i] * os[i]), dst_st, slab, es, kaddr(zero));
    }
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}
