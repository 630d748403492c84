/* Sorting and selection along one dimension: `sort`, the kernel of sort, argsort, msort, topk,
 * kthvalue, median and nanmedian.
 *
 * The host moves the sorted dimension last: a line is (a, b, c) of size0..size2 and its
 * elements run along size3 (len). Each element becomes a 16-byte record whose first word orders
 * it: the value's bits mapped to an unsigned key whose integer order is the value order (the
 * core has no FPU; NaN is the largest key, -0.0 takes +0.0's key, descending inverts the key),
 * then the element's index. Keys and indices together are unique, so any sort of the records
 * is a stable sort of the values, and ties keep their input order. Records are
 *   dtypes of 1-4 bytes: hi = key << 32 | index, lo = the value's bits (kept exactly);
 *   int64:               hi = key,              lo = index (the value is the key inverted).
 * A line that fits in the local store (with its 16-byte scratch twin) is sorted there by the
 * core: insertion sort of runs of KSORT_RUN, then bottom-up merge passes between two buffers.
 * Short lines go several at a time (a block along size2, one 2-D DMA each way). A longer line
 * is sorted in chunks that fit, written as sorted runs to this PE's slot of the DRAM `scratch`
 * buffer, then merged pairwise through the local store, pass after pass, the last pass writing
 * the output; that needs 2 * len * 16 bytes of scratch per PE of the launch, or the kernel exits
 * with KSORT_STATUS_NO_SCRATCH before touching any data.
 *
 * The output holds the sorted ranks [first, first + count) of each line (sort: all of them,
 * topk: the first k, kthvalue: rank k-1): values in the input's dtype, int64 indices. flags:
 *   1 descending;
 *   2 NaN wins (median): a line holding a NaN outputs its first NaN (lowest index) instead;
 *   4 NaN skipped (nanmedian): the output is rank (n - 1) / 2 of the line's n non-NaN values
 *     (rank 0 when all are NaN); needs first = 0, count = 1;
 *   8 unstable (sort with stable=False): equal values in the order of the CPU's std::sort
 *     (see "The CPU's unstable order"); lines merged through scratch stay stable.
 * Lines (blocks) go round-robin to the PEs; each PE writes only its own lines. */
#include "klib.h"
#include "ksig.h"

/* The library ABI's statuses end at 6, index.c's is 16; this one is sort's. */
#define KSORT_STATUS_NO_SCRATCH 17 /* a line longer than the local store, too little scratch */

#define KSORT_DESCENDING 1
#define KSORT_NAN_WINS 2
#define KSORT_NAN_SKIP 4
#define KSORT_UNSTABLE 8

#define KSORT_RUN 8 /* records per insertion-sorted run before the merge passes */

typedef struct krec {
  uint64_t hi, lo;
} krec;

#define KREC_LT(a, b) ((a).hi < (b).hi || ((a).hi == (b).hi && (a).lo < (b).lo))

/* How a dtype's bit patterns become keys. */
typedef struct kkeyer {
  unsigned es;
  int is_float, is_bool;
  uint64_t sign; /* the sign bit (floats); the bit that flips signed integers to unsigned order */
  uint64_t mask; /* the key's width */
  uint64_t inf;  /* floats: the magnitude bits of infinity; anything above is a NaN */
  uint64_t desc; /* mask when descending (keys inverted), else 0 */
} kkeyer;

/* What building a line's records saw: its NaNs (the first one by index). */
typedef struct kstats {
  uint64_t nnan, nan_idx, nan_bits;
} kstats;

static int kkeyer_init(kkeyer* k, uint64_t dt, int descending) {
  k->es = kdt_size(dt);
  k->is_float = kdt_is_float(dt);
  k->is_bool = dt == MTIA_PE_DT_BOOL;
  k->inf = 0;
  switch (dt) {
    case MTIA_PE_DT_FP32:
      k->sign = 0x80000000u;
      k->mask = 0xffffffffu;
      k->inf = 0x7f800000u;
      break;
    case MTIA_PE_DT_FP16:
      k->sign = 0x8000u;
      k->mask = 0xffffu;
      k->inf = 0x7c00u;
      break;
    case MTIA_PE_DT_BF16:
      k->sign = 0x8000u;
      k->mask = 0xffffu;
      k->inf = 0x7f80u;
      break;
    case MTIA_PE_DT_INT8:
      k->sign = 0x80u;
      k->mask = 0xffu;
      break;
    case MTIA_PE_DT_INT32:
      k->sign = 0x80000000u;
      k->mask = 0xffffffffu;
      break;
    case MTIA_PE_DT_INT64:
      k->sign = 1ull << 63;
      k->mask = ~0ull;
      break;
    case MTIA_PE_DT_BOOL:
      k->sign = 0;
      k->mask = 1;
      break;
    default:
      return 0;
  }
  k->desc = descending ? k->mask : 0;
  return 1;
}

static inline uint64_t kload_bits(const uint8_t* p, uint64_t i, unsigned es) {
  switch (es) {
    case 1:
      return p[i];
    case 2:
      return ((const uint16_t*)p)[i];
    case 4:
      return ((const uint32_t*)p)[i];
    default:
      return ((const uint64_t*)p)[i];
  }
}
static inline void kstore_bits(uint8_t* p, uint64_t i, unsigned es, uint64_t v) {
  switch (es) {
    case 1:
      p[i] = (uint8_t)v;
      break;
    case 2:
      ((uint16_t*)p)[i] = (uint16_t)v;
      break;
    case 4:
      ((uint32_t*)p)[i] = (uint32_t)v;
      break;
    default:
      ((uint64_t*)p)[i] = v;
      break;
  }
}

/* Records of n raw elements whose indices start at idx0. */
static void kbuild(krec* r, const uint8_t* raw, uint64_t n, uint64_t idx0, const kkeyer* k,
                   kstats* st) {
  const unsigned es = k->es;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t b = kload_bits(raw, i, es);
    uint64_t key;
    if (k->is_float) {
      const uint64_t a = b & ~k->sign;
      if (a > k->inf) { /* NaN: above everything, NaNs tie (then index order) */
        key = k->mask;
        if (st->nnan++ == 0) {
          st->nan_idx = idx0 + i;
          st->nan_bits = b;
        }
      } else if (a == 0) {
        key = k->sign; /* -0.0 == +0.0 */
      } else {
        key = (b & k->sign) ? (~b & k->mask) : (b | k->sign);
      }
    } else if (k->is_bool) {
      key = b != 0;
    } else {
      key = b ^ k->sign;
    }
    key ^= k->desc;
    if (es == 8) {
      r[i].hi = key;
      r[i].lo = idx0 + i;
    } else {
      r[i].hi = key << 32 | (idx0 + i);
      r[i].lo = b;
    }
  }
}

/* Values (in the dtype) and int64 indices of n records. */
static void kunpack(uint8_t* vals, int64_t* idx, const krec* r, uint64_t n, const kkeyer* k) {
  const unsigned es = k->es;
  if (es == 8) {
    const uint64_t flip = k->desc ^ k->sign;
    for (uint64_t i = 0; i < n; ++i) {
      ((uint64_t*)vals)[i] = r[i].hi ^ flip;
      idx[i] = (int64_t)r[i].lo;
    }
    return;
  }
  for (uint64_t i = 0; i < n; ++i) {
    kstore_bits(vals, i, es, r[i].lo);
    idx[i] = (int64_t)(r[i].hi & 0xffffffffu);
  }
}

/* Local-store copy of n records between distinct buffers: the DMA for long runs. */
static void kcopy_recs(krec* d, const krec* s, uint64_t n) {
  if (n >= 16) {
    mtia_wait(mtia_dma_1d(kaddr(d), MTIA_PE_SPACE_LOCAL, kaddr(s), MTIA_PE_SPACE_LOCAL, n * 16u));
    return;
  }
  for (uint64_t i = 0; i < n; ++i) d[i] = s[i];
}

static void kinsertion(krec* x, uint64_t n) {
  for (uint64_t i = 1; i < n; ++i) {
    const krec v = x[i];
    uint64_t j = i;
    while (j > 0 && KREC_LT(v, x[j - 1])) {
      x[j] = x[j - 1];
      --j;
    }
    x[j] = v;
  }
}

/* Merges a[0, na) and b[0, nb) into d; takes from a on ties (keys are unique anyway). */
static void kmerge(krec* d, const krec* a, uint64_t na, const krec* b, uint64_t nb) {
  const krec* ae = a + na;
  const krec* be = b + nb;
  if (na > 0 && nb > 0) {
    for (;;) {
      if (KREC_LT(*b, *a)) {
        *d++ = *b++;
        if (b == be) break;
      } else {
        *d++ = *a++;
        if (a == ae) break;
      }
    }
  }
  if (a < ae) kcopy_recs(d, a, (uint64_t)(ae - a));
  if (b < be) kcopy_recs(d, b, (uint64_t)(be - b));
}

/* Sorts x[0, n) with y[0, n) as scratch; returns the buffer that holds the result (the same
 * one for every n of the same merge-pass count). */
static krec* ksort_recs(krec* x, krec* y, uint64_t n) {
  for (uint64_t r0 = 0; r0 < n; r0 += KSORT_RUN) kinsertion(x + r0, KMIN(KSORT_RUN, n - r0));
  for (uint64_t w = KSORT_RUN; w < n; w *= 2) {
    for (uint64_t i = 0; i < n; i += 2 * w) {
      const uint64_t na = KMIN(w, n - i);
      const uint64_t nb = i + na < n ? KMIN(w, n - i - na) : 0;
      kmerge(y + i, x + i, na, x + i + na, nb);
    }
    krec* t = x;
    x = y;
    y = t;
  }
  return x;
}

/* ---- The CPU's unstable order ----------------------------------------------------------------
 * PyTorch's CPU sort with stable=False is C++'s std::sort (an introsort) over (value, index)
 * pairs compared by value only, so equal values end in that algorithm's order, not the input
 * order. To give the same answer the core runs the same algorithm, step for step as libstdc++
 * does it (median-of-three pivot, unguarded partition, heap sort past a depth of 2 log2 n,
 * insertion sort of 16-element runs), comparing keys only (`sh` drops the index below them). */
#define KINTRO_THRESHOLD 16
#define KKEY_LT(a, b, sh) (((a).hi >> (sh)) < ((b).hi >> (sh)))

static inline void kswap(krec* a, krec* b) {
  const krec t = *a;
  *a = *b;
  *b = t;
}

static void kunguarded_linear_insert(krec* last, unsigned sh) {
  const krec v = *last;
  krec* next = last - 1;
  while (KKEY_LT(v, *next, sh)) {
    *last = *next;
    last = next;
    --next;
  }
  *last = v;
}

static void kinsertion_sort(krec* first, krec* last, unsigned sh) {
  if (first == last) return;
  for (krec* i = first + 1; i != last; ++i) {
    if (KKEY_LT(*i, *first, sh)) {
      const krec v = *i;
      for (krec* j = i; j != first; --j) *j = *(j - 1);
      *first = v;
    } else {
      kunguarded_linear_insert(i, sh);
    }
  }
}

static void kpush_heap(krec* first, int64_t hole, int64_t top, krec v, unsigned sh) {
  int64_t parent = (hole - 1) / 2;
  while (hole > top && KKEY_LT(first[parent], v, sh)) {
    first[hole] = first[parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  first[hole] = v;
}

static void kadjust_heap(krec* first, int64_t hole, int64_t len, krec v, unsigned sh) {
  const int64_t top = hole;
  int64_t child = hole;
  while (child < (len - 1) / 2) {
    child = 2 * (child + 1);
    if (KKEY_LT(first[child], first[child - 1], sh)) child--;
    first[hole] = first[child];
    hole = child;
  }
  if ((len & 1) == 0 && child == (len - 2) / 2) {
    child = 2 * (child + 1);
    first[hole] = first[child - 1];
    hole = child - 1;
  }
  kpush_heap(first, hole, top, v, sh);
}

static void kpop_heap(krec* first, krec* last, krec* result, unsigned sh) {
  const krec v = *result;
  *result = *first;
  kadjust_heap(first, 0, last - first, v, sh);
}

/* std::partial_sort(first, last, last): make_heap, then sort_heap. */
static void kheap_sort(krec* first, krec* last, unsigned sh) {
  const int64_t len = last - first;
  if (len >= 2) {
    for (int64_t parent = (len - 2) / 2;; --parent) {
      kadjust_heap(first, parent, len, first[parent], sh);
      if (parent == 0) break;
    }
  }
  while (last - first > 1) {
    --last;
    kpop_heap(first, last, last, sh);
  }
}

static void kmove_median_to_first(krec* result, krec* a, krec* b, krec* c, unsigned sh) {
  if (KKEY_LT(*a, *b, sh)) {
    if (KKEY_LT(*b, *c, sh)) {
      kswap(result, b);
    } else if (KKEY_LT(*a, *c, sh)) {
      kswap(result, c);
    } else {
      kswap(result, a);
    }
  } else if (KKEY_LT(*a, *c, sh)) {
    kswap(result, a);
  } else if (KKEY_LT(*b, *c, sh)) {
    kswap(result, c);
  } else {
    kswap(result, b);
  }
}

static krec* kpartition_pivot(krec* first, krec* last, unsigned sh) {
  krec* mid = first + (last - first) / 2;
  kmove_median_to_first(first, first + 1, mid, last - 1, sh);
  const krec* pivot = first;
  krec* lo = first + 1;
  krec* hi = last;
  for (;;) {
    while (KKEY_LT(*lo, *pivot, sh)) ++lo;
    --hi;
    while (KKEY_LT(*pivot, *hi, sh)) --hi;
    if (!(lo < hi)) return lo;
    kswap(lo, hi);
    ++lo;
  }
}

/* The recursion goes one level per partition of the right part; depth <= 2 log2 n. */
static void kintrosort_loop(krec* first, krec* last, uint64_t depth, unsigned sh) {
  while (last - first > KINTRO_THRESHOLD) {
    if (depth == 0) {
      kheap_sort(first, last, sh);
      return;
    }
    --depth;
    krec* cut = kpartition_pivot(first, last, sh);
    kintrosort_loop(cut, last, depth, sh);
    last = cut;
  }
}

static void kintrosort(krec* x, uint64_t n, unsigned sh) {
  if (n == 0) return;
  uint64_t lg = 0;
  while ((n >> (lg + 1)) != 0) ++lg;
  kintrosort_loop(x, x + n, 2 * lg, sh);
  if (n > KINTRO_THRESHOLD) {
    kinsertion_sort(x, x + KINTRO_THRESHOLD, sh);
    for (krec* i = x + KINTRO_THRESHOLD; i != x + n; ++i) kunguarded_linear_insert(i, sh);
  } else {
    kinsertion_sort(x, x + n, sh);
  }
}

/* A sorted line's ranks [first, first + count) after the NaN modes: the first NaN in every
 * place (NaN wins), or rank (n - 1) / 2 of the non-NaN values moved to `first` (NaN skipped). */
static void kapply_nan_modes(krec* r, uint64_t len, const kstats* st, int64_t flags, uint64_t first,
                             uint64_t count) {
  if ((flags & KSORT_NAN_WINS) && st->nnan > 0) {
    for (uint64_t i = first; i < first + count; ++i) {
      r[i].hi = st->nan_idx; /* unpacks to this index (floats are never int64) */
      r[i].lo = st->nan_bits;
    }
  } else if (flags & KSORT_NAN_SKIP) {
    const uint64_t valid = len - st->nnan;
    r[first] = r[valid > 0 ? (valid - 1) / 2 : 0];
  }
}

typedef struct {
  uint64_t values, indices, in, scratch, dtype;
  int64_t flags, first, count, scratch_bytes, size[4], in_st[4], values_st[4], indices_st[4];
} sort_args;

/* ---- Long lines: merging sorted runs through DRAM ------------------------------------------ */
typedef struct kstrm {
  uint64_t dev, left; /* next device address, records not yet loaded */
  krec *buf, *cur, *end;
} kstrm;

static int kstrm_fill(kstrm* s, uint64_t cap) {
  if (s->left == 0) return 0;
  const uint64_t n = KMIN(cap, s->left);
  mtia_wait(mtia_dma_in(s->buf, s->dev, n * 16u));
  s->dev += n * 16u;
  s->left -= n;
  s->cur = s->buf;
  s->end = s->buf + n;
  return 1;
}

typedef struct kmerger {
  const sort_args* A;
  const kkeyer* k;
  krec *ba, *bb, *bo; /* the two input streams' buffers and the output's, B records each */
  uint8_t* vals;      /* final pass: B values and B indices */
  int64_t* idx;
  uint64_t B;
  int final;
  uint64_t dst;        /* not final: where the merged run goes (device address of rank 0) */
  uint64_t ws;         /* final: the first rank written to the output */
  uint64_t voff, ioff; /* final: the line's element offsets in values and indices */
} kmerger;

/* The output position of ranks [ws, ws + n): n values and indices from m->vals / m->idx. */
static void kmerger_store(const kmerger* m, uint64_t at, uint64_t n) {
  const sort_args* A = m->A;
  const unsigned es = m->k->es;
  const int64_t vs = A->values_st[3], is = A->indices_st[3];
  mtia_wait(ktile_out(A->values + (m->voff + at * (uint64_t)vs) * es, 0, vs, m->vals, 1, n, es));
  mtia_wait(ktile_out(A->indices + (m->ioff + at * (uint64_t)is) * 8u, 0, is, m->idx, 1, n, 8));
}

/* Writes n merged records of ranks [pos, pos + n). Returns 0 once the output is complete. */
static int kmerger_flush(kmerger* m, const krec* o, uint64_t n, uint64_t pos) {
  if (!m->final) {
    mtia_wait(mtia_dma_out(m->dst + pos * 16u, o, n * 16u));
    return 1;
  }
  const uint64_t end = m->ws + (uint64_t)m->A->count;
  const uint64_t lo = KMAX(pos, m->ws), hi = KMIN(pos + n, end);
  if (lo < hi) {
    kunpack(m->vals, m->idx, o + (lo - pos), hi - lo, m->k);
    kmerger_store(m, lo - m->ws, hi - lo);
  }
  return pos + n < end;
}

/* Merges the sorted runs a (na records) and b (nb) in DRAM into ranks from pos. */
static void kmerge_runs(kmerger* m, uint64_t a_dev, uint64_t na, uint64_t b_dev, uint64_t nb,
                        uint64_t pos) {
  const uint64_t B = m->B;
  kstrm sa = {a_dev, na, m->ba, m->ba, m->ba};
  kstrm sb = {b_dev, nb, m->bb, m->bb, m->bb};
  krec* o = m->bo;
  krec* const oe = m->bo + B;
  for (;;) {
    if (sa.cur == sa.end && !kstrm_fill(&sa, B)) break;
    if (sb.cur == sb.end && !kstrm_fill(&sb, B)) break;
    /* This many steps cannot empty a buffer nor overfill the output. */
    uint64_t steps = KMIN((uint64_t)(sa.end - sa.cur), (uint64_t)(sb.end - sb.cur));
    steps = KMIN(steps, (uint64_t)(oe - o));
    krec* a = sa.cur;
    krec* b = sb.cur;
    for (uint64_t s = 0; s < steps; ++s) {
      if (KREC_LT(*b, *a)) {
        *o++ = *b++;
      } else {
        *o++ = *a++;
      }
    }
    sa.cur = a;
    sb.cur = b;
    if (o == oe) {
      if (!kmerger_flush(m, m->bo, B, pos)) return;
      pos += B;
      o = m->bo;
    }
  }
  kstrm* r = (sa.cur < sa.end || sa.left > 0) ? &sa : &sb;
  for (;;) {
    if (r->cur == r->end && !kstrm_fill(r, B)) break;
    const uint64_t n = KMIN((uint64_t)(r->end - r->cur), (uint64_t)(oe - o));
    kcopy_recs(o, r->cur, n);
    o += n;
    r->cur += n;
    if (o == oe) {
      if (!kmerger_flush(m, m->bo, B, pos)) return;
      pos += B;
      o = m->bo;
    }
  }
  if (o > m->bo) kmerger_flush(m, m->bo, (uint64_t)(o - m->bo), pos);
}

/* ---- The kernel ---------------------------------------------------------------------------- */
MTIA_KERNEL(sort,
            "values:ptr indices:ptr in:ptr scratch:ptr dtype:dtype flags:i64 first:i64 "
            "count:i64 scratch_bytes:i64 " KSIG_SIZES
            " " KSIG_STRIDES("in") " " KSIG_STRIDES("values") " " KSIG_STRIDES("indices"));
int sort(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(sort_args, A);
  kkeyer k;
  const int64_t flags = A->flags;
  if (!kkeyer_init(&k, A->dtype, (int)(flags & KSORT_DESCENDING))) return MTIA_KSTATUS_BAD_DTYPE;
  if ((flags & ~15ll) || (flags & 6) == 6 ||
      ((flags & 6) && (flags & (KSORT_DESCENDING | KSORT_UNSTABLE)))) {
    return MTIA_KSTATUS_BAD_OP;
  }
  if (kcheck_shape(A->size, 4) != MTIA_KSTATUS_OK || kcheck_shape(A->in_st, 4) != MTIA_KSTATUS_OK ||
      kcheck_shape(A->values_st, 4) != MTIA_KSTATUS_OK ||
      kcheck_shape(A->indices_st, 4) != MTIA_KSTATUS_OK || A->first < 0 || A->count < 0 ||
      A->scratch_bytes < 0) {
    return MTIA_KSTATUS_BAD_SHAPE;
  }
  const uint64_t len = (uint64_t)A->size[3], first = (uint64_t)A->first, count = (uint64_t)A->count;
  /* Indices live in 32 bits of a record. */
  if (first + count > len || len > 0xffffffffull) return MTIA_KSTATUS_BAD_SHAPE;
  if ((flags & KSORT_NAN_SKIP) && (first != 0 || count != 1)) return MTIA_KSTATUS_BAD_SHAPE;
  const uint64_t s0 = (uint64_t)A->size[0], s1 = (uint64_t)A->size[1], s2 = (uint64_t)A->size[2];
  const uint64_t lines = s0 * s1 * s2;
  if (lines == 0 || count == 0) return MTIA_KSTATUS_OK;

  /* One region of 2 * C records: X and Y of C each (a line or chunk and its merge twin). */
  karena a;
  karena_init(&a);
  const uint64_t left = karena_left(&a);
  const uint64_t C = left > 128 ? (left - 128) / 32u : 0;
  if (C < 4 * KSORT_RUN) return MTIA_KSTATUS_NO_LOCAL_STORE;
  uint8_t* region = (uint8_t*)kalloc(&a, 2 * C * 16u);
  if (region == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;
  krec* X = (krec*)region;
  krec* Y = X + C;
  const uint64_t pe = mtia_pe_id(), pes = mtia_num_pes();
  const int long_lines = len > C;
  if (long_lines && (A->scratch == 0 || (uint64_t)A->scratch_bytes / pes / 32u < len)) {
    return KSORT_STATUS_NO_SCRATCH;
  }
  const unsigned es = k.es;
  const int64_t* is = A->in_st;
  const int64_t* vs = A->values_st;
  const int64_t* xs = A->indices_st;

  if (!long_lines) {
    /* Blocks of nb lines along size2; narrower blocks when there are few lines. */
    const uint64_t outer = s0 * s1;
    uint64_t nb = KMIN(s2, C / KMAX(len, 1u));
    if (outer * kceil_div(s2, nb) < pes) {
      nb = KMAX(1u, KMIN(nb, kceil_div(s2, kceil_div(pes, outer))));
    }
    const uint64_t per = kceil_div(s2, nb), nblocks = outer * per;
    for (uint64_t blk = pe; blk < nblocks; blk += pes) {
      const uint64_t ab = blk / per, c0 = (blk % per) * nb, n = KMIN(nb, s2 - c0);
      const uint64_t ai = ab / s1, bi = ab % s1;
      /* The raw lines sit at the tail of Y: sorting line l (X and Y from l * len) never
       * reaches the raw bytes of a later line. */
      uint8_t* raw = (uint8_t*)Y + n * len * (16u - es);
      const uint64_t ioff = ai * is[0] + bi * is[1] + c0 * is[2];
      mtia_wait(ktile_in(raw, A->in + ioff * es, is[2], is[3], n, len, es));
      krec* res = X;
      for (uint64_t l = 0; l < n; ++l) {
        kstats st = {0, 0, 0};
        kbuild(X + l * len, raw + l * len * es, len, 0, &k, &st);
        krec* r = X + l * len;
        if (flags & KSORT_UNSTABLE) {
          kintrosort(r, len, es == 8 ? 0 : 32);
        } else {
          r = ksort_recs(r, Y + l * len, len);
        }
        kapply_nan_modes(r, len, &st, flags, first, count);
        res = r == X + l * len ? X : Y;
      }
      uint8_t* ov = (uint8_t*)(res == X ? Y : X);
      int64_t* oi = (int64_t*)(ov + ((n * count * es + 7u) & ~7ull));
      for (uint64_t l = 0; l < n; ++l) {
        kunpack(ov + l * count * es, oi + l * count, res + l * len + first, count, &k);
      }
      const uint64_t voff = ai * vs[0] + bi * vs[1] + c0 * vs[2];
      const uint64_t xoff = ai * xs[0] + bi * xs[1] + c0 * xs[2];
      const mtia_tag_t t0 = ktile_out(A->values + voff * es, vs[2], vs[3], ov, n, count, es);
      const mtia_tag_t t1 = ktile_out(A->indices + xoff * 8u, xs[2], xs[3], oi, n, count, 8);
      mtia_wait(t0);
      mtia_wait(t1);
    }
    mtia_wait_all();
    return MTIA_KSTATUS_OK;
  }

  /* Long lines, one at a time: sorted chunks of C into this PE's scratch slot (S0), then
   * merge passes S0 -> S1 -> S0 ..., the last one into the output. */
  const uint64_t S0 = A->scratch + pe * len * 32u, S1 = S0 + len * 16u;
  kmerger m;
  m.A = A;
  m.k = &k;
  m.B = C / 2;
  m.ba = X;
  m.bb = X + m.B;
  m.bo = X + 2 * m.B;
  m.vals = (uint8_t*)(X + 3 * m.B);
  m.idx = (int64_t*)(m.vals + m.B * 8u);
  for (uint64_t li = pe; li < lines; li += pes) {
    const uint64_t ai = li / (s1 * s2), bi = (li / s2) % s1, ci = li % s2;
    const uint64_t ioff = ai * is[0] + bi * is[1] + ci * is[2];
    m.voff = ai * vs[0] + bi * vs[1] + ci * vs[2];
    m.ioff = ai * xs[0] + bi * xs[1] + ci * xs[2];
    kstats st = {0, 0, 0};
    for (uint64_t c0 = 0; c0 < len; c0 += C) {
      const uint64_t n = KMIN(C, len - c0);
      uint8_t* raw = (uint8_t*)Y + n * (16u - es);
      mtia_wait(ktile_in(raw, A->in + (ioff + c0 * is[3]) * es, 0, is[3], 1, n, es));
      kbuild(X, raw, n, c0, &k, &st);
      const krec* r = ksort_recs(X, Y, n);
      mtia_wait(mtia_dma_out(S0 + c0 * 16u, r, n * 16u));
    }
    if ((flags & KSORT_NAN_WINS) && st.nnan > 0) { /* median of a line with a NaN */
      const uint64_t n = KMIN(count, m.B);
      for (uint64_t i = 0; i < n; ++i) {
        kstore_bits(m.vals, i, es, st.nan_bits);
        m.idx[i] = (int64_t)st.nan_idx;
      }
      for (uint64_t at = 0; at < count; at += n) kmerger_store(&m, at, KMIN(n, count - at));
      continue;
    }
    if (flags & KSORT_NAN_SKIP) {
      const uint64_t valid = len - st.nnan;
      m.ws = valid > 0 ? (valid - 1) / 2 : 0;
    } else {
      m.ws = first;
    }
    uint64_t src = S0, dst = S1;
    for (uint64_t w = C;; w *= 2) {
      m.final = 2 * w >= len;
      m.dst = dst;
      for (uint64_t i = 0; i < len; i += 2 * w) {
        const uint64_t na = KMIN(w, len - i);
        const uint64_t nb = i + na < len ? KMIN(w, len - i - na) : 0;
        kmerge_runs(&m, src + i * 16u, na, src + (i + na) * 16u, nb, i);
      }
      if (m.final) break;
      const uint64_t t = src;
      src = dst;
      dst = t;
    }
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}
