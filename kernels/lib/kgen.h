/* The runtime of the kernels that the TorchInductor backend generates (docs/compiler.md).
 *
 * A generated kernel computes one fused loop nest: an iteration space of up to KGEN_MAX_DIMS
 * dimensions, outermost first, whose last `nred` dimensions are reduced. The space is cut into
 * boxes that fit the local store: dimensions after `k` whole, dimension `k` in chunks of `bk`,
 * the ones before it one index at a time. A box is a tile: every load is one N-D DMA of the box
 * (the access's element strides per dimension, so views, broadcasts and transposes need no
 * copies), the math runs on the SE and RE over the whole tile, and every store is one DMA back.
 *
 * When a box holds whole reduced rows (k before the reduced dimensions), a tile is rows x cols
 * with cols the reduced elements of a row, and each box is independent. Otherwise (a row longer
 * than a tile) a box is a chunk of one row: a PE owns whole rows and accumulates over their
 * chunks in order. PEs take boxes (or rows) round-robin, so any grid works and no barrier is
 * needed.
 *
 * Like klib.h: no float or double (the core has no FPU). */
#ifndef MTIA_KERNELS_KGEN_H_
#define MTIA_KERNELS_KGEN_H_

#include "klib.h"

#define KGEN_MAX_DIMS 8
/* Box dimensions one DMA takes (the descriptor's limit). */
#define KGEN_DMA_DIMS 4

typedef struct kgen_plan {
  int n;    /* dimensions of the space */
  int nred; /* the last nred of them are reduced */
  int64_t size[KGEN_MAX_DIMS];
  /* Set by kgen_plan_init. */
  int k;                  /* dimensions after k are whole in a box */
  int64_t bk;             /* box extent along k */
  int64_t chunks_k;       /* boxes along k */
  uint64_t cap;           /* elements of the largest box */
  uint64_t rows_cap;      /* outputs of the largest box (reductions) */
  int row_chunked;        /* 1: a box is a chunk of one reduced row */
  uint64_t nrows;         /* rows of the space (product of the kept dimensions) */
  uint64_t boxes_per_row; /* row_chunked: boxes of one row */
  uint64_t nboxes;        /* boxes in the space */
} kgen_plan;

typedef struct kgen_box {
  int64_t start[KGEN_MAX_DIMS];
  uint64_t ext[KGEN_MAX_DIMS];
  uint64_t count; /* elements */
  uint64_t rows;  /* outputs: count / cols */
  uint64_t cols;  /* reduced elements per output in this box (1 without reduction) */
  int first;      /* the first box of its rows (reductions start, not accumulate) */
  int last;       /* the last box of its rows (reductions are complete) */
  uint64_t next;  /* iteration state */
  uint64_t end;
  uint64_t step;
} kgen_box;

/* Chooses the boxes for a local store of `budget` bytes, `elem_bytes` bytes per element of a
 * tile (every tile buffer of the kernel together) and `row_bytes` per output (reduction
 * buffers). Returns 0, or MTIA_KSTATUS_NO_LOCAL_STORE when not even one element fits, or when a
 * whole reduced row is required (`need_rows`) and does not fit, or MTIA_KSTATUS_BAD_SHAPE for a
 * negative size. */
static inline int kgen_plan_init(kgen_plan* p, uint64_t budget, uint64_t elem_bytes,
                                 uint64_t row_bytes, int need_rows) {
  for (int i = 0; i < p->n; ++i) {
    if (p->size[i] < 0) return MTIA_KSTATUS_BAD_SHAPE;
  }
  uint64_t cap = budget / (elem_bytes + row_bytes);
  if (cap == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;
  const int first_red = p->n - p->nred;
  /* No box larger than a PE's share of the space (whole reduced rows), so that every PE of
   * the launch has work. */
  const uint64_t pes = mtia_num_pes();
  if (pes > 1) {
    uint64_t rows = 1, row = 1;
    for (int i = 0; i < p->n; ++i) {
      const uint64_t s = p->size[i] > 0 ? (uint64_t)p->size[i] : 1;
      if (i < first_red)
        rows *= s;
      else
        row *= s;
    }
    const uint64_t share = (rows + pes - 1) / pes * row;
    if (share < cap) cap = share;
  }
  /* Whole dimensions from the inside while they fit, at most KGEN_DMA_DIMS in a box. */
  uint64_t inner = 1;
  int k = p->n - 1;
  while (k >= 0) {
    const uint64_t s = (uint64_t)p->size[k];
    if (s != 0 && inner * s > cap) break;
    if (p->n - k > KGEN_DMA_DIMS) break;
    inner *= s == 0 ? 1 : s;
    --k;
  }
  if (k < 0) {
    k = 0; /* everything fits: one box along dimension 0 */
    p->bk = p->n > 0 ? p->size[0] : 1;
    inner /= (p->n > 0 && p->size[0] > 0) ? (uint64_t)p->size[0] : 1;
  } else if (p->n - k > KGEN_DMA_DIMS) {
    ++k; /* dimension k is whole too: the box has KGEN_DMA_DIMS dimensions */
    inner /= (uint64_t)p->size[k] > 0 ? (uint64_t)p->size[k] : 1;
    p->bk = p->size[k];
  } else {
    p->bk = (int64_t)(cap / inner);
    if (p->bk > p->size[k]) p->bk = p->size[k];
  }
  if (p->bk < 1) p->bk = 1;
  p->k = k;
  /* A row spans boxes when dimension k is reduced and cut, or a reduced dimension is outside
   * the box (taken an index at a time); all of the reduced dimensions inside one box is a
   * whole row. */
  p->row_chunked = p->nred > 0 && (k > first_red || (k == first_red && p->bk < p->size[k]));
  if (need_rows && p->row_chunked) return MTIA_KSTATUS_NO_LOCAL_STORE;
  p->chunks_k = p->n > 0 ? (p->size[k] + p->bk - 1) / p->bk : 1;
  p->cap = inner * (uint64_t)p->bk;
  p->rows_cap = 1;
  if (p->nred > 0 && !p->row_chunked) {
    uint64_t r = 1;
    for (int i = first_red; i < p->n; ++i) r *= (uint64_t)p->size[i];
    p->rows_cap = r > 0 ? p->cap / r : p->cap;
  }
  if (p->nred == 0) p->rows_cap = p->cap;
  /* Boxes: the dimensions before k one index at a time, k in chunks. */
  uint64_t nb = (uint64_t)p->chunks_k;
  for (int i = 0; i < k; ++i) nb *= (uint64_t)p->size[i];
  p->nboxes = nb;
  p->nrows = 1;
  for (int i = 0; i < first_red; ++i) p->nrows *= (uint64_t)p->size[i];
  p->boxes_per_row = 1;
  if (p->row_chunked) p->boxes_per_row = p->nrows > 0 ? nb / p->nrows : 0;
  for (int i = 0; i < p->n; ++i) {
    if (p->size[i] == 0) p->nboxes = 0;
  }
  return MTIA_KSTATUS_OK;
}

/* Box number `id` of the plan. */
static inline void kgen_box_at(const kgen_plan* p, kgen_box* b, uint64_t id) {
  const int first_red = p->n - p->nred;
  uint64_t rest = id;
  for (int i = p->n - 1; i >= 0; --i) {
    if (i > p->k) {
      b->start[i] = 0;
      b->ext[i] = (uint64_t)p->size[i];
    } else if (i == p->k) {
      const uint64_t c = rest % (uint64_t)p->chunks_k;
      rest /= (uint64_t)p->chunks_k;
      b->start[i] = (int64_t)c * p->bk;
      const int64_t left = p->size[i] - b->start[i];
      b->ext[i] = (uint64_t)(left < p->bk ? left : p->bk);
    } else {
      b->start[i] = (int64_t)(rest % (uint64_t)p->size[i]);
      rest /= (uint64_t)p->size[i];
      b->ext[i] = 1;
    }
  }
  b->count = 1;
  b->cols = 1;
  for (int i = 0; i < p->n; ++i) {
    b->count *= b->ext[i];
    if (i >= first_red) b->cols *= b->ext[i];
  }
  b->rows = b->cols > 0 ? b->count / b->cols : 0;
  if (p->row_chunked) {
    const uint64_t in_row = id % p->boxes_per_row;
    b->first = in_row == 0;
    b->last = in_row + 1 == p->boxes_per_row;
  } else {
    b->first = 1;
    b->last = 1;
  }
}

/* This PE's boxes: round-robin over boxes, or over rows when rows are chunked (a PE owns a
 * row's accumulator through all its chunks). */
static inline int kgen_first(const kgen_plan* p, kgen_box* b) {
  const uint64_t pe = mtia_pe_id(), pes = mtia_num_pes();
  if (p->row_chunked) {
    b->next = pe * p->boxes_per_row;
    b->step = pes * p->boxes_per_row;
    b->end = p->nboxes;
  } else {
    b->next = pe;
    b->step = pes;
    b->end = p->nboxes;
  }
  if (b->next >= b->end) return 0;
  kgen_box_at(p, b, b->next);
  return 1;
}

static inline int kgen_next(const kgen_plan* p, kgen_box* b) {
  uint64_t id = b->next;
  if (p->row_chunked && (id + 1) % p->boxes_per_row != 0) {
    id += 1; /* the next chunk of the same row */
  } else if (p->row_chunked) {
    id = id + 1 - p->boxes_per_row + b->step;
  } else {
    id += b->step;
  }
  if (id >= b->end) return 0;
  b->next = id;
  kgen_box_at(p, b, id);
  return 1;
}

/* The element offset of a box's first element for an access with element strides `st` and
 * offset `off`. */
static inline int64_t kgen_offset(const kgen_plan* p, const kgen_box* b, const int64_t* st,
                                  int64_t off) {
  for (int i = 0; i < p->n; ++i) off += st[i] * b->start[i];
  return off;
}

/* 1 when every element offset of the box for this access lies in [0, extent) (strides >= 0). */
static inline int kgen_box_inside(const kgen_plan* p, const kgen_box* b, const int64_t* st,
                                  int64_t off, int64_t extent) {
  const int64_t lo = kgen_offset(p, b, st, off);
  int64_t hi = lo;
  for (int i = 0; i < p->n; ++i) hi += st[i] * (int64_t)(b->ext[i] - 1);
  return lo >= 0 && hi < extent;
}

/* Device -> tile: the box dimensions from k on (dims [k, upto)), contiguous in the tile. */
KWRAPPER mtia_tag_t kgen_load(const kgen_plan* p, const kgen_box* b, void* tile, uint64_t base,
                              const int64_t* st, int64_t off, unsigned es, int upto) {
  const int64_t o = kgen_offset(p, b, st, off);
  const int k = p->k < upto ? p->k : upto - 1;
  if (upto <= 0 || k < 0) return mtia_dma_in(tile, base + (uint64_t)(o * (int64_t)es), es);
  return kdma_in(tile, base + (uint64_t)(o * (int64_t)es), st + k, b->ext + k, upto - k, es);
}

/* The box of an access (dims [k, upto)) with every dimension along which its stride is 0 cut to
 * one element, in csize; 1 when that is fewer elements than the box. */
static inline int kgen_compact_box(const kgen_plan* p, const kgen_box* b, const int64_t* st,
                                   int upto, uint64_t* csize) {
  const int k = p->k < upto ? p->k : upto - 1;
  if (upto <= 0 || k < 0) return 0;
  int smaller = 0;
  for (int i = k; i < upto; ++i) {
    const int bcast = st[i] == 0 && b->ext[i] > 1;
    csize[i - k] = bcast ? 1 : b->ext[i];
    smaller |= bcast;
  }
  return smaller;
}

/* kgen_load of an access broadcast (stride 0) along some dimension: when it is broadcast inside
 * the box, only its distinct elements are read, into `compact`, and kgen_spread then fills the
 * tile from them (from device memory, each element of a zero-stride run would cost a whole
 * burst). */
KWRAPPER mtia_tag_t kgen_load_bcast(const kgen_plan* p, const kgen_box* b, void* tile,
                                    void* compact, uint64_t base, const int64_t* st, int64_t off,
                                    unsigned es, int upto) {
  uint64_t cs[KGEN_DMA_DIMS];
  if (!kgen_compact_box(p, b, st, upto, cs)) return kgen_load(p, b, tile, base, st, off, es, upto);
  const int k = p->k < upto ? p->k : upto - 1;
  const int64_t o = kgen_offset(p, b, st, off);
  return kdma_in(compact, base + (uint64_t)(o * (int64_t)es), st + k, cs, upto - k, es);
}

/* After kgen_load_bcast's DMA completed: the tile from the compact elements, by a local DMA with
 * zero source strides along the broadcast dimensions. Nothing to do when the load was whole. */
KWRAPPER void kgen_spread(const kgen_plan* p, const kgen_box* b, void* tile, const void* compact,
                          const int64_t* st, unsigned es, int upto) {
  uint64_t cs[KGEN_DMA_DIMS];
  if (!kgen_compact_box(p, b, st, upto, cs)) return;
  const int k = p->k < upto ? p->k : upto - 1;
  const int nd = upto - k;
  int64_t ts[KGEN_DMA_DIMS], ss[KGEN_DMA_DIMS];
  kcontig(ts, b->ext + k, nd, es);
  kcontig(ss, cs, nd, es);
  for (int i = 0; i < nd; ++i) {
    if (cs[i] != b->ext[k + i]) ss[i] = 0;
  }
  mtia_wait(kdma(kaddr(tile), MTIA_PE_SPACE_LOCAL, ts, kaddr(compact), MTIA_PE_SPACE_LOCAL, ss,
                 b->ext + k, nd, es));
}

/* Tile -> device, the same box. */
KWRAPPER mtia_tag_t kgen_store(const kgen_plan* p, const kgen_box* b, uint64_t base,
                               const int64_t* st, int64_t off, const void* tile, unsigned es,
                               int upto) {
  const int64_t o = kgen_offset(p, b, st, off);
  const int k = p->k < upto ? p->k : upto - 1;
  if (upto <= 0 || k < 0) return mtia_dma_out(base + (uint64_t)(o * (int64_t)es), tile, es);
  return kdma_out(base + (uint64_t)(o * (int64_t)es), st + k, tile, b->ext + k, upto - k, es);
}

/* An SE operation with each operand a vector (mode 0), a broadcast element (1) or an immediate
 * bit pattern (2). */
KWRAPPER void kgen_se(uint8_t op, uint8_t in_dt, uint8_t out_dt, void* out, uint32_t n, int m0,
                      uint64_t a, int m1, uint64_t b, int m2, uint64_t c) {
  mtia_pe_se_desc d;
  MTIA_ZERO_(d);
  d.hdr = mtia_desc_header(MTIA_PE_DESC_SE, 0);
  d.op = op;
  d.in_dtype = in_dt;
  d.out_dtype = out_dt;
  d.count = n;
  const int modes[3] = {m0, m1, m2};
  const uint64_t vals[3] = {a, b, c};
  for (int j = 0; j < 3; ++j) {
    if (modes[j] == 2) {
      d.mode[j] = MTIA_PE_OPND_IMMEDIATE;
      d.imm[j] = vals[j];
    } else if (modes[j] == 1) {
      d.mode[j] = MTIA_PE_OPND_BROADCAST;
      d.src[j] = vals[j];
    } else if (vals[j] != 0) {
      d.src[j] = vals[j];
    }
  }
  d.dst = kaddr(out);
  mtia_wait(mtia_se_op(&d));
}

/* iota[e] = e for e < n (int64), on the SE: log2(n) doubling steps. */
static inline void kgen_iota(int64_t* iota, uint64_t n) {
  if (n == 0) return;
  iota[0] = 0;
  for (uint64_t len = 1; len < n; len *= 2) {
    const uint64_t m = len < n - len ? len : n - len;
    kgen_se(MTIA_PE_SE_ADD, MTIA_PE_DT_INT64, MTIA_PE_DT_INT64, iota + len, (uint32_t)m, 0,
            kaddr(iota), 2, len, 0, 0);
  }
}

/* out[e] = the access's element offset (strides st, any sign; offset off) of box element e,
 * on the SE from an iota tile: the index values of an affine index expression. */
static inline void kgen_affine_index(const kgen_plan* p, const kgen_box* b, int64_t* out,
                                     const int64_t* iota, int64_t* tmp, const int64_t* st,
                                     int64_t off) {
  const uint32_t n = (uint32_t)b->count;
  kse_fill(MTIA_PE_DT_INT64, out, (uint64_t)kgen_offset(p, b, st, off), n);
  uint64_t inner = 1;
  for (int i = p->n - 1; i >= 0; --i) {
    const uint64_t ext = b->ext[i];
    if (ext > 1 && st[i] != 0) {
      kgen_se(MTIA_PE_SE_FLOOR_DIV, MTIA_PE_DT_INT64, MTIA_PE_DT_INT64, tmp, n, 0, kaddr(iota), 2,
              inner, 0, 0);
      kgen_se(MTIA_PE_SE_REMAINDER, MTIA_PE_DT_INT64, MTIA_PE_DT_INT64, tmp, n, 0, kaddr(tmp), 2,
              ext, 0, 0);
      kgen_se(MTIA_PE_SE_MUL, MTIA_PE_DT_INT64, MTIA_PE_DT_INT64, tmp, n, 0, kaddr(tmp), 2,
              (uint64_t)st[i], 0, 0);
      kgen_se(MTIA_PE_SE_ADD, MTIA_PE_DT_INT64, MTIA_PE_DT_INT64, out, n, 0, kaddr(out), 0,
              kaddr(tmp), 0, 0);
    }
    inner *= ext;
  }
}

/* Floor division and modulo of integers as Python (and sympy's FloorDiv, ModularIndexing)
 * define them. */
static inline int64_t kgen_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
static inline int64_t kgen_mod(int64_t a, int64_t b) {
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

#endif /* MTIA_KERNELS_KGEN_H_ */
