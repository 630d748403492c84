/* The engine of the kernels that work along one dimension of a 4-D input: the reductions,
 * softmax / log_softmax and layer_norm.
 *
 * The input's dimensions are: `dim` (reduced, length R), `c` (the innermost other dimension,
 * length C) and two outer dimensions o1, o2. A tile is a 2-D box of rlen x clen elements at
 * fixed (o1, o2), gathered by the DMA into a contiguous local buffer. Its orientation follows
 * the memory layout so that the DMA reads runs of consecutive elements where there are any:
 *   axis 1: tile rows run along c, columns along dim (RE axis 1: one result per row);
 *   axis 0: tile rows run along dim, columns along c (RE axis 0: one result per column).
 * A "block" is one (o1, o2, c-range): it owns clen outputs. Blocks are dealt round-robin to
 * the PEs. When the reduced dimension does not fit in one tile the block's tiles are chunks of
 * it, visited once per pass (e.g. softmax: max, then sum of exponentials, then the output);
 * when it fits, a block is one tile that the kernel finishes in a single visit (pass
 * KRED_PASS_ALL). Tiles are double-buffered: the DMA brings the next tile in while the units
 * work on the current one. */
#ifndef MTIA_KERNELS_KRED_H_
#define MTIA_KERNELS_KRED_H_

#include "klib.h"

#define KRED_PASS_ALL (-1)
#define KRED_MAX_BUFS 12

/* Work buffers a kernel asks for, sized by the tile geometry. */
enum { KB_TILE = 1, KB_CVEC = 2, KB_RVEC = 3 }; /* rt*ct, ct, rt elements */
typedef struct rbuf {
  uint8_t kind;
  uint8_t es; /* bytes per element */
} rbuf;

typedef struct rgeo {
  int dim, c, o1, o2;
  int axis;
  uint64_t R, C, O1, O2;
  uint64_t rt, ct;   /* tile extent along dim and along c */
  uint64_t nrc, ncc; /* chunks along dim and along c */
  uint64_t nblocks;
  int npass;
  uint64_t tiles_per_block;
} rgeo;

typedef struct rtile {
  uint64_t o1i, o2i, c0, r0;
  uint32_t clen, rlen; /* extents along c and dim */
  uint32_t rows, cols; /* the tile as stored: axis 1 clen x rlen, axis 0 rlen x clen */
  int pass;            /* 0.. npass-1, or KRED_PASS_ALL */
  int first, last;     /* first / last chunk of this pass */
} rtile;

typedef struct rjob rjob;
/* Processes one tile (in `tile`, contiguous rows x cols, input dtype). Waits for its own unit
 * work; may issue output stores (tracked in st_tag). Returns a status. */
typedef int (*rproc_fn)(rjob* j, const rtile* t, void* tile);

struct rjob {
  rgeo g;
  uint64_t in;
  int64_t st[4]; /* input element strides */
  uint8_t dt;
  unsigned es;
  void* buf[2];
  void* w[KRED_MAX_BUFS];
  rproc_fn proc;
  /* Outputs: device address, element strides in the input's dimension order, dtype. */
  uint64_t out[3];
  int64_t ost[3][4];
  uint8_t odt[3];
  mtia_tag_t st_tag[3];
  uint64_t p[6]; /* kernel parameters */
};

/* ---- Geometry ------------------------------------------------------------------------------ */
static inline void rgeo_tiles(rgeo* g, uint64_t cap, uint64_t pes) {
  if (g->axis == 1) {
    g->rt = KMIN(g->R, cap);
    g->ct = KMIN(g->C, KMAX(cap / g->rt, 1u));
  } else {
    g->ct = KMIN(KMIN(g->C, cap), KMAX(64u, cap / g->R));
    g->rt = KMIN(g->R, KMAX(cap / g->ct, 1u));
  }
  /* Few outputs: narrower blocks, so that every PE gets one. */
  const uint64_t outer = g->O1 * g->O2;
  if (outer * kceil_div(g->C, g->ct) < pes) {
    const uint64_t want = kceil_div(pes, outer);
    g->ct = KMAX(KMIN(g->ct, kceil_div(g->C, want)), 1u);
    if (g->axis == 0) g->rt = KMIN(g->R, KMAX(cap / g->ct, 1u));
  }
  g->nrc = kceil_div(g->R, g->rt);
  g->ncc = kceil_div(g->C, g->ct);
  g->nblocks = outer * g->ncc;
  g->tiles_per_block = g->nrc == 1 ? 1 : (uint64_t)g->npass * g->nrc;
}

static inline uint64_t rbuf_elems(const rgeo* g, uint8_t kind) {
  return kind == KB_TILE ? g->rt * g->ct : kind == KB_CVEC ? g->ct : g->rt;
}

/* Plans the tiles for the input (sizes, element strides, dim) and allocates the two tile
 * buffers plus the kernel's work buffers in j->w. Returns a status; *empty is set when the
 * output has no elements (nothing to do). R must be >= 1. */
static inline int rjob_setup(rjob* j, const int64_t* size, const int64_t* st, int64_t dim,
                             int npass, const rbuf* bufs, int nbufs, int* empty) {
  if (dim < 0 || dim > 3) return MTIA_KSTATUS_BAD_SHAPE;
  if (kcheck_shape(size, 4) != MTIA_KSTATUS_OK || kcheck_shape(st, 4) != MTIA_KSTATUS_OK) {
    return MTIA_KSTATUS_BAD_SHAPE;
  }
  rgeo* g = &j->g;
  g->dim = (int)dim;
  g->c = dim == 3 ? 2 : 3;
  int o = 0, others[2] = {0, 0};
  for (int i = 0; i < 4; ++i) {
    if (i != g->dim && i != g->c) others[o++] = i;
  }
  g->o1 = others[0];
  g->o2 = others[1];
  g->R = (uint64_t)size[g->dim];
  g->C = (uint64_t)size[g->c];
  g->O1 = (uint64_t)size[g->o1];
  g->O2 = (uint64_t)size[g->o2];
  for (int i = 0; i < 4; ++i) j->st[i] = st[i];
  *empty = g->C == 0 || g->O1 == 0 || g->O2 == 0;
  if (*empty) return MTIA_KSTATUS_OK;
  if (g->R == 0) return MTIA_KSTATUS_BAD_SHAPE;
  if (g->C == 1) {
    g->axis = 1;
  } else if (g->R == 1) {
    g->axis = 0;
  } else {
    g->axis = st[g->dim] < st[g->c] ? 1 : 0;
  }
  g->npass = npass;

  uint64_t tile_bpe = 2u * j->es, vec_bpe = 0;
  for (int i = 0; i < nbufs; ++i) {
    if (bufs[i].kind == KB_TILE)
      tile_bpe += bufs[i].es;
    else
      vec_bpe += bufs[i].es;
  }
  karena a;
  karena_init(&a);
  const uint64_t left = karena_left(&a);
  const uint64_t slack = (uint64_t)(nbufs + 2) * 64u;
  if (left <= slack) return MTIA_KSTATUS_NO_LOCAL_STORE;
  uint64_t cap = KMIN((left - slack) / (tile_bpe + vec_bpe), 1u << 16);
  const uint64_t pes = mtia_num_pes();
  for (;;) {
    if (cap == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;
    rgeo_tiles(g, cap, pes);
    uint64_t need = 2 * kalloc_bytes(g->rt * g->ct * j->es);
    for (int i = 0; i < nbufs; ++i) need += kalloc_bytes(rbuf_elems(g, bufs[i].kind) * bufs[i].es);
    if (need <= left) break;
    cap = cap * 7 / 8;
  }
  j->buf[0] = kalloc(&a, g->rt * g->ct * j->es);
  j->buf[1] = kalloc(&a, g->rt * g->ct * j->es);
  for (int i = 0; i < nbufs; ++i) j->w[i] = kalloc(&a, rbuf_elems(g, bufs[i].kind) * bufs[i].es);
  return MTIA_KSTATUS_OK;
}

/* The k-th tile of this PE; 0 when there is none. */
static inline int rjob_tile(const rjob* j, uint64_t k, rtile* t) {
  const rgeo* g = &j->g;
  const uint64_t pes = mtia_num_pes();
  const uint64_t block = mtia_pe_id() + (k / g->tiles_per_block) * pes;
  if (block >= g->nblocks) return 0;
  const uint64_t jj = k % g->tiles_per_block;
  const uint64_t cc = block % g->ncc;
  const uint64_t rest = block / g->ncc;
  t->o2i = rest % g->O2;
  t->o1i = rest / g->O2;
  t->c0 = cc * g->ct;
  t->clen = (uint32_t)KMIN(g->ct, g->C - t->c0);
  const uint64_t rc = jj % g->nrc;
  t->pass = g->nrc == 1 ? KRED_PASS_ALL : (int)(jj / g->nrc);
  t->first = rc == 0;
  t->last = rc == g->nrc - 1;
  t->r0 = rc * g->rt;
  t->rlen = (uint32_t)KMIN(g->rt, g->R - t->r0);
  t->rows = g->axis == 1 ? t->clen : t->rlen;
  t->cols = g->axis == 1 ? t->rlen : t->clen;
  return 1;
}

/* Element offset of a tile's first element under strides s (input dimension order). */
static inline int64_t rtile_offset(const rjob* j, const rtile* t, const int64_t* s) {
  const rgeo* g = &j->g;
  return (int64_t)t->o1i * s[g->o1] + (int64_t)t->o2i * s[g->o2] + (int64_t)t->c0 * s[g->c] +
         (int64_t)t->r0 * s[g->dim];
}

static inline mtia_tag_t rjob_load(const rjob* j, const rtile* t, void* dst) {
  const rgeo* g = &j->g;
  const int64_t rs = g->axis == 1 ? j->st[g->c] : j->st[g->dim];
  const int64_t cs = g->axis == 1 ? j->st[g->dim] : j->st[g->c];
  return ktile_in(dst, j->in + (uint64_t)rtile_offset(j, t, j->st) * j->es, rs, cs, t->rows,
                  t->cols, j->es);
}

static inline int rjob_run(rjob* j) {
  rtile t[2];
  mtia_tag_t ld[2] = {0, 0};
  int have = rjob_tile(j, 0, &t[0]);
  if (have) ld[0] = rjob_load(j, &t[0], j->buf[0]);
  for (uint64_t k = 0; have; ++k) {
    const int cur = (int)(k & 1), nxt = cur ^ 1;
    /* buf[nxt] was last used by tile k-1, whose processing has finished. */
    const int have_next = rjob_tile(j, k + 1, &t[nxt]);
    if (have_next) ld[nxt] = rjob_load(j, &t[nxt], j->buf[nxt]);
    mtia_wait(ld[cur]);
    const int s = j->proc(j, &t[cur], j->buf[cur]);
    if (s != MTIA_KSTATUS_OK) {
      mtia_wait_all();
      return s;
    }
    have = have_next;
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}

/* ---- Outputs ------------------------------------------------------------------------------- */
/* Stores a block's clen per-position results (contiguous in `local`, dtype odt[w]) to output w:
 * the output has the input's shape with dim reduced to 1, so only o1, o2 and c index it. */
static inline void rstore_vec(rjob* j, int w, const rtile* t, const void* local) {
  const rgeo* g = &j->g;
  const unsigned oes = kdt_size(j->odt[w]);
  const int64_t* s = j->ost[w];
  const int64_t off =
      (int64_t)t->o1i * s[g->o1] + (int64_t)t->o2i * s[g->o2] + (int64_t)t->c0 * s[g->c];
  const uint64_t sizes[1] = {t->clen};
  j->st_tag[w] = kdma_out(j->out[w] + (uint64_t)off * oes, &s[g->c], local, sizes, 1, oes);
}

/* Stores a whole tile (contiguous in `local`, dtype odt[w]) to output w, which has the input's
 * shape. */
static inline void rstore_tile(rjob* j, int w, const rtile* t, const void* local) {
  const rgeo* g = &j->g;
  const unsigned oes = kdt_size(j->odt[w]);
  const int64_t* s = j->ost[w];
  const int64_t rs = g->axis == 1 ? s[g->c] : s[g->dim];
  const int64_t cs = g->axis == 1 ? s[g->dim] : s[g->c];
  j->st_tag[w] = ktile_out(j->out[w] + (uint64_t)rtile_offset(j, t, s) * oes, rs, cs, local,
                           t->rows, t->cols, oes);
}

/* The tile as fp32: converted into `work` unless it is fp32 already. */
static inline void* rjob_f32(const rjob* j, const rtile* t, void* tile, void* work) {
  if (j->dt == MTIA_PE_DT_FP32) return tile;
  kcast(j->dt, MTIA_PE_DT_FP32, work, tile, t->rows * t->cols);
  return work;
}

#endif /* MTIA_KERNELS_KRED_H_ */
