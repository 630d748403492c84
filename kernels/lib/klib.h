/* Internal helpers of the kernel library (the .c files in kernels/lib/): the local-store arena,
 * dtype facts, N-D DMA with dimension folding, and short wrappers that issue a unit operation and
 * wait for it. Not part of the public intrinsics (kernels/include/mtia_kernel.h).
 *
 * The control core has no FPU: nothing here (or in the kernels) may use float or double.
 * Floating constants reach the units as bit patterns. */
#ifndef MTIA_KERNELS_KLIB_H_
#define MTIA_KERNELS_KLIB_H_

#include <stdint.h>

#include "mtia_kernel.h"

/* Thin wrappers over a DMA or a unit instruction carry no debug information of their own: the
 * instructions they issue, and their calls to kdma, are named by the caller's source line in
 * sanitizer reports and PE faults (docs/sanitizer.md, "Source lines"). */
#define KWRAPPER static inline __attribute__((nodebug))

/* Bytes at the top of the local store left to the stack (descriptors, a few locals). */
#define KLIB_STACK_RESERVE (8u * 1024u)

#define KMIN(a, b) ((a) < (b) ? (a) : (b))
#define KMAX(a, b) ((a) > (b) ? (a) : (b))

static inline uint64_t kceil_div(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}

static inline uint64_t kaddr(const void* p) {
  return (uint64_t)(uintptr_t)p;
}

/* ---- dtypes ------------------------------------------------------------------------------ */
static inline unsigned kdt_size(uint64_t dt) {
  switch (dt) {
    case MTIA_PE_DT_FP32:
    case MTIA_PE_DT_INT32:
      return 4;
    case MTIA_PE_DT_FP16:
    case MTIA_PE_DT_BF16:
      return 2;
    case MTIA_PE_DT_INT8:
    case MTIA_PE_DT_BOOL:
      return 1;
    case MTIA_PE_DT_INT64:
      return 8;
    default:
      return 0;
  }
}
static inline int kdt_is_float(uint64_t dt) {
  return dt == MTIA_PE_DT_FP32 || dt == MTIA_PE_DT_FP16 || dt == MTIA_PE_DT_BF16;
}
static inline int kdt_is_int(uint64_t dt) {
  return dt == MTIA_PE_DT_INT8 || dt == MTIA_PE_DT_INT32 || dt == MTIA_PE_DT_INT64;
}

/* fp32 bit patterns. */
#define KF32_ONE 0x3f800000u
#define KF32_NEG_INF 0xff800000u

/* The fp32 bit pattern of an unsigned integer, rounded to nearest even (no FPU). */
static inline uint32_t ku64_to_f32_bits(uint64_t v) {
  if (v == 0) return 0;
  int msb = 63;
  while (((v >> msb) & 1u) == 0) --msb;
  uint32_t exp = (uint32_t)msb + 127u;
  uint64_t mant;
  if (msb <= 23) {
    mant = v << (23 - msb);
  } else {
    const int drop = msb - 23;
    const uint64_t rest = v & ((1ull << drop) - 1);
    const uint64_t half = 1ull << (drop - 1);
    mant = v >> drop;
    if (rest > half || (rest == half && (mant & 1u))) {
      ++mant;
      if (mant == (1ull << 24)) {
        mant >>= 1;
        ++exp;
      }
    }
  }
  return (exp << 23) | (uint32_t)(mant & 0x7fffffu);
}

/* ---- The local-store arena ------------------------------------------------------------------
 * The library's kernels keep no MTIA_LOCAL globals (a module holds many kernels): each launch
 * carves its buffers out of the local store below the stack, sized to the preset's store. */
typedef struct karena {
  uint64_t next;
  uint64_t end;
} karena;

static inline void karena_init(karena* a) {
  a->next = mtia_ls_base();
  a->end = mtia_ls_base() + mtia_ls_bytes() - KLIB_STACK_RESERVE;
}
static inline uint64_t karena_left(const karena* a) {
  return a->end > a->next ? a->end - a->next : 0;
}
/* 64-byte aligned; 0 when it does not fit. */
static inline void* kalloc(karena* a, uint64_t bytes) {
  const uint64_t at = (a->next + 63u) & ~63ull;
  if (at > a->end || a->end - at < bytes) return 0;
  a->next = at + bytes;
  return (void*)(uintptr_t)at;
}
/* Bytes that n buffers of the given sizes take in the arena (alignment included). */
static inline uint64_t kalloc_bytes(uint64_t bytes) {
  return (bytes + 63u) & ~63ull;
}

/* ---- DMA ----------------------------------------------------------------------------------
 * Copies a box of sizes[0] x ... x sizes[nd-1] elements (dim 0 outermost, nd <= 4) with byte
 * strides on each side. Size-1 dimensions are dropped and dimensions that are contiguous on
 * both sides are merged, so the descriptor has as few dimensions (and as wide elements) as the
 * layout allows. */
static inline void kdma_build(mtia_pe_dma_desc* dp, uint64_t dst, uint8_t dst_space,
                              const int64_t* dst_st, uint64_t src, uint8_t src_space,
                              const int64_t* src_st, const uint64_t* sizes, int nd, unsigned es) {
  /* Built straight into the descriptor, in one pass: every DMA of the library comes through
   * here, so its instruction count is a good part of a small launch's. */
  MTIA_ZERO_(*dp);
  uint64_t* sz = dp->sizes;
  uint64_t* ss = dp->src_strides;
  uint64_t* ds = dp->dst_strides;
  int m = 0;
  for (int i = 0; i < nd; ++i) {
    const uint64_t n = sizes[i];
    if (n == 1) continue;
    const uint64_t s = (uint64_t)src_st[i], t = (uint64_t)dst_st[i];
    /* Merge into the outer dimension where its stride is this one's extent on both sides. */
    if (m > 0 && ss[m - 1] == s * n && ds[m - 1] == t * n) {
      sz[m - 1] *= n;
      ss[m - 1] = s;
      ds[m - 1] = t;
    } else {
      sz[m] = n;
      ss[m] = s;
      ds[m] = t;
      ++m;
    }
  }
  if (m == 0) {
    sz[0] = 1;
    ss[0] = es;
    ds[0] = es;
    m = 1;
  }
  /* Wider elements (up to 8 bytes) when the innermost run is contiguous on both sides and
   * every address, stride and run length allows them. */
  unsigned w = es;
  if (es < 8 && ss[m - 1] == es && ds[m - 1] == es) {
    uint64_t all = src | dst | (sz[m - 1] * es);
    for (int i = 0; i < m - 1; ++i) all |= ss[i] | ds[i];
    while (w < 8 && (all & (2 * w - 1)) == 0) w *= 2;
    if (w != es) {
      sz[m - 1] = sz[m - 1] * es / w;
      ss[m - 1] = w;
      ds[m - 1] = w;
    }
  }
  dp->hdr = mtia_desc_header(MTIA_PE_DESC_DMA, 0);
  dp->ndims = (uint8_t)m;
  dp->elem_size = (uint8_t)w;
  dp->src_space = src_space;
  dp->dst_space = dst_space;
  dp->src = src;
  dp->dst = dst;
}
static inline mtia_tag_t kdma(uint64_t dst, uint8_t dst_space, const int64_t* dst_st, uint64_t src,
                              uint8_t src_space, const int64_t* src_st, const uint64_t* sizes,
                              int nd, unsigned es) {
  mtia_pe_dma_desc d;
  kdma_build(&d, dst, dst_space, dst_st, src, src_space, src_st, sizes, nd, es);
  return mtia_dma_start(&d);
}

/* kdma of n elements of es bytes, contiguous on both sides: kdma_build's descriptor for that
 * box (the same widened elements), without its dimension merging. */
KWRAPPER mtia_tag_t kdma_flat(uint64_t dst, uint8_t dst_space, uint64_t src, uint8_t src_space,
                              uint64_t n, unsigned es) {
  mtia_pe_dma_desc d;
  MTIA_ZERO_(d);
  unsigned w = es;
  const uint64_t all = src | dst | (n * es);
  while (w < 8 && (all & (2 * w - 1)) == 0) w *= 2;
  d.hdr = mtia_desc_header(MTIA_PE_DESC_DMA, 0);
  d.ndims = 1;
  d.elem_size = (uint8_t)w;
  d.src_space = src_space;
  d.dst_space = dst_space;
  d.src = src;
  d.dst = dst;
  d.sizes[0] = n * es / w;
  d.src_strides[0] = w;
  d.dst_strides[0] = w;
  return mtia_dma_start(&d);
}

/* kdma_build for the commonest box, rows x cols elements whose rows are contiguous on both
 * sides and start dst_rs / src_rs bytes apart, in a fraction of its instructions: fills *d
 * exactly as kdma_build would. Only the first two dimensions are written; the rest must be
 * zero. */
static inline void kdma_rows_build(mtia_pe_dma_desc* d, uint64_t dst, uint8_t dst_space,
                                   uint64_t dst_rs, uint64_t src, uint8_t src_space,
                                   uint64_t src_rs, uint64_t rows, uint64_t cols, unsigned es) {
  if (rows == 0 || cols < 2) { /* an empty box or one column: the general path */
    const uint64_t sizes[2] = {rows, cols};
    const int64_t ds[2] = {(int64_t)dst_rs, (int64_t)es}, ss[2] = {(int64_t)src_rs, (int64_t)es};
    kdma_build(d, dst, dst_space, ds, src, src_space, ss, sizes, 2, es);
    return;
  }
  const uint64_t run = cols * es;
  uint64_t all = src | dst;
  int m;
  if (rows == 1 || (src_rs == run && dst_rs == run)) { /* one run */
    m = 1;
    d->sizes[0] = rows * cols;
    d->sizes[1] = 0;
    d->src_strides[1] = 0;
    d->dst_strides[1] = 0;
    all |= rows * run;
  } else {
    m = 2;
    d->sizes[0] = rows;
    d->sizes[1] = cols;
    d->src_strides[0] = src_rs;
    d->dst_strides[0] = dst_rs;
    all |= run | src_rs | dst_rs;
  }
  unsigned w = es;
  if (es < 8) {
    while (w < 8 && (all & (2 * w - 1)) == 0) w *= 2;
  }
  d->sizes[m - 1] = d->sizes[m - 1] * es / w;
  d->src_strides[m - 1] = w;
  d->dst_strides[m - 1] = w;
  d->hdr = mtia_desc_header(MTIA_PE_DESC_DMA, 0);
  d->ndims = (uint8_t)m;
  d->elem_size = (uint8_t)w;
  d->src_space = src_space;
  d->dst_space = dst_space;
  d->src = src;
  d->dst = dst;
}

/* A DMA descriptor kept for a stream of copies of the same box at different addresses (the
 * tiles of a loop): kdma_rows rebuilds it only when the box, or the addresses' alignment
 * below 8 bytes (which sets the element width), changes. Zeroed = none built yet. */
typedef struct krows_dma {
  mtia_pe_dma_desc d;
  uint64_t rows, cols, dst_rs, src_rs, es;
  uint64_t key; /* kdma_rows_keyed's name for the box, 0 when built by kdma_rows */
} krows_dma;

/* kdma_rows's rebuild, out of line: a loop's copies mostly reuse the descriptor. */
static inline __attribute__((noinline)) mtia_tag_t kdma_rows_rebuild(
    krows_dma* c, uint64_t key, uint64_t dst, uint8_t dst_space, uint64_t dst_rs, uint64_t src,
    uint8_t src_space, uint64_t src_rs, uint64_t rows, uint64_t cols, unsigned es) {
  kdma_rows_build(&c->d, dst, dst_space, dst_rs, src, src_space, src_rs, rows, cols, es);
  c->rows = rows;
  c->cols = cols;
  c->dst_rs = dst_rs;
  c->src_rs = src_rs;
  c->es = es;
  c->key = key;
  return mtia_dma_start(&c->d);
}

/* kdma for a box with contiguous rows: rows x cols elements of es bytes, rows dst_rs / src_rs
 * bytes apart. Issues exactly kdma's descriptor, through cache c. */
static inline mtia_tag_t kdma_rows(krows_dma* c, uint64_t dst, uint8_t dst_space, uint64_t dst_rs,
                                   uint64_t src, uint8_t src_space, uint64_t src_rs, uint64_t rows,
                                   uint64_t cols, unsigned es) {
  if (rows == c->rows && cols == c->cols && dst_rs == c->dst_rs && src_rs == c->src_rs &&
      es == c->es && dst_space == c->d.dst_space && src_space == c->d.src_space &&
      (((src ^ c->d.src) | (dst ^ c->d.dst)) & 7) == 0) {
    c->d.src = src;
    c->d.dst = dst;
    return mtia_dma_start(&c->d);
  }
  return kdma_rows_rebuild(c, 0, dst, dst_space, dst_rs, src, src_space, src_rs, rows, cols, es);
}

/* kdma_rows for a loop that names its boxes: `key` (not 0) must change whenever rows, cols,
 * the row strides, es or the spaces do, and then the cache is checked with one comparison
 * instead of seven (a GEMM's k-step issues two tile loads). */
static inline mtia_tag_t kdma_rows_keyed(krows_dma* c, uint64_t key, uint64_t dst,
                                         uint8_t dst_space, uint64_t dst_rs, uint64_t src,
                                         uint8_t src_space, uint64_t src_rs, uint64_t rows,
                                         uint64_t cols, unsigned es) {
  if (key == c->key && (((src ^ c->d.src) | (dst ^ c->d.dst)) & 7) == 0) {
    c->d.src = src;
    c->d.dst = dst;
    return mtia_dma_start(&c->d);
  }
  return kdma_rows_rebuild(c, key, dst, dst_space, dst_rs, src, src_space, src_rs, rows, cols, es);
}

/* Contiguous local strides (bytes) for a box. */
static inline void kcontig(int64_t* st, const uint64_t* sizes, int nd, unsigned es) {
  int64_t s = es;
  for (int i = nd - 1; i >= 0; --i) {
    st[i] = s;
    s *= (int64_t)sizes[i];
  }
}

/* Device box -> contiguous local buffer, and back. Device strides in elements. */
KWRAPPER mtia_tag_t kdma_in(void* local, uint64_t dev, const int64_t* dev_st_elems,
                            const uint64_t* sizes, int nd, unsigned es) {
  int64_t ls[4], ds[4];
  kcontig(ls, sizes, nd, es);
  for (int i = 0; i < nd; ++i) ds[i] = dev_st_elems[i] * (int64_t)es;
  return kdma(kaddr(local), MTIA_PE_SPACE_LOCAL, ls, dev, MTIA_PE_SPACE_DEVICE, ds, sizes, nd, es);
}
KWRAPPER mtia_tag_t kdma_out(uint64_t dev, const int64_t* dev_st_elems, const void* local,
                             const uint64_t* sizes, int nd, unsigned es) {
  int64_t ls[4], ds[4];
  kcontig(ls, sizes, nd, es);
  for (int i = 0; i < nd; ++i) ds[i] = dev_st_elems[i] * (int64_t)es;
  return kdma(dev, MTIA_PE_SPACE_DEVICE, ds, kaddr(local), MTIA_PE_SPACE_LOCAL, ls, sizes, nd, es);
}

/* 2-D tile helpers: rows x cols, element (i, j) at dev + (i*rs + j*cs) * es. */
KWRAPPER mtia_tag_t ktile_in(void* local, uint64_t dev, int64_t rs, int64_t cs, uint64_t rows,
                             uint64_t cols, unsigned es) {
  const uint64_t sizes[2] = {rows, cols};
  const int64_t st[2] = {rs, cs};
  return kdma_in(local, dev, st, sizes, 2, es);
}
KWRAPPER mtia_tag_t ktile_out(uint64_t dev, int64_t rs, int64_t cs, const void* local,
                              uint64_t rows, uint64_t cols, unsigned es) {
  const uint64_t sizes[2] = {rows, cols};
  const int64_t st[2] = {rs, cs};
  return kdma_out(dev, st, local, sizes, 2, es);
}

/* Fills a rows x cols local tile from a vector: per_row != 0 repeats vec[i] along row i,
 * otherwise vec[j] down column j (a local DMA with a zero source stride). */
KWRAPPER void kexpand(void* dst, const void* vec, uint64_t rows, uint64_t cols, int per_row,
                      unsigned es) {
  const uint64_t sizes[2] = {rows, cols};
  const int64_t ds[2] = {(int64_t)(cols * es), (int64_t)es};
  int64_t ss[2];
  ss[0] = per_row ? (int64_t)es : 0;
  ss[1] = per_row ? 0 : (int64_t)es;
  mtia_wait(
      kdma(kaddr(dst), MTIA_PE_SPACE_LOCAL, ds, kaddr(vec), MTIA_PE_SPACE_LOCAL, ss, sizes, 2, es));
}

/* ---- SE / RE wrappers: issue, then wait (kernels here keep each PE's unit work in order) --- */
KWRAPPER void kse(uint8_t op, uint8_t in_dt, uint8_t out_dt, void* out, const void* a,
                  const void* b, const void* c, uint32_t n) {
  mtia_pe_se_desc d;
  MTIA_ZERO_(d);
  d.hdr = mtia_desc_header(MTIA_PE_DESC_SE, 0);
  d.op = op;
  d.in_dtype = in_dt;
  d.out_dtype = out_dt;
  d.count = n;
  d.src[0] = kaddr(a);
  d.src[1] = kaddr(b);
  d.src[2] = kaddr(c);
  d.dst = kaddr(out);
  mtia_wait(mtia_se_op(&d));
}
/* out = op(a, imm) */
KWRAPPER void kse_imm(uint8_t op, uint8_t dt, void* out, const void* a, uint64_t imm, uint32_t n) {
  mtia_wait(mtia_se_binary_imm(op, dt, out, a, imm, n));
}
/* out[i] = the bit pattern `bits` (SE cast of an immediate to its own dtype). */
KWRAPPER void kse_fill(uint8_t dt, void* out, uint64_t bits, uint32_t n) {
  mtia_pe_se_desc d;
  MTIA_ZERO_(d);
  d.hdr = mtia_desc_header(MTIA_PE_DESC_SE, 0);
  d.op = MTIA_PE_SE_CAST;
  d.in_dtype = dt;
  d.out_dtype = dt;
  d.count = n;
  d.mode[0] = MTIA_PE_OPND_IMMEDIATE;
  d.imm[0] = bits;
  d.dst = kaddr(out);
  mtia_wait(mtia_se_op(&d));
}
KWRAPPER void kcast(uint8_t in_dt, uint8_t out_dt, void* out, const void* a, uint32_t n) {
  kse(MTIA_PE_SE_CAST, in_dt, out_dt, out, a, 0, 0, n);
}
KWRAPPER void kre(uint8_t op, uint8_t in_dt, uint8_t out_dt, int axis, int accumulate, void* dst,
                  const void* src, uint32_t rows, uint32_t cols) {
  mtia_wait(mtia_reduce(op, in_dt, out_dt, (uint8_t)axis, accumulate ? MTIA_PE_RE_ACCUMULATE : 0,
                        dst, src, rows, cols, cols));
}

/* ---- Argument checks shared by the kernels --------------------------------------------------
 * Sizes and strides arrive as i64 slots; negative ones are a bad shape (the DMA strides are
 * unsigned byte counts). */
static inline int kcheck_shape(const int64_t* sizes, int n) {
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0) return MTIA_KSTATUS_BAD_SHAPE;
  }
  return MTIA_KSTATUS_OK;
}

#endif /* MTIA_KERNELS_KLIB_H_ */
