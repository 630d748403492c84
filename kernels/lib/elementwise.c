/* Elementwise kernels: fill, copy, cast, unary, binary, binary_scalar, where, clamp, pointwise.
 *
 * Every operand is a 4-D view (sizes shared by all operands, element strides per operand), so
 * one kernel serves contiguous, strided, transposed and broadcast (stride 0) operands alike:
 * the DMA gathers each chunk of the iteration space into a contiguous local buffer, the SE
 * works on contiguous vectors, and the DMA scatters the result. Dimensions of size 1 are
 * dropped and dimensions contiguous in every operand are merged first, so a contiguous tensor
 * moves in long 1-D bursts.
 *
 * Chunks are boxes of the iteration space (a partial range of one dimension times every
 * dimension inside it), dealt round-robin to the PEs of the launch. Each PE double-buffers:
 * the DMA brings chunk i+1 in and takes chunk i-1 out while the SE computes chunk i.
 *
 * An input broadcast inside a chunk (stride 0 along a dimension of the box, such as a per-row
 * scale [M, 1] against [M, N]) is brought in once per distinct element, into a compact buffer,
 * and spread over the chunk by a local DMA with zero source strides: read from device memory
 * element by element, each element would cost a whole DRAM or SRAM burst. */
#include "klib.h"
#include "ksig.h"

#define EW_MAX_IN 5                /* inputs: pointwise takes five, the others three at most */
#define EW_MAX_OPS (EW_MAX_IN + 1) /* and the output */

/* The iteration space after folding; operand 0 is the output. */
typedef struct ewview {
  int nd;
  int nops;
  uint64_t size[4];
  int64_t st[EW_MAX_OPS][4]; /* elements */
  uint64_t total;
} ewview;

static int ewview_make(ewview* v, const int64_t* size, int nops, const int64_t* const* st) {
  if (kcheck_shape(size, 4) != MTIA_KSTATUS_OK) return MTIA_KSTATUS_BAD_SHAPE;
  for (int o = 0; o < nops; ++o) {
    if (kcheck_shape(st[o], 4) != MTIA_KSTATUS_OK) return MTIA_KSTATUS_BAD_SHAPE;
  }
  v->nops = nops;
  v->total = 1;
  for (int i = 0; i < 4; ++i) v->total *= (uint64_t)size[i];
  int n = 0;
  for (int i = 0; i < 4; ++i) {
    if (size[i] == 1) continue;
    int merge = n > 0;
    for (int o = 0; o < nops && merge; ++o) {
      merge = v->st[o][n - 1] == st[o][i] * size[i];
    }
    if (merge) {
      v->size[n - 1] *= (uint64_t)size[i];
      for (int o = 0; o < nops; ++o) v->st[o][n - 1] = st[o][i];
    } else {
      v->size[n] = (uint64_t)size[i];
      for (int o = 0; o < nops; ++o) v->st[o][n] = st[o][i];
      ++n;
    }
  }
  if (n == 0) {
    v->size[0] = 1;
    for (int o = 0; o < nops; ++o) v->st[o][0] = 1;
    n = 1;
  }
  v->nd = n;
  return MTIA_KSTATUS_OK;
}

/* Chunks of at most `cap` elements: dims p+1.. whole, dim p in runs of `rows`. */
typedef struct ewchunks {
  int p; /* -1: the whole space is one chunk */
  uint64_t rows, nparts, n;
} ewchunks;

static void ewchunks_plan(ewchunks* c, const ewview* v, uint64_t cap) {
  uint64_t inner = 1;
  int k = v->nd;
  while (k > 0 && v->size[k - 1] <= cap / inner) {
    inner *= v->size[k - 1];
    --k;
  }
  if (k == 0) {
    c->p = -1;
    c->rows = 0;
    c->nparts = 1;
    c->n = 1;
    return;
  }
  c->p = k - 1;
  c->rows = KMAX(cap / inner, 1);
  c->nparts = kceil_div(v->size[c->p], c->rows);
  c->n = c->nparts;
  for (int i = 0; i < c->p; ++i) c->n *= v->size[i];
}

/* Chunk `idx`: each operand's element offset, the box (dims first..nd-1) and its element
 * count. */
typedef struct ewbox {
  int first, nb;
  uint64_t box[4];
  int64_t off[EW_MAX_OPS];
  uint64_t count;
} ewbox;

static void ewchunk_at(const ewview* v, const ewchunks* c, uint64_t idx, ewbox* b) {
  for (int o = 0; o < v->nops; ++o) b->off[o] = 0;
  if (c->p < 0) {
    b->first = 0;
    b->nb = v->nd;
    for (int i = 0; i < v->nd; ++i) b->box[i] = v->size[i];
    b->count = v->total;
    return;
  }
  const int p = c->p;
  const uint64_t part = idx % c->nparts;
  uint64_t outer = idx / c->nparts;
  for (int i = p - 1; i >= 0; --i) {
    const uint64_t oi = outer % v->size[i];
    outer /= v->size[i];
    for (int o = 0; o < v->nops; ++o) b->off[o] += (int64_t)oi * v->st[o][i];
  }
  const uint64_t r0 = part * c->rows;
  const uint64_t len = KMIN(c->rows, v->size[p] - r0);
  for (int o = 0; o < v->nops; ++o) b->off[o] += (int64_t)r0 * v->st[o][p];
  b->first = p;
  b->nb = v->nd - p;
  b->box[0] = len;
  b->count = len;
  for (int i = p + 1; i < v->nd; ++i) {
    b->box[i - p] = v->size[i];
    b->count *= v->size[i];
  }
}

/* ---- The double-buffered elementwise engine ------------------------------------------------ */
typedef struct ewjob ewjob;
typedef struct pwprog pwprog;
/* Computes n outputs from n-element contiguous inputs (in[0..nin)), with
 * in[EW_MAX_IN..EW_MAX_IN+ntmp) n-element scratch buffers of the output's element size; waits for
 * its own unit operations. */
typedef void (*ew_fn)(const ewjob* j, void* out, void* const* in, uint32_t n);

#define EW_MAX_TMP 3

struct ewjob {
  int nin;
  int ntmp; /* scratch buffers fn needs besides the inputs and the output */
  uint64_t in[EW_MAX_IN];
  uint8_t in_dt[EW_MAX_IN];
  uint64_t out;
  uint8_t out_dt;
  ew_fn fn;
  uint8_t op;
  uint8_t dt;
  uint64_t imm[2];
  const pwprog* pw; /* pointwise: the checked program */
};

/* The compact box of input operand o (o >= 1) in chunk b: the box with every dimension along
 * which o is broadcast (stride 0) cut to one element. Returns 1 if that leaves fewer elements
 * than the box. */
static int ew_compact_box(const ewview* v, int o, const ewbox* b, uint64_t* csize) {
  int smaller = 0;
  for (int i = 0; i < b->nb; ++i) {
    const int bcast = v->st[o][b->first + i] == 0 && b->box[i] > 1;
    csize[i] = bcast ? 1 : b->box[i];
    smaller |= bcast;
  }
  return smaller;
}

/* Issues the load of input i (operand i + 1) of chunk b into `full`, or, when the input is
 * broadcast inside the chunk, of its distinct elements into `compact`; *spread says which. */
static inline __attribute__((always_inline)) mtia_tag_t ew_load(const ewjob* j, const ewview* v,
                                                                int i, const ewbox* b, unsigned es,
                                                                void* full, void* compact,
                                                                int* spread) {
  const uint64_t dev = j->in[i] + (uint64_t)b->off[i + 1] * es;
  const int64_t* st = &v->st[i + 1][b->first];
  uint64_t csize[4];
  *spread = compact != 0 && ew_compact_box(v, i + 1, b, csize);
  return kdma_in(*spread ? compact : full, dev, st, *spread ? csize : b->box, b->nb, es);
}

/* Spreads the compact box of input i over the chunk's contiguous buffer `full`. */
static void ew_spread(const ewview* v, int i, const ewbox* b, unsigned es, void* full,
                      const void* compact) {
  uint64_t csize[4];
  ew_compact_box(v, i + 1, b, csize);
  int64_t fs[4], cs[4];
  kcontig(fs, b->box, b->nb, es);
  kcontig(cs, csize, b->nb, es);
  for (int d = 0; d < b->nb; ++d) {
    if (csize[d] != b->box[d]) cs[d] = 0;
  }
  mtia_wait(kdma(kaddr(full), MTIA_PE_SPACE_LOCAL, fs, kaddr(compact), MTIA_PE_SPACE_LOCAL, cs,
                 b->box, b->nb, es));
}

static int ew_run(const ewjob* j, const int64_t* size, const int64_t* const* st) {
  ewview v;
  int s = ewview_make(&v, size, j->nin + 1, st);
  if (s != MTIA_KSTATUS_OK) return s;
  if (v.total == 0) return MTIA_KSTATUS_OK;
  /* Inputs with a stride-0 dimension: compact buffers for their distinct elements. */
  int bcast[EW_MAX_IN], any_bcast = 0;
  for (int i = 0; i < j->nin; ++i) {
    bcast[i] = 0;
    for (int d = 0; d < v.nd; ++d) bcast[i] |= v.st[i + 1][d] == 0;
    any_bcast |= bcast[i];
  }

  const uint64_t pe = mtia_pe_id(), pes = mtia_num_pes();
  const unsigned oes = kdt_size(j->out_dt);
  unsigned ies[EW_MAX_IN] = {0, 0, 0, 0, 0};
  uint64_t bpe = oes;
  uint64_t nbuf = (uint64_t)j->nin + 1; /* buffers per set */
  for (int i = 0; i < j->nin; ++i) {
    ies[i] = kdt_size(j->in_dt[i]);
    bpe += ies[i];
  }
  if (any_bcast) {
    for (int i = 0; i < j->nin; ++i) {
      if (bcast[i]) {
        bpe += ies[i];
        ++nbuf;
      }
    }
  }
  karena a;
  karena_init(&a);
  const uint64_t slack = (2u * nbuf + (uint64_t)j->ntmp) * 64u; /* alignment */
  const uint64_t per = 2 * bpe + (uint64_t)j->ntmp * oes;       /* bytes per element of a chunk */
  uint64_t cap = karena_left(&a) > slack ? (karena_left(&a) - slack) / per : 0;
  cap = KMIN(cap, 1u << 16);
  /* Small tensors: spread them over the PEs rather than fill one PE's buffers. */
  cap = KMIN(cap, KMAX(256u, kceil_div(v.total, pes)));
  if (cap == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;
  /* Only the entries in use are set (and read): zeroing the rest would cost a small launch. */
  void* inb[2][EW_MAX_IN + EW_MAX_TMP];
  void* cmp[2][EW_MAX_IN]; /* compact buffers of broadcast inputs (0: none) */
  void* outb[2];
  for (int set = 0; set < 2; ++set) {
    for (int i = 0; i < j->nin; ++i) {
      inb[set][i] = kalloc(&a, cap * ies[i]);
      if (any_bcast) cmp[set][i] = bcast[i] ? kalloc(&a, cap * ies[i]) : 0;
    }
    outb[set] = kalloc(&a, cap * oes);
    if (outb[set] == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;
  }
  for (int t = 0; t < j->ntmp; ++t) { /* one set: a chunk's scratch is dead after its compute */
    inb[0][EW_MAX_IN + t] = inb[1][EW_MAX_IN + t] = kalloc(&a, cap * oes);
    if (inb[0][EW_MAX_IN + t] == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;
  }

  /* Every operand contiguous and none broadcast (one folded dimension of stride 1): chunk idx
   * is elements [idx * cap, ...) and its copies are 1-D, the same chunks and copies as below
   * without the n-D bookkeeping, which is most of a small launch's instructions. */
  int flat = v.nd == 1;
  for (int o = 0; o < v.nops && flat; ++o) flat = v.st[o][0] == 1;
  if (flat) {
    const uint64_t n = kceil_div(v.total, cap);
    mtia_tag_t fld[2][EW_MAX_IN];
    mtia_tag_t fst[2] = {0, 0};
    uint64_t idx = pe;
    for (int i = 0; i < j->nin && idx < n; ++i) {
      fld[0][i] = kdma_flat(kaddr(inb[0][i]), MTIA_PE_SPACE_LOCAL, j->in[i] + idx * cap * ies[i],
                            MTIA_PE_SPACE_DEVICE, KMIN(cap, v.total - idx * cap), ies[i]);
    }
    for (int k = 0; idx < n; ++k, idx += pes) {
      const int cur = k & 1, nxt = cur ^ 1;
      const uint64_t next = idx + pes;
      for (int i = 0; i < j->nin && next < n; ++i) {
        fld[nxt][i] =
            kdma_flat(kaddr(inb[nxt][i]), MTIA_PE_SPACE_LOCAL, j->in[i] + next * cap * ies[i],
                      MTIA_PE_SPACE_DEVICE, KMIN(cap, v.total - next * cap), ies[i]);
      }
      for (int i = 0; i < j->nin; ++i) mtia_wait(fld[cur][i]);
      mtia_wait(fst[cur]); /* chunk k-2's result has left this output buffer */
      const uint64_t count = KMIN(cap, v.total - idx * cap);
      j->fn(j, outb[cur], inb[cur], (uint32_t)count);
      fst[cur] = kdma_flat(j->out + idx * cap * oes, MTIA_PE_SPACE_DEVICE, kaddr(outb[cur]),
                           MTIA_PE_SPACE_LOCAL, count, oes);
    }
    mtia_wait_all();
    return MTIA_KSTATUS_OK;
  }

  ewchunks c;
  ewchunks_plan(&c, &v, cap);
  ewbox box[2];
  mtia_tag_t ld[2][EW_MAX_IN];
  int spread[2][EW_MAX_IN]; /* set by ew_load with each load (any_bcast) */
  mtia_tag_t st_tag[2] = {0, 0};

  uint64_t idx = pe;
  if (idx < c.n) {
    ewchunk_at(&v, &c, idx, &box[0]);
    for (int i = 0; i < j->nin; ++i) {
      ld[0][i] = any_bcast ? ew_load(j, &v, i, &box[0], ies[i], inb[0][i], cmp[0][i], &spread[0][i])
                           : kdma_in(inb[0][i], j->in[i] + (uint64_t)box[0].off[i + 1] * ies[i],
                                     &v.st[i + 1][box[0].first], box[0].box, box[0].nb, ies[i]);
    }
  }
  for (int k = 0; idx < c.n; ++k, idx += pes) {
    const int cur = k & 1, nxt = cur ^ 1;
    /* Prefetch the next chunk: its input buffers were last read by the compute of chunk k-1,
     * which has finished. */
    if (idx + pes < c.n) {
      ewchunk_at(&v, &c, idx + pes, &box[nxt]);
      for (int i = 0; i < j->nin; ++i) {
        ld[nxt][i] =
            any_bcast
                ? ew_load(j, &v, i, &box[nxt], ies[i], inb[nxt][i], cmp[nxt][i], &spread[nxt][i])
                : kdma_in(inb[nxt][i], j->in[i] + (uint64_t)box[nxt].off[i + 1] * ies[i],
                          &v.st[i + 1][box[nxt].first], box[nxt].box, box[nxt].nb, ies[i]);
      }
    }
    for (int i = 0; i < j->nin; ++i) {
      mtia_wait(ld[cur][i]);
      if (any_bcast && spread[cur][i])
        ew_spread(&v, i, &box[cur], ies[i], inb[cur][i], cmp[cur][i]);
    }
    mtia_wait(st_tag[cur]); /* chunk k-2's result has left this output buffer */
    j->fn(j, outb[cur], inb[cur], (uint32_t)box[cur].count);
    st_tag[cur] = kdma_out(j->out + (uint64_t)box[cur].off[0] * oes, &v.st[0][box[cur].first],
                           outb[cur], box[cur].box, box[cur].nb, oes);
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}

/* ---- Compute functions ---------------------------------------------------------------------- */
static void fn_unary(const ewjob* j, void* out, void* const* in, uint32_t n) {
  kse(j->op, j->dt, j->out_dt, out, in[0], 0, 0, n);
}
static void fn_binary(const ewjob* j, void* out, void* const* in, uint32_t n) {
  kse(j->op, j->dt, j->out_dt, out, in[0], in[1], 0, n);
}
static void fn_binary_imm(const ewjob* j, void* out, void* const* in, uint32_t n) {
  mtia_pe_se_desc d;
  MTIA_ZERO_(d);
  d.hdr = mtia_desc_header(MTIA_PE_DESC_SE, 0);
  d.op = j->op;
  d.in_dtype = j->dt;
  d.out_dtype = j->out_dt;
  d.count = n;
  d.mode[1] = MTIA_PE_OPND_IMMEDIATE;
  d.src[0] = kaddr(in[0]);
  d.imm[1] = j->imm[0];
  d.dst = kaddr(out);
  mtia_wait(mtia_se_op(&d));
}
static void fn_cast(const ewjob* j, void* out, void* const* in, uint32_t n) {
  kcast(j->in_dt[0], j->out_dt, out, in[0], n);
}
static void fn_where(const ewjob* j, void* out, void* const* in, uint32_t n) {
  kse(MTIA_PE_SE_SELECT, j->dt, j->dt, out, in[0], in[1], in[2], n);
}
static void fn_clamp(const ewjob* j, void* out, void* const* in, uint32_t n) {
  mtia_pe_se_desc d;
  MTIA_ZERO_(d);
  d.hdr = mtia_desc_header(MTIA_PE_DESC_SE, 0);
  d.op = MTIA_PE_SE_CLAMP;
  d.in_dtype = j->dt;
  d.out_dtype = j->dt;
  d.count = n;
  d.mode[1] = MTIA_PE_OPND_IMMEDIATE;
  d.mode[2] = MTIA_PE_OPND_IMMEDIATE;
  d.src[0] = kaddr(in[0]);
  d.imm[1] = j->imm[0];
  d.imm[2] = j->imm[1];
  d.dst = kaddr(out);
  mtia_wait(mtia_se_op(&d));
}

/* An immediate of dtype dt: its low kdt_size(dt) bytes (bool: any non-zero value is 1). */
static int kimm_bits(uint64_t dt, uint64_t bits, uint64_t* out) {
  const unsigned es = kdt_size(dt);
  if (es == 0) return MTIA_KSTATUS_BAD_DTYPE;
  if (es < 8) bits &= (1ull << (8 * es)) - 1;
  if (dt == MTIA_PE_DT_BOOL) bits = bits != 0;
  *out = bits;
  return MTIA_KSTATUS_OK;
}

/* ---- fill ----------------------------------------------------------------------------------
 * out[...] = value, where value is the element's bit pattern in the low bytes. No SE work:
 * the DMA broadcasts one local element (source strides 0) over each chunk of the output. */
typedef struct {
  uint64_t out, dtype, value;
  int64_t size[4], out_st[4];
} fill_args;

MTIA_KERNEL(fill, "out:ptr dtype:dtype value:i64 " KSIG_SIZES " " KSIG_STRIDES("out"));
int fill(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(fill_args, A);
  const unsigned es = kdt_size(A->dtype);
  if (es == 0) return MTIA_KSTATUS_BAD_DTYPE;
  uint64_t bits;
  if (kimm_bits(A->dtype, A->value, &bits) != MTIA_KSTATUS_OK) return MTIA_KSTATUS_BAD_SHAPE;
  const int64_t* st[1] = {A->out_st};
  ewview v;
  int s = ewview_make(&v, A->size, 1, st);
  if (s != MTIA_KSTATUS_OK) return s;
  if (v.total == 0) return MTIA_KSTATUS_OK;
  karena a;
  karena_init(&a);
  uint64_t* value = (uint64_t*)kalloc(&a, 8);
  *value = bits; /* little-endian: the element is the low es bytes */
  const uint64_t pe = mtia_pe_id(), pes = mtia_num_pes();
  ewchunks c;
  ewchunks_plan(&c, &v, KMAX(kceil_div(v.total, pes), 1024u));
  const int64_t zero[4] = {0, 0, 0, 0};
  for (uint64_t idx = pe; idx < c.n; idx += pes) {
    ewbox b;
    ewchunk_at(&v, &c, idx, &b);
    int64_t ds[4];
    for (int i = 0; i < b.nb; ++i) ds[i] = v.st[0][b.first + i] * (int64_t)es;
    kdma(A->out + (uint64_t)b.off[0] * es, MTIA_PE_SPACE_DEVICE, ds, kaddr(value),
         MTIA_PE_SPACE_LOCAL, zero, b.box, b.nb, es);
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}

/* ---- copy ----------------------------------------------------------------------------------
 * out[...] = in[...] of one dtype: device-to-device DMA per chunk, no local buffers. */
typedef struct {
  uint64_t out, in, dtype;
  int64_t size[4], out_st[4], in_st[4];
} copy_args;

MTIA_KERNEL(copy, "out:ptr in:ptr dtype:dtype " KSIG_SIZES
                  " " KSIG_STRIDES("out") " " KSIG_STRIDES("in"));
int copy(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(copy_args, A);
  const unsigned es = kdt_size(A->dtype);
  if (es == 0) return MTIA_KSTATUS_BAD_DTYPE;
  const int64_t* st[2] = {A->out_st, A->in_st};
  ewview v;
  int s = ewview_make(&v, A->size, 2, st);
  if (s != MTIA_KSTATUS_OK) return s;
  if (v.total == 0) return MTIA_KSTATUS_OK;
  const uint64_t pe = mtia_pe_id(), pes = mtia_num_pes();
  ewchunks c;
  ewchunks_plan(&c, &v, KMIN(KMAX(kceil_div(v.total, pes), 1024u), 1u << 20));
  for (uint64_t idx = pe; idx < c.n; idx += pes) {
    ewbox b;
    ewchunk_at(&v, &c, idx, &b);
    int64_t ds[4], ss[4];
    for (int i = 0; i < b.nb; ++i) {
      ds[i] = v.st[0][b.first + i] * (int64_t)es;
      ss[i] = v.st[1][b.first + i] * (int64_t)es;
    }
    kdma(A->out + (uint64_t)b.off[0] * es, MTIA_PE_SPACE_DEVICE, ds,
         A->in + (uint64_t)b.off[1] * es, MTIA_PE_SPACE_DEVICE, ss, b.box, b.nb, es);
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}

/* ---- cast ----------------------------------------------------------------------------------
 * out = (out_dtype)in with the SE's conversion rules (round to nearest even, saturating float
 * to int, wrapping int to int, non-zero to bool true). */
typedef struct {
  uint64_t out, in, out_dtype, in_dtype;
  int64_t size[4], out_st[4], in_st[4];
} cast_args;

MTIA_KERNEL(cast, "out:ptr in:ptr out_dtype:dtype in_dtype:dtype " KSIG_SIZES
                  " " KSIG_STRIDES("out") " " KSIG_STRIDES("in"));
int cast(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(cast_args, A);
  if (kdt_size(A->out_dtype) == 0 || kdt_size(A->in_dtype) == 0) return MTIA_KSTATUS_BAD_DTYPE;
  ewjob j;
  MTIA_ZERO_(j);
  j.nin = 1;
  j.in[0] = A->in;
  j.in_dt[0] = (uint8_t)A->in_dtype;
  j.out = A->out;
  j.out_dt = (uint8_t)A->out_dtype;
  j.fn = fn_cast;
  const int64_t* st[2] = {A->out_st, A->in_st};
  return ew_run(&j, A->size, st);
}

/* ---- unary ---------------------------------------------------------------------------------
 * out = op(a), op an SE op code of arity 1 (abs neg relu exp log sqrt rsqrt tanh erf sigmoid
 * silu logical_not bitwise_not). The output dtype is dtype, or bool for logical_not. */
typedef struct {
  uint64_t out, a, op, dtype;
  int64_t size[4], out_st[4], a_st[4];
} unary_args;

MTIA_KERNEL(unary, "out:ptr a:ptr op:i64 dtype:dtype " KSIG_SIZES
                   " " KSIG_STRIDES("out") " " KSIG_STRIDES("a"));
int unary(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(unary_args, A);
  int s;
  const uint8_t out_dt = kse_out_dtype(A->op, A->dtype, 1, &s);
  if (s != MTIA_KSTATUS_OK) return s;
  ewjob j;
  MTIA_ZERO_(j);
  j.nin = 1;
  j.in[0] = A->a;
  j.in_dt[0] = (uint8_t)A->dtype;
  j.out = A->out;
  j.out_dt = out_dt;
  j.op = (uint8_t)A->op;
  j.dt = (uint8_t)A->dtype;
  j.fn = fn_unary;
  const int64_t* st[2] = {A->out_st, A->a_st};
  return ew_run(&j, A->size, st);
}

/* ---- binary --------------------------------------------------------------------------------
 * out = op(a, b), op an SE op code of arity 2 (add sub mul div min max, eq ne lt le gt ge,
 * logical and/or/xor, bitwise and/or/xor). Broadcasting: give a broadcast operand stride 0. */
typedef struct {
  uint64_t out, a, b, op, dtype;
  int64_t size[4], out_st[4], a_st[4], b_st[4];
} binary_args;

MTIA_KERNEL(binary, "out:ptr a:ptr b:ptr op:i64 dtype:dtype " KSIG_SIZES
                    " " KSIG_STRIDES("out") " " KSIG_STRIDES("a") " " KSIG_STRIDES("b"));
int binary(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(binary_args, A);
  int s;
  const uint8_t out_dt = kse_out_dtype(A->op, A->dtype, 2, &s);
  if (s != MTIA_KSTATUS_OK) return s;
  ewjob j;
  MTIA_ZERO_(j);
  j.nin = 2;
  j.in[0] = A->a;
  j.in[1] = A->b;
  j.in_dt[0] = j.in_dt[1] = (uint8_t)A->dtype;
  j.out = A->out;
  j.out_dt = out_dt;
  j.op = (uint8_t)A->op;
  j.dt = (uint8_t)A->dtype;
  j.fn = fn_binary;
  const int64_t* st[3] = {A->out_st, A->a_st, A->b_st};
  return ew_run(&j, A->size, st);
}

/* ---- binary_scalar -------------------------------------------------------------------------
 * out = op(a, scalar), the scalar a bit pattern of dtype (an SE immediate). */
typedef struct {
  uint64_t out, a, op, dtype, scalar;
  int64_t size[4], out_st[4], a_st[4];
} binary_scalar_args;

MTIA_KERNEL(binary_scalar, "out:ptr a:ptr op:i64 dtype:dtype scalar:i64 " KSIG_SIZES
                           " " KSIG_STRIDES("out") " " KSIG_STRIDES("a"));
int binary_scalar(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(binary_scalar_args, A);
  int s;
  const uint8_t out_dt = kse_out_dtype(A->op, A->dtype, 2, &s);
  if (s != MTIA_KSTATUS_OK) return s;
  ewjob j;
  MTIA_ZERO_(j);
  if (kimm_bits(A->dtype, A->scalar, &j.imm[0]) != MTIA_KSTATUS_OK) return MTIA_KSTATUS_BAD_SHAPE;
  j.nin = 1;
  j.in[0] = A->a;
  j.in_dt[0] = (uint8_t)A->dtype;
  j.out = A->out;
  j.out_dt = out_dt;
  j.op = (uint8_t)A->op;
  j.dt = (uint8_t)A->dtype;
  j.fn = fn_binary_imm;
  const int64_t* st[2] = {A->out_st, A->a_st};
  return ew_run(&j, A->size, st);
}

/* ---- where ---------------------------------------------------------------------------------
 * out = cond ? a : b, cond bool; a, b and out of dtype. */
typedef struct {
  uint64_t out, cond, a, b, dtype;
  int64_t size[4], out_st[4], cond_st[4], a_st[4], b_st[4];
} where_args;

MTIA_KERNEL(where, "out:ptr cond:ptr a:ptr b:ptr dtype:dtype " KSIG_SIZES " " KSIG_STRIDES(
                       "out") " " KSIG_STRIDES("cond") " " KSIG_STRIDES("a") " " KSIG_STRIDES("b"));
int where(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(where_args, A);
  if (kdt_size(A->dtype) == 0) return MTIA_KSTATUS_BAD_DTYPE;
  ewjob j;
  MTIA_ZERO_(j);
  j.nin = 3;
  j.in[0] = A->cond;
  j.in[1] = A->a;
  j.in[2] = A->b;
  j.in_dt[0] = MTIA_PE_DT_BOOL;
  j.in_dt[1] = j.in_dt[2] = (uint8_t)A->dtype;
  j.out = A->out;
  j.out_dt = (uint8_t)A->dtype;
  j.dt = (uint8_t)A->dtype;
  j.fn = fn_where;
  const int64_t* st[4] = {A->out_st, A->cond_st, A->a_st, A->b_st};
  return ew_run(&j, A->size, st);
}

/* ---- clamp ---------------------------------------------------------------------------------
 * out = min(max(a, lo), hi), lo and hi bit patterns of dtype (numeric dtypes). For a one-sided
 * clamp pass the dtype's lowest or highest value (or -inf / +inf). */
typedef struct {
  uint64_t out, a, dtype, lo, hi;
  int64_t size[4], out_st[4], a_st[4];
} clamp_args;

MTIA_KERNEL(clamp, "out:ptr a:ptr dtype:dtype lo:i64 hi:i64 " KSIG_SIZES
                   " " KSIG_STRIDES("out") " " KSIG_STRIDES("a"));
int clamp(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(clamp_args, A);
  if (!kdt_is_float(A->dtype) && !kdt_is_int(A->dtype)) return MTIA_KSTATUS_BAD_DTYPE;
  ewjob j;
  MTIA_ZERO_(j);
  if (kimm_bits(A->dtype, A->lo, &j.imm[0]) != MTIA_KSTATUS_OK ||
      kimm_bits(A->dtype, A->hi, &j.imm[1]) != MTIA_KSTATUS_OK) {
    return MTIA_KSTATUS_BAD_SHAPE;
  }
  j.nin = 1;
  j.in[0] = A->a;
  j.in_dt[0] = (uint8_t)A->dtype;
  j.out = A->out;
  j.out_dt = (uint8_t)A->dtype;
  j.dt = (uint8_t)A->dtype;
  j.fn = fn_clamp;
  const int64_t* st[2] = {A->out_st, A->a_st};
  return ew_run(&j, A->size, st);
}

/* ---- pointwise -----------------------------------------------------------------------------
 * A short program of SE steps over up to five inputs of one dtype, in one launch, where each
 * step would otherwise be a launch and a trip through device memory (a backward formula such
 * as grad * (1 - y * y)). Step k computes
 *   dst = op(src0, src1, src2)     (as many sources as op takes)
 * over slots 0-4 (inputs a to e), 5-7 (scratch), 8 (the output) and 15 (the step's
 * immediate, a bit pattern of the step's input dtype), encoded in an i64 as
 *   op | dst << 8 | src0 << 12 | src1 << 16 | src2 << 20.
 * Inputs hold dtype. A step writes scratch or the output, in its op's result dtype: a
 * comparison or logical op gives bool, which a SELECT takes as its condition (src0, a slot);
 * every other source of a step must hold one dtype. The output must end in dtype. */
#define PW_MAX_STEPS 6
#define PW_SLOT_TMP EW_MAX_IN
#define PW_SLOT_OUT (EW_MAX_IN + EW_MAX_TMP)
#define PW_SLOT_IMM 15
#define PW_SLOTS (PW_SLOT_OUT + 1)

struct pwprog {
  int n;
  uint8_t op[PW_MAX_STEPS], dst[PW_MAX_STEPS], src[PW_MAX_STEPS][3], arity[PW_MAX_STEPS];
  uint8_t in_dt[PW_MAX_STEPS], out_dt[PW_MAX_STEPS];
  uint64_t imm[PW_MAX_STEPS];
};

/* Checks the program and fills p; *ntmp = the scratch slots it uses. */
static int pw_check(pwprog* p, const uint64_t* step, const uint64_t* imm, uint64_t nsteps,
                    uint64_t dt, uint64_t nin, int* ntmp) {
  if (nsteps == 0 || nsteps > PW_MAX_STEPS || nin > EW_MAX_IN) return MTIA_KSTATUS_BAD_OP;
  uint8_t sdt[PW_SLOTS] = {0}; /* 0: not written yet */
  for (uint64_t i = 0; i < nin; ++i) sdt[i] = (uint8_t)dt;
  *ntmp = 0;
  p->n = (int)nsteps;
  for (int k = 0; k < p->n; ++k) {
    const uint64_t w = step[k];
    const uint8_t op = (uint8_t)(w & 0xff);
    const unsigned dst = (unsigned)(w >> 8) & 15;
    /* SELECT and CLAMP take three; kse_out_dtype tells one (a dtype error at worst) from the
     * rest, and an unknown op fails its check below. */
    int arity = 3;
    if (op != MTIA_PE_SE_SELECT && op != MTIA_PE_SE_CLAMP) {
      int st1;
      kse_out_dtype(op, dt, 1, &st1);
      arity = st1 == MTIA_KSTATUS_BAD_OP ? 2 : 1;
    }
    if ((w >> (12 + 4 * arity)) != 0) return MTIA_KSTATUS_BAD_OP; /* unused fields are 0 */
    if (dst < PW_SLOT_TMP || dst > PW_SLOT_OUT) return MTIA_KSTATUS_BAD_OP;
    const int first_value = op == MTIA_PE_SE_SELECT; /* SELECT's src0 is the condition */
    uint8_t vdt = 0;
    for (int i = 0; i < arity; ++i) {
      const unsigned sl = (unsigned)(w >> (12 + 4 * i)) & 15;
      p->src[k][i] = (uint8_t)sl;
      if (sl == PW_SLOT_IMM) {
        if (i < first_value) return MTIA_KSTATUS_BAD_OP;
        continue;
      }
      if (sl >= PW_SLOTS || sdt[sl] == 0) return MTIA_KSTATUS_BAD_OP; /* read before written */
      if (i < first_value) {
        if (sdt[sl] != MTIA_PE_DT_BOOL) return MTIA_KSTATUS_BAD_DTYPE;
      } else if (vdt == 0) {
        vdt = sdt[sl];
      } else if (sdt[sl] != vdt) {
        return MTIA_KSTATUS_BAD_DTYPE;
      }
    }
    if (vdt == 0) vdt = (uint8_t)dt; /* every value source an immediate */
    int st = MTIA_KSTATUS_OK;
    uint8_t odt = vdt;
    if (op == MTIA_PE_SE_CLAMP) {
      if (!kdt_is_float(vdt) && !kdt_is_int(vdt)) return MTIA_KSTATUS_BAD_DTYPE;
    } else if (op != MTIA_PE_SE_SELECT) {
      odt = kse_out_dtype(op, vdt, arity, &st);
      if (st != MTIA_KSTATUS_OK) return st;
    }
    /* In place only over a source of the same element size (the SE's rule). */
    for (int i = 0; i < arity; ++i) {
      if (p->src[k][i] == dst && kdt_size(sdt[dst]) != kdt_size(odt)) return MTIA_KSTATUS_BAD_OP;
    }
    if (dst != PW_SLOT_OUT && kdt_size(odt) > kdt_size(dt)) return MTIA_KSTATUS_BAD_DTYPE;
    st = kimm_bits(vdt, imm[k], &p->imm[k]);
    if (st != MTIA_KSTATUS_OK) return st;
    p->op[k] = op;
    p->dst[k] = (uint8_t)dst;
    p->arity[k] = (uint8_t)arity;
    p->in_dt[k] = vdt;
    p->out_dt[k] = odt;
    sdt[dst] = odt;
    if (dst < PW_SLOT_OUT) *ntmp = KMAX(*ntmp, (int)dst - PW_SLOT_TMP + 1);
  }
  return sdt[PW_SLOT_OUT] == dt ? MTIA_KSTATUS_OK : MTIA_KSTATUS_BAD_DTYPE;
}

static void fn_pointwise(const ewjob* j, void* out, void* const* in, uint32_t n) {
  const pwprog* p = j->pw;
  void* slot[PW_SLOTS];
  /* The inputs and the scratch buffers the program uses (pw_check: no slot is read before it
   * is written); the engine leaves the other entries of `in` unset. */
  for (int i = 0; i < j->nin; ++i) slot[i] = in[i];
  for (int t = 0; t < j->ntmp; ++t) slot[PW_SLOT_TMP + t] = in[PW_SLOT_TMP + t];
  slot[PW_SLOT_OUT] = out;
  for (int k = 0; k < p->n; ++k) {
    mtia_pe_se_desc d;
    MTIA_ZERO_(d);
    d.hdr = mtia_desc_header(MTIA_PE_DESC_SE, 0);
    d.op = p->op[k];
    d.in_dtype = p->in_dt[k];
    d.out_dtype = p->out_dt[k];
    d.count = n;
    for (int i = 0; i < p->arity[k]; ++i) {
      if (p->src[k][i] == PW_SLOT_IMM) {
        d.mode[i] = MTIA_PE_OPND_IMMEDIATE;
        d.imm[i] = p->imm[k];
      } else {
        d.src[i] = kaddr(slot[p->src[k][i]]);
      }
    }
    d.dst = kaddr(slot[p->dst[k]]);
    mtia_wait(mtia_se_op(&d));
  }
}

typedef struct {
  uint64_t out, in[EW_MAX_IN], dtype, nin, nsteps;
  uint64_t step[PW_MAX_STEPS], imm[PW_MAX_STEPS];
  int64_t size[4], st[EW_MAX_OPS][4]; /* the output's strides, then each input's */
} pointwise_args;

MTIA_KERNEL(pointwise,
            "out:ptr a:ptr b:ptr c:ptr d:ptr e:ptr dtype:dtype nin:i64 nsteps:i64 "
            "step0:i64 step1:i64 step2:i64 step3:i64 step4:i64 step5:i64 imm0:i64 "
            "imm1:i64 imm2:i64 imm3:i64 imm4:i64 imm5:i64 " KSIG_SIZES
            " " KSIG_STRIDES("out") " " KSIG_STRIDES("a") " " KSIG_STRIDES("b") " " KSIG_STRIDES(
                "c") " " KSIG_STRIDES("d") " " KSIG_STRIDES("e"));
int pointwise(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(pointwise_args, A);
  if (kdt_size(A->dtype) == 0 || A->dtype == MTIA_PE_DT_BOOL) return MTIA_KSTATUS_BAD_DTYPE;
  pwprog p;
  ewjob j;
  MTIA_ZERO_(j);
  const int s = pw_check(&p, A->step, A->imm, A->nsteps, A->dtype, A->nin, &j.ntmp);
  if (s != MTIA_KSTATUS_OK) return s;
  j.nin = (int)A->nin;
  const int64_t* st[EW_MAX_OPS] = {A->st[0]};
  for (int i = 0; i < EW_MAX_IN; ++i) {
    j.in[i] = A->in[i];
    j.in_dt[i] = (uint8_t)A->dtype;
    st[i + 1] = A->st[i + 1];
  }
  j.out = A->out;
  j.out_dt = (uint8_t)A->dtype;
  j.dt = (uint8_t)A->dtype;
  j.fn = fn_pointwise;
  j.pw = &p;
  return ew_run(&j, A->size, st);
}
