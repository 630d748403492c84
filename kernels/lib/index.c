/* Indexing kernels: index_gather, index_put, embedding_bag, gather_lines, scatter_lines,
 * cumsum, tri, compact.
 *
 * Index values are data: each kernel DMAs them into the local store chunk by chunk, checks
 * every one against its dimension before any DMA uses it, and fails the launch with
 * KIDX_STATUS_BAD_INDEX when one is out of range, so no kernel reads or writes outside its
 * tensors (outputs of positions already handled may have been written). Accumulating kernels
 * partition the DESTINATION among the PEs (each PE scans every index and keeps those that
 * land in rows it owns), so no two PEs write the same bytes and the order of the sums is
 * fixed: results are deterministic. Floating sums accumulate in fp32 and round once. */
#include "klib.h"
#include "ksig.h"

/* The library ABI's statuses end at 6; these are the index kernels' own. */
#define KIDX_STATUS_BAD_INDEX 16 /* an index (or a bag offset) outside its range */

/* Positions whose indices one chunk holds. */
#define KIDX_CHUNK 512u

static inline int kidx_dtype_ok(uint64_t dt) {
  return dt == MTIA_PE_DT_INT32 || dt == MTIA_PE_DT_INT64;
}
static inline int64_t kidx_at(const void* buf, uint64_t i, unsigned ies) {
  return ies == 8 ? ((const int64_t*)buf)[i] : (int64_t)((const int32_t*)buf)[i];
}
static inline void kset_idx(void* buf, int64_t v, unsigned ies) {
  if (ies == 8) {
    *(int64_t*)buf = v;
  } else {
    *(int32_t*)buf = (int32_t)v;
  }
}
/* Wraps a negative index when allowed; 0 when it is outside [0, size). */
static inline int kidx_fix(int64_t* v, int64_t size, int wrap) {
  int64_t x = *v;
  if (x < 0 && wrap) x += size;
  if (x < 0 || x >= size) return 0;
  *v = x;
  return 1;
}
/* The core copies single elements inside the local store (no unit gathers by index). */
static inline void kcopy_elem(void* dst, const void* src, unsigned es) {
  switch (es) {
    case 1:
      *(uint8_t*)dst = *(const uint8_t*)src;
      break;
    case 2:
      *(uint16_t*)dst = *(const uint16_t*)src;
      break;
    case 4:
      *(uint32_t*)dst = *(const uint32_t*)src;
      break;
    default:
      *(uint64_t*)dst = *(const uint64_t*)src;
      break;
  }
}
/* A contiguous run of n elements device -> local (stride in elements). */
static inline mtia_tag_t krun_in(void* local, uint64_t dev, int64_t st, uint64_t n, unsigned es) {
  const uint64_t sz[1] = {n};
  const int64_t s[1] = {st};
  return kdma_in(local, dev, s, sz, 1, es);
}
static inline mtia_tag_t krun_out(uint64_t dev, int64_t st, const void* local, uint64_t n,
                                  unsigned es) {
  const uint64_t sz[1] = {n};
  const int64_t s[1] = {st};
  return kdma_out(dev, s, local, sz, 1, es);
}
/* Device -> device box (strides in elements). */
static inline mtia_tag_t kbox_d2d(uint64_t dst, const int64_t* dst_st, uint64_t src,
                                  const int64_t* src_st, const uint64_t* box, int nd, unsigned es) {
  int64_t ds[4], ss[4];
  for (int i = 0; i < nd; ++i) {
    ds[i] = dst_st[i] * (int64_t)es;
    ss[i] = src_st[i] * (int64_t)es;
  }
  return kdma(dst, MTIA_PE_SPACE_DEVICE, ds, src, MTIA_PE_SPACE_DEVICE, ss, box, nd, es);
}
static int knonneg(const int64_t* v, int n) {
  return kcheck_shape(v, n) == MTIA_KSTATUS_OK;
}
/* The accumulator dtype of a value dtype: fp32 for floating, itself for integers. */
static inline uint8_t kacc_dt(uint64_t dt) {
  return kdt_is_float(dt) ? (uint8_t)MTIA_PE_DT_FP32 : (uint8_t)dt;
}

/* ---- Box chunks ------------------------------------------------------------------------------
 * A 3-D box cut into chunks of at most `cap` elements: dims after q whole, dim q in runs. */
typedef struct kboxplan {
  int q; /* -1: the whole box is one chunk */
  uint64_t run, nparts, n;
} kboxplan;

static void kbox_plan(kboxplan* c, const uint64_t* box, uint64_t cap) {
  uint64_t inner = 1;
  int k = 3;
  while (k > 0 && box[k - 1] <= cap / inner) {
    inner *= box[k - 1];
    --k;
  }
  if (k == 0) {
    c->q = -1;
    c->run = 0;
    c->nparts = 1;
    c->n = 1;
    return;
  }
  c->q = k - 1;
  c->run = KMAX(cap / inner, 1u);
  c->nparts = kceil_div(box[c->q], c->run);
  c->n = c->nparts;
  for (int i = 0; i < c->q; ++i) c->n *= box[i];
}
/* Chunk idx: its box (cb) and element offsets in two operands' strides. */
static void kbox_at(const kboxplan* c, const uint64_t* box, const int64_t* sa, const int64_t* sb,
                    uint64_t idx, uint64_t* cb, int64_t* oa, int64_t* ob) {
  *oa = 0;
  *ob = 0;
  if (c->q < 0) {
    for (int i = 0; i < 3; ++i) cb[i] = box[i];
    return;
  }
  const int q = c->q;
  const uint64_t part = idx % c->nparts;
  uint64_t outer = idx / c->nparts;
  for (int i = q - 1; i >= 0; --i) {
    const uint64_t oi = outer % box[i];
    outer /= box[i];
    *oa += (int64_t)oi * sa[i];
    *ob += (int64_t)oi * sb[i];
    cb[i] = 1;
  }
  const uint64_t r0 = part * c->run;
  cb[q] = KMIN(c->run, box[q] - r0);
  *oa += (int64_t)r0 * sa[q];
  *ob += (int64_t)r0 * sb[q];
  for (int i = q + 1; i < 3; ++i) cb[i] = box[i];
}

/* ---- index_gather ----------------------------------------------------------------------------
 * out[p, box] = src[sum_k idx_k[p] * st_k + box] for positions p < n: up to four contiguous
 * index vectors (int32 or int64, one dtype) select a slice of src, a box of up to 3 dims that
 * one device-to-device DMA copies. embedding, index_select and advanced indexing are this.
 * flags: 1 negative indices count from the end. Positions are split in ranges over the PEs. */
typedef struct {
  uint64_t out, src, idx[4], dtype, idx_dtype;
  int64_t nidx, n, flags, size[4], st[4], out_st, box[3], src_box_st[3], out_box_st[3];
} gather_args;

#define KSIG_4(p) p "0:i64 " p "1:i64 " p "2:i64 " p "3:i64"
#define KSIG_3(p) p "0:i64 " p "1:i64 " p "2:i64"

MTIA_KERNEL(index_gather,
            "out:ptr src:ptr idx0:ptr idx1:ptr idx2:ptr idx3:ptr dtype:dtype idx_dtype:dtype "
            "nidx:i64 n:i64 flags:i64 " KSIG_4("size") " " KSIG_4("st") " out_st:i64 " KSIG_3(
                "box") " " KSIG_3("src_box_st") " " KSIG_3("out_box_st"));
int index_gather(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(gather_args, A);
  const unsigned es = kdt_size(A->dtype);
  if (es == 0 || !kidx_dtype_ok(A->idx_dtype)) return MTIA_KSTATUS_BAD_DTYPE;
  if (A->flags & ~1ll) return MTIA_KSTATUS_BAD_OP;
  if (A->nidx < 1 || A->nidx > 4 || A->n < 0 || !knonneg(A->size, 4) || !knonneg(A->st, 4) ||
      A->out_st < 0 || !knonneg(A->box, 3) || !knonneg(A->src_box_st, 3) ||
      !knonneg(A->out_box_st, 3)) {
    return MTIA_KSTATUS_BAD_SHAPE;
  }
  const int nidx = (int)A->nidx, wrap = (int)(A->flags & 1);
  const unsigned ies = kdt_size(A->idx_dtype);
  const uint64_t box[3] = {(uint64_t)A->box[0], (uint64_t)A->box[1], (uint64_t)A->box[2]};
  if (A->n == 0 || box[0] * box[1] * box[2] == 0) return MTIA_KSTATUS_OK;
  karena a;
  karena_init(&a);
  void* ib[4];
  for (int k = 0; k < nidx; ++k) {
    ib[k] = kalloc(&a, KIDX_CHUNK * 8u);
    if (ib[k] == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;
  }
  const uint64_t pe = mtia_pe_id(), pes = mtia_num_pes(), n = (uint64_t)A->n;
  const uint64_t per = kceil_div(n, pes), p0 = KMIN(n, pe * per), p1 = KMIN(n, p0 + per);
  for (uint64_t c0 = p0; c0 < p1; c0 += KIDX_CHUNK) {
    const uint64_t cn = KMIN(KIDX_CHUNK, p1 - c0);
    for (int k = 0; k < nidx; ++k) mtia_wait(mtia_dma_in(ib[k], A->idx[k] + c0 * ies, cn * ies));
    for (uint64_t i = 0; i < cn; ++i) {
      int64_t off = 0;
      for (int k = 0; k < nidx; ++k) {
        int64_t v = kidx_at(ib[k], i, ies);
        if (!kidx_fix(&v, A->size[k], wrap)) {
          mtia_wait_all();
          return KIDX_STATUS_BAD_INDEX;
        }
        off += v * A->st[k];
      }
      kbox_d2d(A->out + (c0 + i) * (uint64_t)A->out_st * es, A->out_box_st,
               A->src + (uint64_t)off * es, A->src_box_st, box, 3, es);
    }
    mtia_wait_all(); /* bounds the DMAs in flight */
  }
  return MTIA_KSTATUS_OK;
}

/* ---- index_put -------------------------------------------------------------------------------
 * dst[sum_k idx_k[p] * st_k + box] = (or +=) scale[p] * src[p * src_st + box], the scatter
 * counterpart of index_gather (index_put_, index_add, embedding backward). The destination
 * rows (the row-major linear index over the indexed dims) are dealt to the PEs in blocks; each
 * PE scans every position and handles those that land in its rows, in position order.
 * Assigning, a duplicate's last value wins, as in a sequential loop. Accumulating, each touched
 * row of a block (a box chunk of it) is loaded once into an accumulator (fp32 for floating
 * dtypes), every contribution is added in position order and the row is rounded and stored
 * once. flags: 1 negative indices wrap, 2 accumulate, 4 scale (contiguous fp32 per position;
 * floating dtypes), 8 skip positions whose first index equals `skip` (padding_idx). */
typedef struct {
  uint64_t dst, src, idx[4], scale, dtype, idx_dtype;
  int64_t nidx, n, flags, skip, size[4], st[4], src_st, box[3], dst_box_st[3], src_box_st[3];
} put_args;

MTIA_KERNEL(
    index_put,
    "dst:ptr src:ptr idx0:ptr idx1:ptr idx2:ptr idx3:ptr scale:ptr dtype:dtype "
    "idx_dtype:dtype nidx:i64 n:i64 flags:i64 skip:i64 " KSIG_4("size") " " KSIG_4(
        "st") " src_st:i64 " KSIG_3("box") " " KSIG_3("dst_box_st") " " KSIG_3("src_box_st"));
int index_put(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(put_args, A);
  const unsigned es = kdt_size(A->dtype);
  if (es == 0 || !kidx_dtype_ok(A->idx_dtype)) return MTIA_KSTATUS_BAD_DTYPE;
  if (A->flags & ~15ll) return MTIA_KSTATUS_BAD_OP;
  const int wrap = (int)(A->flags & 1), accumulate = (A->flags & 2) != 0,
            has_scale = (A->flags & 4) != 0, has_skip = (A->flags & 8) != 0;
  if ((accumulate && A->dtype == MTIA_PE_DT_BOOL) || (has_scale && !kdt_is_float(A->dtype))) {
    return MTIA_KSTATUS_BAD_DTYPE;
  }
  if (has_scale && !accumulate) return MTIA_KSTATUS_BAD_OP;
  if (A->nidx < 1 || A->nidx > 4 || A->n < 0 || !knonneg(A->size, 4) || !knonneg(A->st, 4) ||
      A->src_st < 0 || !knonneg(A->box, 3) || !knonneg(A->dst_box_st, 3) ||
      !knonneg(A->src_box_st, 3)) {
    return MTIA_KSTATUS_BAD_SHAPE;
  }
  const int nidx = (int)A->nidx;
  const unsigned ies = kdt_size(A->idx_dtype);
  const uint64_t box[3] = {(uint64_t)A->box[0], (uint64_t)A->box[1], (uint64_t)A->box[2]};
  if (A->n == 0 || box[0] * box[1] * box[2] == 0) return MTIA_KSTATUS_OK;
  uint64_t rows = 1;
  for (int k = 0; k < nidx; ++k) rows *= (uint64_t)A->size[k];
  const uint64_t pe = mtia_pe_id(), pes = mtia_num_pes(), n = (uint64_t)A->n;

  karena a;
  karena_init(&a);
  void* ib[4];
  for (int k = 0; k < nidx; ++k) {
    ib[k] = kalloc(&a, KIDX_CHUNK * 8u);
    if (ib[k] == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;
  }
  uint32_t* sc = has_scale ? (uint32_t*)kalloc(&a, KIDX_CHUNK * 4u) : 0;
  if (has_scale && sc == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;

  /* Geometry: row blocks of R rows times box chunks of at most cap elements. */
  const uint8_t adt = kacc_dt(A->dtype);
  const unsigned aes = kdt_size(adt);
  kboxplan bp;
  uint64_t R;
  uint8_t* touched = 0;
  int64_t* rowoff = 0;
  uint8_t* acc = 0;
  uint8_t* stage = 0;
  uint8_t* tmp = 0;
  uint64_t cap = 0;
  if (!accumulate) {
    bp.q = -1;
    bp.n = 1;
    bp.nparts = 1;
    bp.run = 0;
    R = kceil_div(rows, pes);
  } else {
    const uint64_t total = box[0] * box[1] * box[2];
    uint64_t left = karena_left(&a);
    if (left < 4096) return MTIA_KSTATUS_NO_LOCAL_STORE;
    left -= 512; /* alignment of the buffers below */
    cap = KMIN(total, KMIN(1u << 14, left / (2u * (es + 4u) + aes + 9u)));
    if (cap == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;
    kbox_plan(&bp, box, cap);
    const uint64_t fixed = cap * (es + 4u);
    const uint64_t rmax = (left - fixed) / (cap * aes + 9u);
    if (rmax == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;
    R = KMAX(1u, KMIN(rmax, kceil_div(rows * bp.n, pes)));
    stage = (uint8_t*)kalloc(&a, cap * es);
    tmp = (uint8_t*)kalloc(&a, cap * 4u);
    touched = (uint8_t*)kalloc(&a, R);
    rowoff = (int64_t*)kalloc(&a, R * 8u);
    acc = (uint8_t*)kalloc(&a, R * cap * aes);
    if (stage == 0 || tmp == 0 || touched == 0 || rowoff == 0 || acc == 0) {
      return MTIA_KSTATUS_NO_LOCAL_STORE;
    }
  }
  const uint64_t nblocks = kceil_div(rows, R), items = nblocks * bp.n;
  for (uint64_t it = pe; it < items; it += pes) {
    const uint64_t r0 = (it / bp.n) * R, rn = KMIN(R, rows - r0);
    uint64_t cb[3];
    int64_t doff_box = 0, soff_box = 0;
    kbox_at(&bp, box, A->dst_box_st, A->src_box_st, it % bp.n, cb, &doff_box, &soff_box);
    const uint64_t m = cb[0] * cb[1] * cb[2];
    if (accumulate) {
      for (uint64_t j = 0; j < rn; ++j) touched[j] = 0;
    }
    for (uint64_t c0 = 0; c0 < n; c0 += KIDX_CHUNK) {
      const uint64_t cn = KMIN(KIDX_CHUNK, n - c0);
      for (int k = 0; k < nidx; ++k) {
        mtia_wait(mtia_dma_in(ib[k], A->idx[k] + c0 * ies, cn * ies));
      }
      if (has_scale) mtia_wait(mtia_dma_in(sc, A->scale + c0 * 4u, cn * 4u));
      for (uint64_t i = 0; i < cn; ++i) {
        if (has_skip && kidx_at(ib[0], i, ies) == A->skip) continue;
        int64_t off = 0;
        uint64_t L = 0;
        for (int k = 0; k < nidx; ++k) {
          int64_t v = kidx_at(ib[k], i, ies);
          if (!kidx_fix(&v, A->size[k], wrap)) {
            mtia_wait_all();
            return KIDX_STATUS_BAD_INDEX;
          }
          off += v * A->st[k];
          L = L * (uint64_t)A->size[k] + (uint64_t)v;
        }
        if (L < r0 || L >= r0 + rn) continue;
        const uint64_t p = c0 + i;
        const uint64_t src = A->src + ((uint64_t)A->src_st * p + (uint64_t)soff_box) * es;
        if (!accumulate) { /* in position order: a duplicate's last value wins */
          mtia_wait(
              kbox_d2d(A->dst + (uint64_t)off * es, A->dst_box_st, src, A->src_box_st, box, 3, es));
          continue;
        }
        const uint64_t j = L - r0;
        uint8_t* accj = acc + j * cap * aes;
        if (!touched[j]) { /* first contribution: the row's current values */
          touched[j] = 1;
          rowoff[j] = off + doff_box;
          mtia_wait(kdma_in(stage, A->dst + (uint64_t)rowoff[j] * es, A->dst_box_st, cb, 3, es));
          kcast((uint8_t)A->dtype, adt, accj, stage, (uint32_t)m);
        }
        mtia_wait(kdma_in(stage, src, A->src_box_st, cb, 3, es));
        const void* add = stage;
        if (adt != A->dtype) {
          kcast((uint8_t)A->dtype, adt, tmp, stage, (uint32_t)m);
          add = tmp;
        }
        if (has_scale) {
          kse_imm(MTIA_PE_SE_MUL, MTIA_PE_DT_FP32, tmp, add, sc[i], (uint32_t)m);
          add = tmp;
        }
        kse(MTIA_PE_SE_ADD, adt, adt, accj, accj, add, 0, (uint32_t)m);
      }
    }
    if (!accumulate) continue;
    for (uint64_t j = 0; j < rn; ++j) {
      if (!touched[j]) continue;
      const uint8_t* accj = acc + j * cap * aes;
      const void* out = accj;
      if (adt != A->dtype) {
        kcast(adt, (uint8_t)A->dtype, stage, accj, (uint32_t)m);
        out = stage;
      }
      mtia_wait(kdma_out(A->dst + (uint64_t)rowoff[j] * es, A->dst_box_st, out, cb, 3, es));
    }
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}

/* ---- embedding_bag ---------------------------------------------------------------------------
 * out[b, :] = sum / mean / max over the indices i of bag b (offsets[b] <= i < the next offset,
 * or nidx) of psw[i] * weight[idx[i], :]; indices equal to padding_idx (>= 0) take no part
 * and do not count. Also writes offset2bag[i] = b, bag_size[b] = the count, and in max mode
 * max_idx[b, :] = the index of the first maximum (0 for an empty bag, whose output is 0, as
 * on the CPU). offset2bag, bag_size and max_idx are contiguous, of the indices' dtype. mode 0 sum,
 * 1 mean, 2 max; flags 1 per-sample weights (contiguous, weight's dtype; sum only), 2
 * include_last_offset (nbags = noffsets - 1). Bags are dealt round-robin to the PEs; rows are
 * gathered by the DMA into the local store and reduced by the SE in fp32. */
typedef struct {
  uint64_t out, weight, idx, offsets, psw, offset2bag, bag_size, max_idx, dtype, idx_dtype;
  int64_t mode, flags, noffsets, nidx, num_weights, dim, w_row_st, w_col_st, out_row_st,
      padding_idx;
} bag_args;

MTIA_KERNEL(embedding_bag,
            "out:ptr weight:ptr idx:ptr offsets:ptr psw:ptr offset2bag:ptr bag_size:ptr "
            "max_idx:ptr dtype:dtype idx_dtype:dtype mode:i64 flags:i64 noffsets:i64 nidx:i64 "
            "num_weights:i64 dim:i64 w_row_st:i64 w_col_st:i64 out_row_st:i64 padding_idx:i64");
int embedding_bag(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(bag_args, A);
  const unsigned es = kdt_size(A->dtype);
  if (!kdt_is_float(A->dtype) || !kidx_dtype_ok(A->idx_dtype)) return MTIA_KSTATUS_BAD_DTYPE;
  if (A->mode < 0 || A->mode > 2 || (A->flags & ~3ll) || ((A->flags & 1) && A->mode != 0)) {
    return MTIA_KSTATUS_BAD_OP;
  }
  if (A->noffsets < 0 || A->nidx < 0 || A->num_weights < 0 || A->dim < 0 || A->w_row_st < 0 ||
      A->w_col_st < 0 || A->out_row_st < 0) {
    return MTIA_KSTATUS_BAD_SHAPE;
  }
  const int has_psw = (A->flags & 1) != 0, last = (A->flags & 2) != 0;
  const int64_t nbags = last ? KMAX(A->noffsets - 1, 0) : A->noffsets;
  const unsigned ies = kdt_size(A->idx_dtype);
  const uint64_t dim = (uint64_t)A->dim, pe = mtia_pe_id(), pes = mtia_num_pes();
  karena a;
  karena_init(&a);
  void* ib = kalloc(&a, KIDX_CHUNK * 8u);
  uint8_t* pw = has_psw ? (uint8_t*)kalloc(&a, KIDX_CHUNK * es) : 0;
  uint32_t* pw32 = has_psw ? (uint32_t*)kalloc(&a, KIDX_CHUNK * 4u) : 0;
  int64_t* one = (int64_t*)kalloc(&a, 64);
  if (ib == 0 || one == 0 || (has_psw && (pw == 0 || pw32 == 0))) {
    return MTIA_KSTATUS_NO_LOCAL_STORE;
  }
  const uint64_t left = karena_left(&a);
  /* acc, tmp (fp32), row stage, and for max the indices (int64) and the comparison (bool) */
  const uint64_t per = 4u + 4u + es + (A->mode == 2 ? 9u : 0u);
  const uint8_t idt = (uint8_t)A->idx_dtype;
  const uint64_t dc = KMIN(KMAX(dim, 1u), left > 512 ? (left - 512) / per : 0);
  if (dc == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;
  uint8_t* acc = (uint8_t*)kalloc(&a, dc * 4u);
  uint8_t* tmp = (uint8_t*)kalloc(&a, dc * 4u);
  uint8_t* stage = (uint8_t*)kalloc(&a, dc * es);
  uint8_t* mi = A->mode == 2 ? (uint8_t*)kalloc(&a, dc * 8u) : 0;
  uint8_t* cmp = A->mode == 2 ? (uint8_t*)kalloc(&a, dc) : 0;
  if (acc == 0 || tmp == 0 || stage == 0 || (A->mode == 2 && (mi == 0 || cmp == 0))) {
    return MTIA_KSTATUS_NO_LOCAL_STORE;
  }
  for (int64_t b = (int64_t)pe; b < nbags; b += (int64_t)pes) {
    /* The bag's range. */
    mtia_wait(krun_in(one, A->offsets + (uint64_t)b * ies, 1, b + 1 < A->noffsets ? 2 : 1, ies));
    const int64_t start = kidx_at(one, 0, ies);
    const int64_t end = b + 1 < A->noffsets ? kidx_at(one, 1, ies) : A->nidx;
    if (start < 0 || start > end || end > A->nidx) {
      mtia_wait_all();
      return KIDX_STATUS_BAD_INDEX;
    }
    int64_t count = 0;
    for (uint64_t d0 = 0; d0 < dim || (dim == 0 && d0 == 0); d0 += dc) {
      const uint32_t dn = (uint32_t)KMIN(dc, dim - d0);
      int first = 1;
      if (dn > 0 && A->mode != 2) kse_fill(MTIA_PE_DT_FP32, acc, 0, dn);
      count = 0;
      for (int64_t c0 = start; c0 < end; c0 += KIDX_CHUNK) {
        const uint64_t cn = KMIN(KIDX_CHUNK, (uint64_t)(end - c0));
        mtia_wait(mtia_dma_in(ib, A->idx + (uint64_t)c0 * ies, cn * ies));
        if (has_psw) {
          mtia_wait(mtia_dma_in(pw, A->psw + (uint64_t)c0 * es, cn * es));
          kcast((uint8_t)A->dtype, MTIA_PE_DT_FP32, pw32, pw, (uint32_t)cn);
        }
        for (uint64_t i = 0; i < cn; ++i) {
          int64_t v = kidx_at(ib, i, ies);
          if (A->padding_idx >= 0 && v == A->padding_idx) continue;
          if (!kidx_fix(&v, A->num_weights, 0)) {
            mtia_wait_all();
            return KIDX_STATUS_BAD_INDEX;
          }
          ++count;
          if (dn == 0) continue;
          mtia_wait(krun_in(
              stage,
              A->weight + ((uint64_t)v * (uint64_t)A->w_row_st + d0 * (uint64_t)A->w_col_st) * es,
              A->w_col_st, dn, es));
          kcast((uint8_t)A->dtype, MTIA_PE_DT_FP32, tmp, stage, dn);
          if (has_psw) kse_imm(MTIA_PE_SE_MUL, MTIA_PE_DT_FP32, tmp, tmp, pw32[i], dn);
          if (A->mode != 2) {
            kse(MTIA_PE_SE_ADD, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, acc, acc, tmp, 0, dn);
          } else if (first) {
            kcast(MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, acc, tmp, dn);
            kse_fill(idt, mi, (uint64_t)v & (ies == 8 ? ~0ull : 0xffffffffull), dn);
          } else { /* strictly greater: the first maximum keeps its index */
            kse(MTIA_PE_SE_GT, MTIA_PE_DT_FP32, MTIA_PE_DT_BOOL, cmp, tmp, acc, 0, dn);
            kse(MTIA_PE_SE_SELECT, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, acc, cmp, tmp, acc, dn);
            mtia_pe_se_desc d;
            MTIA_ZERO_(d);
            d.hdr = mtia_desc_header(MTIA_PE_DESC_SE, 0);
            d.op = MTIA_PE_SE_SELECT;
            d.in_dtype = idt;
            d.out_dtype = idt;
            d.count = dn;
            d.mode[1] = MTIA_PE_OPND_IMMEDIATE;
            d.src[0] = kaddr(cmp);
            d.imm[1] = (uint64_t)v & (ies == 8 ? ~0ull : 0xffffffffull);
            d.src[2] = kaddr(mi);
            d.dst = kaddr(mi);
            mtia_wait(mtia_se_op(&d));
          }
          first = 0;
        }
      }
      if (dn == 0) break;
      if (A->mode == 2 && first) { /* an empty bag */
        kse_fill(MTIA_PE_DT_FP32, acc, 0, dn);
        kse_fill(idt, mi, 0, dn);
      }
      if (A->mode == 1 && count > 0) {
        kse_imm(MTIA_PE_SE_DIV, MTIA_PE_DT_FP32, acc, acc, ku64_to_f32_bits((uint64_t)count), dn);
      }
      kcast(MTIA_PE_DT_FP32, (uint8_t)A->dtype, stage, acc, dn);
      mtia_wait(mtia_dma_out(A->out + ((uint64_t)b * (uint64_t)A->out_row_st + d0) * es, stage,
                             (uint64_t)dn * es));
      if (A->mode == 2) {
        mtia_wait(
            mtia_dma_out(A->max_idx + ((uint64_t)b * dim + d0) * ies, mi, (uint64_t)dn * ies));
      }
    }
    kset_idx(one, count, ies);
    mtia_wait(mtia_dma_out(A->bag_size + (uint64_t)b * ies, one, ies));
    if (end > start) { /* offset2bag[start:end] = b: one local element, broadcast */
      kset_idx(one, b, ies);
      const uint64_t sz[1] = {(uint64_t)(end - start)};
      const int64_t ds[1] = {(int64_t)ies}, ss[1] = {0};
      mtia_wait(kdma(A->offset2bag + (uint64_t)start * ies, MTIA_PE_SPACE_DEVICE, ds, kaddr(one),
                     MTIA_PE_SPACE_LOCAL, ss, sz, 1, ies));
    }
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}

/* ---- gather_lines / scatter_lines ------------------------------------------------------------
 * torch.gather and torch.scatter along one dimension, moved last by the host: for every line
 * (a, b, c) of the index's sizes,
 *   gather:  out[a,b,c,j] = src[a,b,c, idx[a,b,c,j]]
 *   scatter: dst[a,b,c, idx[a,b,c,j]] = src[a,b,c,j] (mode 0, last wins) or += (mode 1)
 * for j < size3. A line of the source (gather) or of the destination (scatter) is loaded into
 * the local store whole; the core picks or places elements there (the SE adds, in fp32 for
 * float16/bfloat16) and the DMA writes whole lines. Lines go round-robin to the PEs, so a
 * destination line has one owner. A gather line longer than the local store takes one DMA per
 * element instead; a scatter line must fit (else NO_LOCAL_STORE). scatter flag 1: the source is
 * the immediate `value` (its bit pattern) instead of src. */
typedef struct {
  uint64_t out, src, idx, dtype, idx_dtype;
  int64_t size[4], src_len, out_st[4], src_st[4], idx_st[4];
} gl_args;

MTIA_KERNEL(gather_lines,
            "out:ptr src:ptr idx:ptr dtype:dtype idx_dtype:dtype " KSIG_SIZES
            " src_len:i64 " KSIG_STRIDES("out") " " KSIG_STRIDES("src") " " KSIG_STRIDES("idx"));
int gather_lines(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(gl_args, A);
  const unsigned es = kdt_size(A->dtype);
  if (es == 0 || !kidx_dtype_ok(A->idx_dtype)) return MTIA_KSTATUS_BAD_DTYPE;
  if (!knonneg(A->size, 4) || A->src_len < 0 || !knonneg(A->out_st, 4) || !knonneg(A->src_st, 4) ||
      !knonneg(A->idx_st, 4)) {
    return MTIA_KSTATUS_BAD_SHAPE;
  }
  const uint64_t lines = (uint64_t)(A->size[0] * A->size[1] * A->size[2]);
  const uint64_t len = (uint64_t)A->size[3], L = (uint64_t)A->src_len;
  if (lines == 0 || len == 0) return MTIA_KSTATUS_OK;
  const unsigned ies = kdt_size(A->idx_dtype);
  karena a;
  karena_init(&a);
  const uint64_t jc = KMIN(len, 4096u); /* positions per piece */
  void* ib = kalloc(&a, jc * 8u);
  uint8_t* ob = (uint8_t*)kalloc(&a, jc * es);
  if (ib == 0 || ob == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;
  uint8_t* line = L * es + 64 <= karena_left(&a) ? (uint8_t*)kalloc(&a, L * es) : 0;
  const uint64_t pieces = kceil_div(len, jc), items = lines * pieces;
  const uint64_t pe = mtia_pe_id(), pes = mtia_num_pes();
  for (uint64_t it = pe; it < items; it += pes) {
    const uint64_t li = it / pieces, j0 = (it % pieces) * jc, jn = KMIN(jc, len - j0);
    const uint64_t ai = li / (uint64_t)(A->size[1] * A->size[2]);
    const uint64_t bi = (li / (uint64_t)A->size[2]) % (uint64_t)A->size[1];
    const uint64_t ci = li % (uint64_t)A->size[2];
    const uint64_t ooff = ai * A->out_st[0] + bi * A->out_st[1] + ci * A->out_st[2];
    const uint64_t soff = ai * A->src_st[0] + bi * A->src_st[1] + ci * A->src_st[2];
    const uint64_t ioff = ai * A->idx_st[0] + bi * A->idx_st[1] + ci * A->idx_st[2];
    mtia_tag_t lt = 0;
    if (line != 0 && L > 0) lt = krun_in(line, A->src + soff * es, A->src_st[3], L, es);
    mtia_wait(
        krun_in(ib, A->idx + (ioff + j0 * (uint64_t)A->idx_st[3]) * ies, A->idx_st[3], jn, ies));
    for (uint64_t j = 0; j < jn; ++j) { /* every index first: nothing out of range is read */
      int64_t v = kidx_at(ib, j, ies);
      if (!kidx_fix(&v, A->src_len, 0)) {
        mtia_wait_all();
        return KIDX_STATUS_BAD_INDEX;
      }
    }
    mtia_wait(lt);
    for (uint64_t j = 0; j < jn; ++j) {
      const uint64_t v = (uint64_t)kidx_at(ib, j, ies);
      if (line != 0) {
        kcopy_elem(ob + j * es, line + v * es, es);
      } else {
        mtia_dma_in(ob + j * es, A->src + (soff + v * (uint64_t)A->src_st[3]) * es, es);
      }
    }
    mtia_wait_all();
    mtia_wait(
        krun_out(A->out + (ooff + j0 * (uint64_t)A->out_st[3]) * es, A->out_st[3], ob, jn, es));
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}

typedef struct {
  uint64_t dst, src, idx, dtype, idx_dtype;
  int64_t mode, flags, value, size[4], dst_len, dst_st[4], src_st[4], idx_st[4];
} sl_args;

MTIA_KERNEL(
    scatter_lines,
    "dst:ptr src:ptr idx:ptr dtype:dtype idx_dtype:dtype mode:i64 flags:i64 value:i64 " KSIG_SIZES
    " dst_len:i64 " KSIG_STRIDES("dst") " " KSIG_STRIDES("src") " " KSIG_STRIDES("idx"));
int scatter_lines(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(sl_args, A);
  const unsigned es = kdt_size(A->dtype);
  if (es == 0 || !kidx_dtype_ok(A->idx_dtype)) return MTIA_KSTATUS_BAD_DTYPE;
  if (A->mode < 0 || A->mode > 1 || (A->flags & ~1ll)) return MTIA_KSTATUS_BAD_OP;
  if (A->mode == 1 && A->dtype == MTIA_PE_DT_BOOL) return MTIA_KSTATUS_BAD_DTYPE;
  if (!knonneg(A->size, 4) || A->dst_len < 0 || !knonneg(A->dst_st, 4) || !knonneg(A->src_st, 4) ||
      !knonneg(A->idx_st, 4)) {
    return MTIA_KSTATUS_BAD_SHAPE;
  }
  const uint64_t lines = (uint64_t)(A->size[0] * A->size[1] * A->size[2]);
  const uint64_t len = (uint64_t)A->size[3], L = (uint64_t)A->dst_len;
  if (lines == 0 || len == 0) return MTIA_KSTATUS_OK;
  const int add = A->mode == 1, imm = (A->flags & 1) != 0;
  const uint8_t adt = add ? kacc_dt(A->dtype) : (uint8_t)A->dtype;
  const unsigned ies = kdt_size(A->idx_dtype), aes = kdt_size(adt);
  karena a;
  karena_init(&a);
  const uint64_t jc = KMIN(len, 2048u);
  void* ib = kalloc(&a, jc * 8u);
  uint8_t* sb = (uint8_t*)kalloc(&a, jc * es);
  uint8_t* sa = (uint8_t*)kalloc(&a, jc * aes);
  uint8_t* line = (uint8_t*)kalloc(&a, KMAX(L, 1u) * es);
  uint8_t* lacc = (uint8_t*)kalloc(&a, KMAX(L, 1u) * aes);
  if (ib == 0 || sb == 0 || sa == 0 || line == 0 || lacc == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;
  if (imm) { /* the value, as one source element repeated */
    uint64_t bits = (uint64_t)A->value;
    if (es < 8) bits &= (1ull << (8 * es)) - 1;
    kse_fill((uint8_t)A->dtype, sb, bits, (uint32_t)jc);
    if (adt != A->dtype) kcast((uint8_t)A->dtype, adt, sa, sb, (uint32_t)jc);
  }
  const uint64_t pe = mtia_pe_id(), pes = mtia_num_pes();
  for (uint64_t li = pe; li < lines; li += pes) {
    const uint64_t ai = li / (uint64_t)(A->size[1] * A->size[2]);
    const uint64_t bi = (li / (uint64_t)A->size[2]) % (uint64_t)A->size[1];
    const uint64_t ci = li % (uint64_t)A->size[2];
    const uint64_t doff = ai * A->dst_st[0] + bi * A->dst_st[1] + ci * A->dst_st[2];
    const uint64_t soff = ai * A->src_st[0] + bi * A->src_st[1] + ci * A->src_st[2];
    const uint64_t ioff = ai * A->idx_st[0] + bi * A->idx_st[1] + ci * A->idx_st[2];
    if (L > 0) {
      mtia_wait(krun_in(line, A->dst + doff * es, A->dst_st[3], L, es));
      if (adt != A->dtype) kcast((uint8_t)A->dtype, adt, lacc, line, (uint32_t)L);
    }
    uint8_t* work = adt != A->dtype ? lacc : line;
    for (uint64_t j0 = 0; j0 < len; j0 += jc) {
      const uint64_t jn = KMIN(jc, len - j0);
      mtia_wait(
          krun_in(ib, A->idx + (ioff + j0 * (uint64_t)A->idx_st[3]) * ies, A->idx_st[3], jn, ies));
      for (uint64_t j = 0; j < jn; ++j) {
        int64_t v = kidx_at(ib, j, ies);
        if (!kidx_fix(&v, A->dst_len, 0)) {
          mtia_wait_all();
          return KIDX_STATUS_BAD_INDEX;
        }
      }
      if (!imm) {
        mtia_wait(
            krun_in(sb, A->src + (soff + j0 * (uint64_t)A->src_st[3]) * es, A->src_st[3], jn, es));
        if (adt != A->dtype) kcast((uint8_t)A->dtype, adt, sa, sb, (uint32_t)jn);
      }
      const uint8_t* s = adt != A->dtype ? sa : sb;
      for (uint64_t j = 0; j < jn; ++j) {
        const uint64_t v = (uint64_t)kidx_at(ib, j, ies);
        if (!add) {
          kcopy_elem(work + v * aes, s + (imm ? 0 : j) * aes, aes);
        } else {
          kse(MTIA_PE_SE_ADD, adt, adt, work + v * aes, work + v * aes, s + (imm ? 0 : j) * aes, 0,
              1);
        }
      }
    }
    if (L > 0) {
      if (adt != A->dtype) kcast(adt, (uint8_t)A->dtype, line, lacc, (uint32_t)L);
      mtia_wait(krun_out(A->dst + doff * es, A->dst_st[3], line, L, es));
    }
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}

/* ---- cumsum ----------------------------------------------------------------------------------
 * out[o, t, c] = sum_{s <= t} in[o, s, c] along the middle dimension of [outer, len, inner]
 * views, accumulated in fp32 (floating out) or int64 (integer out) and cast once per element.
 * Lines (o, c) are taken W at a time (a run of c, or of o when inner is 1); the DMA gathers a
 * tile of T steps x W lines into the local store, the SE adds each step to the previous one
 * (the block's carry for the first), and the DMA scatters the tile. Blocks go round-robin to
 * the PEs; each walks its lines from t = 0 to the end. */
typedef struct {
  uint64_t out, in, in_dtype, out_dtype;
  int64_t outer, len, inner, in_st[3], out_st[3];
} cumsum_args;

MTIA_KERNEL(cumsum,
            "out:ptr in:ptr in_dtype:dtype out_dtype:dtype outer:i64 len:i64 inner:i64 " KSIG_3(
                "in_st") " " KSIG_3("out_st"));
int cumsum(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(cumsum_args, A);
  const unsigned ies = kdt_size(A->in_dtype), oes = kdt_size(A->out_dtype);
  if (ies == 0 || oes == 0 || A->out_dtype == MTIA_PE_DT_BOOL) return MTIA_KSTATUS_BAD_DTYPE;
  if (A->outer < 0 || A->len < 0 || A->inner < 0 || !knonneg(A->in_st, 3) ||
      !knonneg(A->out_st, 3)) {
    return MTIA_KSTATUS_BAD_SHAPE;
  }
  const uint64_t outer = (uint64_t)A->outer, len = (uint64_t)A->len, inner = (uint64_t)A->inner;
  if (outer * len * inner == 0) return MTIA_KSTATUS_OK;
  const uint8_t adt = kdt_is_float(A->out_dtype) ? MTIA_PE_DT_FP32 : MTIA_PE_DT_INT64;
  const unsigned aes = kdt_size(adt);
  karena a;
  karena_init(&a);
  const uint64_t left = karena_left(&a) > 1024 ? karena_left(&a) - 1024 : 0;
  const uint64_t wmax = KMIN(1024u, KMAX(1u, left / 16u / (ies + aes + oes)));
  uint64_t cw, on;
  if (inner >= wmax) {
    cw = wmax;
    on = 1;
  } else {
    cw = inner;
    on = KMIN(outer, KMAX(1u, wmax / inner));
  }
  const uint64_t W = cw * on;
  const uint64_t T = KMIN(len, (left - W * aes) / (W * (ies + aes + oes)));
  if (T == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;
  uint8_t* tin = (uint8_t*)kalloc(&a, T * W * ies);
  uint8_t* tacc = (uint8_t*)kalloc(&a, T * W * aes);
  uint8_t* tout = (uint8_t*)kalloc(&a, T * W * oes);
  uint8_t* carry = (uint8_t*)kalloc(&a, W * aes);
  if (tin == 0 || tacc == 0 || tout == 0 || carry == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;
  const uint64_t ncb = kceil_div(inner, cw), nob = kceil_div(outer, on);
  const uint64_t pe = mtia_pe_id(), pes = mtia_num_pes();
  for (uint64_t blk = pe; blk < ncb * nob; blk += pes) {
    const uint64_t o0 = (blk / ncb) * on, c0 = (blk % ncb) * cw;
    const uint64_t onn = KMIN(on, outer - o0), cn = KMIN(cw, inner - c0), w = onn * cn;
    for (uint64_t t0 = 0; t0 < len; t0 += T) {
      const uint64_t tn = KMIN(T, len - t0);
      const uint64_t box[3] = {tn, onn, cn};
      const int64_t ist[3] = {A->in_st[1], A->in_st[0], A->in_st[2]};
      const int64_t ost[3] = {A->out_st[1], A->out_st[0], A->out_st[2]};
      const uint64_t ioff = o0 * A->in_st[0] + t0 * A->in_st[1] + c0 * A->in_st[2];
      const uint64_t ooff = o0 * A->out_st[0] + t0 * A->out_st[1] + c0 * A->out_st[2];
      mtia_wait(kdma_in(tin, A->in + ioff * ies, ist, box, 3, ies));
      kcast((uint8_t)A->in_dtype, adt, tacc, tin, (uint32_t)(tn * w));
      for (uint64_t t = 0; t < tn; ++t) {
        uint8_t* row = tacc + t * w * aes;
        const uint8_t* prev = t > 0 ? row - w * aes : carry;
        if (t > 0 || t0 > 0) kse(MTIA_PE_SE_ADD, adt, adt, row, row, prev, 0, (uint32_t)w);
      }
      kcast(adt, adt, carry, tacc + (tn - 1) * w * aes, (uint32_t)w);
      kcast(adt, (uint8_t)A->out_dtype, tout, tacc, (uint32_t)(tn * w));
      mtia_wait(kdma_out(A->out + ooff * oes, ost, tout, box, 3, oes));
    }
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}

/* ---- tri -------------------------------------------------------------------------------------
 * triu / tril of [batch, rows, cols] views: row i keeps columns j <= i + k (lower) or
 * j >= i + k (upper) and zeroes the rest. Pure DMA: the kept run is copied device to device
 * (skipped when out is in, in place), the rest is written from one local zero element with a
 * zero source stride. Rows go round-robin to the PEs. */
typedef struct {
  uint64_t out, in, dtype;
  int64_t lower, k, batch, rows, cols, in_st[3], out_st[3];
} tri_args;

MTIA_KERNEL(tri, "out:ptr in:ptr dtype:dtype lower:i64 k:i64 batch:i64 rows:i64 cols:i64 " KSIG_3(
                     "in_st") " " KSIG_3("out_st"));
int tri(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(tri_args, A);
  const unsigned es = kdt_size(A->dtype);
  if (es == 0) return MTIA_KSTATUS_BAD_DTYPE;
  if (A->lower < 0 || A->lower > 1) return MTIA_KSTATUS_BAD_OP;
  if (A->batch < 0 || A->rows < 0 || A->cols < 0 || !knonneg(A->in_st, 3) ||
      !knonneg(A->out_st, 3)) {
    return MTIA_KSTATUS_BAD_SHAPE;
  }
  const int64_t nrows = A->batch * A->rows;
  if (nrows == 0 || A->cols == 0) return MTIA_KSTATUS_OK;
  const int in_place = A->out == A->in && A->out_st[0] == A->in_st[0] &&
                       A->out_st[1] == A->in_st[1] && A->out_st[2] == A->in_st[2];
  karena a;
  karena_init(&a);
  uint64_t* zero = (uint64_t*)kalloc(&a, 64);
  if (zero == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;
  zero[0] = 0;
  const int64_t pe = (int64_t)mtia_pe_id(), pes = (int64_t)mtia_num_pes();
  for (int64_t r = pe; r < nrows; r += pes) {
    const int64_t b = r / A->rows, i = r % A->rows;
    /* kept columns [k0, k1) */
    int64_t k0, k1;
    if (A->lower) {
      k0 = 0;
      k1 = KMIN(A->cols, KMAX(0, i + A->k + 1));
    } else {
      k0 = KMIN(A->cols, KMAX(0, i + A->k));
      k1 = A->cols;
    }
    const uint64_t obase = A->out + (uint64_t)(b * A->out_st[0] + i * A->out_st[1]) * es;
    const uint64_t ibase = A->in + (uint64_t)(b * A->in_st[0] + i * A->in_st[1]) * es;
    const int64_t ocs = A->out_st[2] * (int64_t)es;
    if (k1 > k0 && !in_place) {
      const uint64_t sz[1] = {(uint64_t)(k1 - k0)};
      kbox_d2d(obase + (uint64_t)(k0 * ocs), &A->out_st[2],
               ibase + (uint64_t)(k0 * A->in_st[2]) * es, &A->in_st[2], sz, 1, es);
    }
    const int64_t z0[2] = {0, k1}, z1[2] = {k0, A->cols};
    for (int z = 0; z < 2; ++z) {
      if (z1[z] <= z0[z]) continue;
      const uint64_t sz[1] = {(uint64_t)(z1[z] - z0[z])};
      const int64_t ds[1] = {ocs}, ss[1] = {0};
      kdma(obase + (uint64_t)(z0[z] * ocs), MTIA_PE_SPACE_DEVICE, ds, kaddr(zero),
           MTIA_PE_SPACE_LOCAL, ss, sz, 1, es);
    }
    if ((r / pes) % 32 == 31) mtia_wait_all(); /* bounds the DMAs in flight */
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}

/* ---- compact ---------------------------------------------------------------------------------
 * masked_select (mode 0: out[k] = src[i] for the k-th i, in row-major order, where mask[i]) and
 * nonzero (mode 1: out[k, :] = the last `ndim` coordinates of that i, int64) over 4-D views.
 * The host counted each row (a, b, c) of the mask first (a device sum) and passes every row's
 * first output position in `starts` (contiguous int64), so rows are independent: they go
 * round-robin to the PEs, the DMA brings the mask and source in pieces, the core packs the
 * selected elements (or coordinates) in the local store and the DMA writes them out. */
typedef struct {
  uint64_t out, src, mask, starts, dtype;
  int64_t mode, ndim, size[4], src_st[4], mask_st[4];
} compact_args;

MTIA_KERNEL(compact, "out:ptr src:ptr mask:ptr starts:ptr dtype:dtype mode:i64 ndim:i64 " KSIG_SIZES
                     " " KSIG_STRIDES("src") " " KSIG_STRIDES("mask"));
int compact(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(compact_args, A);
  const unsigned es = A->mode == 1 ? 8u : kdt_size(A->dtype);
  if (es == 0) return MTIA_KSTATUS_BAD_DTYPE;
  if (A->mode < 0 || A->mode > 1) return MTIA_KSTATUS_BAD_OP;
  if (!knonneg(A->size, 4) || !knonneg(A->src_st, 4) || !knonneg(A->mask_st, 4) ||
      (A->mode == 1 && (A->ndim < 0 || A->ndim > 4))) {
    return MTIA_KSTATUS_BAD_SHAPE;
  }
  const uint64_t rows = (uint64_t)(A->size[0] * A->size[1] * A->size[2]);
  const uint64_t len = (uint64_t)A->size[3];
  if (rows == 0 || len == 0) return MTIA_KSTATUS_OK;
  const int coords = A->mode == 1;
  const unsigned oes = coords ? 8u * (unsigned)A->ndim : es; /* bytes per output entry */
  karena a;
  karena_init(&a);
  const uint64_t jc = KMIN(len, 4096u);
  uint8_t* mb = (uint8_t*)kalloc(&a, jc);
  uint8_t* sb = coords ? 0 : (uint8_t*)kalloc(&a, jc * es);
  uint8_t* ob = (uint8_t*)kalloc(&a, jc * KMAX(oes, 1u));
  int64_t* st = (int64_t*)kalloc(&a, 64);
  if (mb == 0 || ob == 0 || st == 0 || (!coords && sb == 0)) return MTIA_KSTATUS_NO_LOCAL_STORE;
  const uint64_t pe = mtia_pe_id(), pes = mtia_num_pes();
  for (uint64_t r = pe; r < rows; r += pes) {
    const uint64_t ai = r / (uint64_t)(A->size[1] * A->size[2]);
    const uint64_t bi = (r / (uint64_t)A->size[2]) % (uint64_t)A->size[1];
    const uint64_t ci = r % (uint64_t)A->size[2];
    const uint64_t soff = ai * A->src_st[0] + bi * A->src_st[1] + ci * A->src_st[2];
    const uint64_t moff = ai * A->mask_st[0] + bi * A->mask_st[1] + ci * A->mask_st[2];
    mtia_wait(mtia_dma_in(st, A->starts + r * 8u, 8));
    uint64_t pos = (uint64_t)st[0];
    for (uint64_t j0 = 0; j0 < len; j0 += jc) {
      const uint64_t jn = KMIN(jc, len - j0);
      mtia_wait(krun_in(mb, A->mask + moff + j0 * (uint64_t)A->mask_st[3], A->mask_st[3], jn, 1));
      if (!coords) {
        mtia_wait(
            krun_in(sb, A->src + (soff + j0 * (uint64_t)A->src_st[3]) * es, A->src_st[3], jn, es));
      }
      uint64_t k = 0;
      for (uint64_t j = 0; j < jn; ++j) {
        if (mb[j] == 0) continue;
        if (!coords) {
          kcopy_elem(ob + k * es, sb + j * es, es);
        } else {
          const int64_t c[4] = {(int64_t)ai, (int64_t)bi, (int64_t)ci, (int64_t)(j0 + j)};
          int64_t* o = (int64_t*)(ob + k * oes);
          for (int64_t d = 0; d < A->ndim; ++d) o[d] = c[4 - A->ndim + d];
        }
        ++k;
      }
      if (k > 0 && oes > 0) mtia_wait(mtia_dma_out(A->out + pos * oes, ob, k * oes));
      pos += k;
    }
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}
