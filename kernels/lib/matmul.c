/* matmul, bmm and addmm on the DPE.
 *
 * C[b] = A[b] @ B[b] for every batch b, A m x k, B k x n, every operand a strided view (element
 * strides; a batch stride of 0 broadcasts). The output is cut into tm x tn tiles (the last
 * ones may be smaller), dealt round-robin to the PEs of the launch; each PE walks the k
 * dimension of its tiles in tk steps. A and B tiles are double-buffered: while the DPE
 * multiplies step s, the DMA brings in step s+1 (across tile boundaries too), and the output
 * of tile t leaves while tile t+1 is computed (two accumulators).
 *
 * Operands stored column-major (unit stride down the rows: e.g. the transposed weight of a
 * linear layer) are loaded as they lie and multiplied with the DPE's TRANS_A / TRANS_B flags,
 * so the DMA moves contiguous runs; any other layout is gathered by the DMA.
 *
 * A large product whose operands fit the on-chip SRAM is staged there first (see "SRAM
 * staging" below), so that A and B cross LPDDR once instead of once per tile row / column.
 * A small one (under MM_STAGE_MIN_BYTES of operands) is not: its re-reads cost less than the
 * staging copies and the barrier per panel (a 128x256x256 fp32 product took 19.6 us staged,
 * 9.8 us not, on mtia-v2).
 *
 * dtypes: in fp32 -> out fp32; fp16 / bf16 -> out the same or fp32; int8 -> out int32.
 * Accumulation is fp32 (int32 for int8); the result is rounded to the output dtype once. */
#include "klib.h"
#include "ksig.h"

/* Staged chunks whose copies run ahead of the one the PEs need next. */
#define MM_STAGE_AHEAD 8
/* Entries of the ring of own copy tags. */
#define MM_STAGE_RING 16
_Static_assert(MM_STAGE_RING > MM_STAGE_AHEAD && (MM_STAGE_RING & (MM_STAGE_RING - 1)) == 0,
               "MM_STAGE_RING: a power of two above MM_STAGE_AHEAD");
/* Operand bytes (A and B, in panels) below which a product is not staged. */
#define MM_STAGE_MIN_BYTES (1u << 20)

typedef struct mmjob {
  uint8_t in_dt, out_dt, acc_dt;
  unsigned ies, oes, aes;
  uint64_t batch, m, n, k;
  uint64_t a, b, c, bias;
  int64_t sa[3], sb[3], sc[3], sbias[2]; /* (batch,) row, column strides in elements */
  int trans_a, trans_b;
  int has_bias;
  uint32_t alpha, beta; /* fp32 bit patterns */
  uint64_t tm, tn, tk;
  uint64_t ntm, ntn, nk, ntiles;
  void* A[2];
  void* B[2];
  void* C[2];
  void* S[2]; /* output staging when the output dtype is not the accumulator's */
  void* bias_raw;
  void* bias_f;
  /* SRAM staging (staged != 0): operand copies, block rounds and the panels every PE has
   * finished copying. */
  int staged;
  uint64_t sram_a, sram_b;   /* device addresses of the staged A and B */
  uint64_t gr, gc, row, col; /* launch grid and this PE's place in it */
  uint64_t pes, me;          /* gr * gc, and this PE's number row * gc + col */
  uint64_t nbi, nbj;         /* block rows and columns of tiles (gr x gc tiles a block) */
  uint64_t my_nbi, my_nbj;   /* blocks in which this PE has a tile */
  uint64_t chunks;           /* staged (round, panel) chunks, in order */
  uint64_t synced;           /* chunks every PE has finished (barriers passed) */
  uint64_t issued;           /* chunks whose copies (if its own) this PE has issued */
  mtia_tag_t copy_tags[MM_STAGE_RING][2]; /* own copies of chunks synced..issued, a ring */
  /* DMA descriptors of the tile loads (per operand and buffer set) and staging copies, and
   * the DPE's: kept across steps, so a step rewrites only what changes. */
  krows_dma load_a[2], load_b[2], stage[2];
  mtia_pe_matmul_desc mm[2]; /* per buffer set: a and b fixed, the rest per (tile, k length) */
  uint64_t mm_key[2];        /* the (tile q, k length) each holds: q << 32 | klen; 0 = none */
} mmjob;

typedef struct mmtile {
  uint64_t bi, i0, j0, mlen, nlen;
  uint64_t need0; /* staged: chunks that must be in the SRAM before panel p is loaded, - p */
} mmtile;

static void mm_tile(const mmjob* j, uint64_t t, mmtile* o) {
  const uint64_t ni = t % j->ntn;
  const uint64_t rest = t / j->ntn;
  const uint64_t mi = rest % j->ntm;
  o->bi = rest / j->ntm;
  o->i0 = mi * j->tm;
  o->j0 = ni * j->tn;
  o->mlen = KMIN(j->tm, j->m - o->i0);
  o->nlen = KMIN(j->tn, j->n - o->j0);
}

/* Local-store bytes for tiles tm x tn x tk. */
static uint64_t mm_need(const mmjob* j, uint64_t tm, uint64_t tn, uint64_t tk) {
  uint64_t need = 2 * (kalloc_bytes(tm * tk * j->ies) + kalloc_bytes(tk * tn * j->ies));
  need += 2 * kalloc_bytes(tm * tn * j->aes);
  if (j->out_dt != j->acc_dt) need += 2 * kalloc_bytes(tm * tn * j->oes);
  if (j->has_bias) need += kalloc_bytes(tm * tn * j->oes) + kalloc_bytes(tm * tn * 4);
  return need;
}

static int mm_plan(mmjob* j) {
  static const uint16_t cand[][3] = {{128, 128, 96}, {128, 128, 64}, {128, 128, 32},
                                     {128, 64, 32},  {64, 64, 64},   {64, 64, 32},
                                     {32, 32, 32},   {16, 16, 16},   {8, 8, 8}};
  karena a;
  karena_init(&a);
  const uint64_t left = karena_left(&a);
  int found = 0;
  for (unsigned i = 0; i < sizeof cand / sizeof cand[0] && !found; ++i) {
    if (mm_need(j, cand[i][0], cand[i][1], cand[i][2]) <= left) {
      j->tm = cand[i][0];
      j->tn = cand[i][1];
      j->tk = cand[i][2];
      found = 1;
    }
  }
  if (!found) return MTIA_KSTATUS_NO_LOCAL_STORE;
  j->tm = KMIN(j->tm, j->m);
  j->tn = KMIN(j->tn, j->n);
  j->tk = KMIN(j->tk, KMAX(j->k, 1u));
  /* Small outputs: smaller tiles, so that the work spreads over the PEs. */
  const uint64_t pes = mtia_num_pes();
  for (;;) {
    const uint64_t tiles = j->batch * kceil_div(j->m, j->tm) * kceil_div(j->n, j->tn);
    if (tiles >= pes) break;
    if (j->tm >= j->tn && j->tm > 8) {
      j->tm = kceil_div(j->tm, 2);
    } else if (j->tn > 8) {
      j->tn = kceil_div(j->tn, 2);
    } else {
      break;
    }
  }
  /* Tiles that shrank leave room for longer k steps: fewer, larger DPE operations, each with
   * its own issue cost, and fewer DMA descriptors. Two steps at least, so that loading the
   * next step overlaps the DPE. */
  for (;;) {
    const uint64_t tk = j->tk + 32;
    if (2 * tk > KMAX(j->k, 1u) + 31 || mm_need(j, j->tm, j->tn, tk) > left) break;
    j->tk = tk;
  }
  j->ntm = kceil_div(j->m, j->tm);
  j->ntn = kceil_div(j->n, j->tn);
  j->nk = kceil_div(j->k, j->tk);
  j->ntiles = j->batch * j->ntm * j->ntn;
  for (int s = 0; s < 2; ++s) {
    j->A[s] = kalloc(&a, j->tm * j->tk * j->ies);
    j->B[s] = kalloc(&a, j->tk * j->tn * j->ies);
    j->C[s] = kalloc(&a, j->tm * j->tn * j->aes);
    j->S[s] = j->out_dt != j->acc_dt ? kalloc(&a, j->tm * j->tn * j->oes) : j->C[s];
  }
  if (j->has_bias) {
    j->bias_raw = kalloc(&a, j->tm * j->tn * j->oes);
    j->bias_f = kalloc(&a, j->tm * j->tn * 4);
  }
  return MTIA_KSTATUS_OK;
}

/* ---- SRAM staging ----------------------------------------------------------------------------
 * Tiles are dealt in block rounds: round (bi, bj) gives launch PE (r, c) the tile
 * (bi * gr + r, bj * gc + c), so one round needs gr tile rows of A and gc tile columns of B.
 * The first round of block row bi brings A's rows for it, the rounds of block row 0 bring B's
 * columns: "data rounds" d = 0 .. nbj-1 are (0, d), d = nbj .. are (d - nbj + 1, 0). Each data
 * round is copied k-panel by k-panel (tk columns of A, tk rows of B); chunk d * nk + p is data
 * round d's panel p. Its A part and its B part are each copied whole by one PE, PEs 2c and
 * 2c + 1 (mod PEs), so that a chunk is one or two DMA descriptors (a slice of it from every PE
 * made 64 times as many for the same bytes) and the two start together. Before a PE loads a
 * tile from a panel, that chunk's copies must be done: their PEs wait for them, and every PE
 * meets the others at a barrier, once per chunk, in chunk order, so all PEs pass the same
 * barriers. Copies are issued MM_STAGE_AHEAD chunks ahead.
 *
 * Staged layouts (A rows m, B columns n, panel p of klen = min(tk, k - p * tk)):
 *   A, not transposed: panel p at sram_a + p * m * tk, row i at + i * klen (rows of klen)
 *   A, transposed:     panel p at sram_a + p * m * tk, k row kk at + kk * m (runs along m)
 *   B, not transposed: panel p at sram_b + p * tk * n, k row kk at + kk * n
 *   B, transposed:     panel p at sram_b + p * tk * n, column j at + j * klen
 * (in elements), so every tile load from SRAM is a few long contiguous runs. */

static uint64_t mm_klen(const mmjob* j, uint64_t p) {
  return KMIN(j->tk, j->k - p * j->tk);
}

/* Issues the copy of a 2-D box, outer x inner elements (through descriptor cache c when its rows
 * are contiguous). */
static mtia_tag_t mm_stage_copy(mmjob* j, krows_dma* c, uint64_t dst, const int64_t* dst_st,
                                uint64_t src, const int64_t* src_st, uint64_t outer,
                                uint64_t inner) {
  if (dst_st[1] == (int64_t)j->ies && src_st[1] == (int64_t)j->ies) {
    return kdma_rows(c, dst, MTIA_PE_SPACE_DEVICE, (uint64_t)dst_st[0], src, MTIA_PE_SPACE_DEVICE,
                     (uint64_t)src_st[0], outer, inner, j->ies);
  }
  const uint64_t sizes[2] = {outer, inner};
  return kdma(dst, MTIA_PE_SPACE_DEVICE, dst_st, src, MTIA_PE_SPACE_DEVICE, src_st, sizes, 2,
              j->ies);
}

/* Issues this PE's parts of chunk c into tags: A rows (own_a) and/or B columns (own_b) of data
 * round d, panel p. Out of line: most chunks are other PEs'. */
__attribute__((noinline)) static void mm_stage_issue(mmjob* j, uint64_t c, int own_a, int own_b,
                                                     mtia_tag_t* tags) {
  const uint64_t d = c / j->nk, p = c % j->nk;
  const uint64_t k0 = p * j->tk, klen = mm_klen(j, p);
  const int64_t es = (int64_t)j->ies;
  if (own_a && (d == 0 || d >= j->nbj)) { /* A rows of block row bi */
    const uint64_t bi = d == 0 ? 0 : d - j->nbj + 1;
    const uint64_t i0 = bi * j->gr * j->tm, rows = KMIN(j->gr * j->tm, j->m - i0);
    const uint64_t src = j->a + (i0 * (uint64_t)j->sa[1] + k0 * (uint64_t)j->sa[2]) * j->ies;
    const uint64_t panel = j->sram_a + p * j->m * j->tk * j->ies;
    if (j->trans_a) {
      const int64_t ss[2] = {j->sa[2] * es, j->sa[1] * es}, ds[2] = {(int64_t)j->m * es, es};
      tags[0] = mm_stage_copy(j, &j->stage[0], panel + i0 * j->ies, ds, src, ss, klen, rows);
    } else {
      const int64_t ss[2] = {j->sa[1] * es, j->sa[2] * es}, ds[2] = {(int64_t)klen * es, es};
      tags[0] = mm_stage_copy(j, &j->stage[0], panel + i0 * klen * j->ies, ds, src, ss, rows, klen);
    }
  }
  if (own_b && d < j->nbj) { /* B columns of block column bj = d */
    const uint64_t j0 = d * j->gc * j->tn, cols = KMIN(j->gc * j->tn, j->n - j0);
    const uint64_t src = j->b + (k0 * (uint64_t)j->sb[1] + j0 * (uint64_t)j->sb[2]) * j->ies;
    const uint64_t panel = j->sram_b + p * j->tk * j->n * j->ies;
    if (j->trans_b) {
      const int64_t ss[2] = {j->sb[2] * es, j->sb[1] * es}, ds[2] = {(int64_t)klen * es, es};
      tags[1] = mm_stage_copy(j, &j->stage[1], panel + j0 * klen * j->ies, ds, src, ss, cols, klen);
    } else {
      const int64_t ss[2] = {j->sb[1] * es, j->sb[2] * es}, ds[2] = {(int64_t)j->n * es, es};
      tags[1] = mm_stage_copy(j, &j->stage[1], panel + j0 * j->ies, ds, src, ss, klen, cols);
    }
  }
}

/* The work of mm_stage_sync (below), kept out of line so that its register saves are paid only
 * when there is work. */
__attribute__((noinline)) static void mm_stage_sync_slow(mmjob* j, uint64_t need) {
  while (j->synced < need) {
    const uint64_t c = j->synced;
    for (; j->issued < KMIN(j->chunks, c + MM_STAGE_AHEAD + 1); ++j->issued) {
      const uint64_t i = j->issued;
      mtia_tag_t* tags = j->copy_tags[i & (MM_STAGE_RING - 1)];
      tags[0] = tags[1] = 0;
      const int own_a = 2 * i % j->pes == j->me, own_b = (2 * i + 1) % j->pes == j->me;
      if (own_a || own_b) mm_stage_issue(j, i, own_a, own_b, tags);
    }
    const mtia_tag_t* tags = j->copy_tags[c & (MM_STAGE_RING - 1)];
    if (tags[0] | tags[1]) { /* its own chunk */
      mtia_wait(tags[0]);
      mtia_wait(tags[1]);
    }
    mtia_barrier();
    ++j->synced;
  }
}

/* Returns once chunks [0, need) are in the SRAM on every PE's behalf. It is called twice a
 * k-step and usually has nothing to do, so the check is inline. */
static inline void mm_stage_sync(mmjob* j, uint64_t need) {
  need = KMIN(need, j->chunks);
  if (j->synced < need) mm_stage_sync_slow(j, need);
}

/* True if device address `a` lies in the on-chip SRAM. */
static inline int mm_in_sram(uint64_t a) {
  return a >= mtia_sram_base() && a - mtia_sram_base() < mtia_sram_bytes();
}

/* Chooses staging for one large product whose operands fit the SRAM (and are at least
 * MM_STAGE_MIN_BYTES). A product with an operand already in the SRAM is not staged: its tiles
 * load from there as they lie, and the staging copies would overwrite it. */
static void mm_stage_plan(mmjob* j) {
  const uint64_t pes = mtia_num_pes();
  const uint64_t bytes = (j->m + j->n) * j->nk * j->tk * j->ies;
  if (j->batch != 1 || pes < 2 || j->k == 0 || j->ntm * j->ntn < 2 || bytes > mtia_sram_bytes() ||
      bytes < MM_STAGE_MIN_BYTES) {
    return;
  }
  if (mm_in_sram(j->a) || mm_in_sram(j->b) || mm_in_sram(j->c) ||
      (j->has_bias && mm_in_sram(j->bias))) {
    return;
  }
  j->staged = 1;
  j->sram_a = mtia_sram_base();
  j->sram_b = j->sram_a + j->m * j->nk * j->tk * j->ies;
  j->gr = mtia_grid_rows();
  j->gc = mtia_grid_cols();
  j->row = mtia_pe_row();
  j->col = mtia_pe_col();
  j->pes = j->gr * j->gc;
  j->me = j->row * j->gc + j->col;
  j->nbi = kceil_div(j->ntm, j->gr);
  j->nbj = kceil_div(j->ntn, j->gc);
  j->my_nbi = j->ntm > j->row ? kceil_div(j->ntm - j->row, j->gr) : 0;
  j->my_nbj = j->ntn > j->col ? kceil_div(j->ntn - j->col, j->gc) : 0;
  j->chunks = (j->nbj + j->nbi - 1) * j->nk;
}

/* This PE's q-th tile, and how many it has. */
static uint64_t mm_my_tiles(const mmjob* j) {
  if (j->staged) return j->my_nbi * j->my_nbj;
  const uint64_t pe = mtia_pe_id(), pes = mtia_num_pes();
  return j->ntiles > pe ? kceil_div(j->ntiles - pe, pes) : 0;
}
static void mm_my_tile(const mmjob* j, uint64_t q, mmtile* o) {
  if (!j->staged) {
    mm_tile(j, mtia_pe_id() + q * mtia_num_pes(), o);
    return;
  }
  const uint64_t rbi = q / j->my_nbj, rbj = q % j->my_nbj; /* the block round */
  o->bi = 0;
  o->i0 = (rbi * j->gr + j->row) * j->tm;
  o->j0 = (rbj * j->gc + j->col) * j->tn;
  o->mlen = KMIN(j->tm, j->m - o->i0);
  o->nlen = KMIN(j->tn, j->n - o->j0);
  /* Panel p needs the data rounds that brought its A rows and B columns, up to panel p. */
  const uint64_t da = rbi == 0 ? 0 : j->nbj + rbi - 1, db = rbj;
  o->need0 = KMAX(da, db) * j->nk + 1;
}

/* Loads a rows x cols tile, element (i, j) at dev + (i * rs + j * cs) * es, into a contiguous
 * local buffer; with descriptor cache d when its rows are contiguous (cs = 1), where `key`
 * names the box (see kdma_rows_keyed: within a launch, a buffer's box is set by the tile's
 * extent and the step's k length). */
static inline mtia_tag_t mm_tile_in(krows_dma* d, uint64_t key, void* local, uint64_t dev,
                                    int64_t rs, int64_t cs, uint64_t rows, uint64_t cols,
                                    unsigned es) {
  if (cs != 1) return ktile_in(local, dev, rs, cs, rows, cols, es);
  return kdma_rows_keyed(d, key, kaddr(local), MTIA_PE_SPACE_LOCAL, cols * es, dev,
                         MTIA_PE_SPACE_DEVICE, (uint64_t)rs * es, rows, cols, es);
}

/* Issues the DMA of the A and B tiles of k-step kk of tile t into buffer set s. Inlined: it
 * runs every k-step. */
static inline __attribute__((always_inline)) void mm_load(mmjob* j, const mmtile* t, uint64_t kk,
                                                          int s, mtia_tag_t* la, mtia_tag_t* lb) {
  const uint64_t k0 = kk * j->tk;
  const uint64_t klen = KMIN(j->tk, j->k - k0);
  const unsigned es = j->ies;
  const uint64_t key_a = t->mlen << 32 | klen, key_b = t->nlen << 32 | klen;
  krows_dma *da = &j->load_a[s], *db = &j->load_b[s];
  if (j->staged) {
    const uint64_t need = t->need0 + kk;
    mm_stage_sync(j, need);
    /* Staged rows are contiguous (the layouts above). */
    const uint64_t pa = j->sram_a + k0 * j->m * es, pb = j->sram_b + k0 * j->n * es;
    *la = j->trans_a
              ? mm_tile_in(da, key_a, j->A[s], pa + t->i0 * es, (int64_t)j->m, 1, klen, t->mlen, es)
              : mm_tile_in(da, key_a, j->A[s], pa + t->i0 * klen * es, (int64_t)klen, 1, t->mlen,
                           klen, es);
    *lb = j->trans_b ? mm_tile_in(db, key_b, j->B[s], pb + t->j0 * klen * es, (int64_t)klen, 1,
                                  t->nlen, klen, es)
                     : mm_tile_in(db, key_b, j->B[s], pb + t->j0 * es, (int64_t)j->n, 1, klen,
                                  t->nlen, es);
    /* Meet the others for the next chunk now, while these loads and the DPE run: a barrier
     * just before a load would make every PE's loads start together and queue on the SRAM. */
    mm_stage_sync(j, need + 1);
    return;
  }
  const uint64_t a0 = j->a + (t->bi * j->sa[0] + t->i0 * j->sa[1] + k0 * j->sa[2]) * es;
  const uint64_t b0 = j->b + (t->bi * j->sb[0] + k0 * j->sb[1] + t->j0 * j->sb[2]) * es;
  *la = j->trans_a ? mm_tile_in(da, key_a, j->A[s], a0, j->sa[2], j->sa[1], klen, t->mlen, es)
                   : mm_tile_in(da, key_a, j->A[s], a0, j->sa[1], j->sa[2], t->mlen, klen, es);
  *lb = j->trans_b ? mm_tile_in(db, key_b, j->B[s], b0, j->sb[2], j->sb[1], t->nlen, klen, es)
                   : mm_tile_in(db, key_b, j->B[s], b0, j->sb[1], j->sb[2], klen, t->nlen, es);
}

static mtia_tag_t mm_bias_load(const mmjob* j, const mmtile* t) {
  const uint64_t src = j->bias + (t->i0 * j->sbias[0] + t->j0 * j->sbias[1]) * j->oes;
  return ktile_in(j->bias_raw, src, j->sbias[0], j->sbias[1], t->mlen, t->nlen, j->oes);
}

/* alpha, bias, the output dtype; then the store. Returns the store's tag. */
static mtia_tag_t mm_epilogue(const mmjob* j, const mmtile* t, int cs, mtia_tag_t bias_tag) {
  const uint32_t n = (uint32_t)(t->mlen * t->nlen);
  void* acc = j->C[cs];
  if (j->alpha != KF32_ONE) kse_imm(MTIA_PE_SE_MUL, MTIA_PE_DT_FP32, acc, acc, j->alpha, n);
  if (j->has_bias) {
    mtia_wait(bias_tag);
    kcast(j->out_dt, MTIA_PE_DT_FP32, j->bias_f, j->bias_raw, n);
    if (j->beta != KF32_ONE)
      kse_imm(MTIA_PE_SE_MUL, MTIA_PE_DT_FP32, j->bias_f, j->bias_f, j->beta, n);
    kse(MTIA_PE_SE_ADD, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, acc, acc, j->bias_f, 0, n);
  }
  if (j->out_dt != j->acc_dt) kcast(j->acc_dt, j->out_dt, j->S[cs], acc, n);
  const uint64_t dst = j->c + (t->bi * j->sc[0] + t->i0 * j->sc[1] + t->j0 * j->sc[2]) * j->oes;
  return ktile_out(dst, j->sc[1], j->sc[2], j->S[cs], t->mlen, t->nlen, j->oes);
}

static int mm_run(mmjob* j) {
  for (int i = 0; i < 3; ++i) {
    if (j->sa[i] < 0 || j->sb[i] < 0 || j->sc[i] < 0) return MTIA_KSTATUS_BAD_SHAPE;
  }
  if (j->sbias[0] < 0 || j->sbias[1] < 0) return MTIA_KSTATUS_BAD_SHAPE;
  if ((int64_t)j->batch < 0 || (int64_t)j->m < 0 || (int64_t)j->n < 0 || (int64_t)j->k < 0) {
    return MTIA_KSTATUS_BAD_SHAPE;
  }
  if (j->batch == 0 || j->m == 0 || j->n == 0) return MTIA_KSTATUS_OK;
  j->ies = kdt_size(j->in_dt);
  j->oes = kdt_size(j->out_dt);
  j->aes = kdt_size(j->acc_dt);
  j->trans_a = j->sa[2] != 1 && j->sa[1] == 1;
  j->trans_b = j->sb[2] != 1 && j->sb[1] == 1;
  const int s = mm_plan(j);
  if (s != MTIA_KSTATUS_OK) return s;

  mm_stage_plan(j);
  const uint64_t mine = mm_my_tiles(j);
  mtia_tag_t st[2] = {0, 0};
  mtia_tag_t bias_tag = 0;
  if (j->k == 0) {
    /* An empty product: the output is alpha * 0 + beta * bias. */
    for (uint64_t q = 0; q < mine; ++q) {
      mmtile t;
      mm_my_tile(j, q, &t);
      const int cs = (int)(q & 1);
      mtia_wait(st[cs]);
      kse_fill(j->acc_dt, j->C[cs], 0, (uint32_t)(t.mlen * t.nlen));
      if (j->has_bias) bias_tag = mm_bias_load(j, &t);
      st[cs] = mm_epilogue(j, &t, cs, bias_tag);
    }
    mtia_wait_all();
    return MTIA_KSTATUS_OK;
  }

  const uint64_t steps = mine * j->nk;
  mtia_tag_t la[2] = {0, 0}, lb[2] = {0, 0}, dpe[2] = {0, 0};
  mmtile tiles[2]; /* tile q in tiles[q & 1]: the next one is set up while this one runs */
  const uint16_t mm_flags =
      (j->trans_a ? MTIA_PE_MM_TRANS_A : 0) | (j->trans_b ? MTIA_PE_MM_TRANS_B : 0);
  const mtia_pe_desc_header hdr_first = mtia_desc_header(MTIA_PE_DESC_MATMUL, mm_flags);
  const mtia_pe_desc_header hdr_acc =
      mtia_desc_header(MTIA_PE_DESC_MATMUL, (uint16_t)(mm_flags | MTIA_PE_MM_ACCUMULATE));
  for (int b = 0; b < 2; ++b) {
    j->mm[b].in_dtype = j->in_dt;
    j->mm[b].out_dtype = j->acc_dt;
    j->mm[b].a = kaddr(j->A[b]);
    j->mm[b].b = kaddr(j->B[b]);
  }
  if (steps > 0) {
    mm_my_tile(j, 0, &tiles[0]);
    mm_load(j, &tiles[0], 0, 0, &la[0], &lb[0]);
  }
  uint64_t q = 0, kk = 0; /* step s is k-step kk of this PE's tile q */
  for (uint64_t s = 0; s < steps; ++s) {
    const int cur = (int)(s & 1), nxt = cur ^ 1;
    const mmtile* t = &tiles[q & 1];
    const int cs = (int)(q & 1);
    if (kk == 0) {
      mtia_wait(st[cs]); /* tile q-2's output has left this accumulator */
      if (j->has_bias) bias_tag = mm_bias_load(j, t);
    }
    mtia_wait(la[cur]);
    mtia_wait(lb[cur]);
    /* A k-step after the first accumulates into the output tile step s-1 still writes: the
     * ISA orders unit operations only through their tags, so wait for it first. */
    if (kk > 0) mtia_wait(dpe[nxt]);
    const uint64_t klen = KMIN(j->tk, j->k - kk * j->tk);
    mtia_pe_matmul_desc* mm = &j->mm[cur];
    const uint64_t key = q << 32 | klen; /* the descriptor's shape: this tile, this k length */
    if (j->mm_key[cur] != key) {
      j->mm_key[cur] = key;
      mm->m = (uint32_t)t->mlen;
      mm->n = (uint32_t)t->nlen;
      mm->k = (uint32_t)klen;
      mm->lda = (uint32_t)(j->trans_a ? t->mlen : klen);
      mm->ldb = (uint32_t)(j->trans_b ? klen : t->nlen);
      mm->ldc = (uint32_t)t->nlen;
      mm->c = kaddr(j->C[cs]);
    }
    mm->hdr = kk > 0 ? hdr_acc : hdr_first;
    dpe[cur] = mtia_dpe_matmul(mm);
    const int last = kk + 1 == j->nk; /* the last k-step of tile q */
    const uint64_t nq = last ? q + 1 : q, nkk = last ? 0 : kk + 1;
    if (s + 1 < steps) {
      /* Buffer set nxt was read by the DPE at step s-1: wait for it, then refill. */
      mtia_wait(dpe[nxt]);
      if (last) mm_my_tile(j, nq, &tiles[nq & 1]);
      mm_load(j, &tiles[nq & 1], nkk, nxt, &la[nxt], &lb[nxt]);
    }
    if (last) {
      mtia_wait(dpe[cur]);
      st[cs] = mm_epilogue(j, t, cs, bias_tag);
    }
    q = nq;
    kk = nkk;
  }
  if (j->staged) mm_stage_sync(j, j->chunks); /* meet the others at every remaining barrier */
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}

/* Checks and fills the dtypes: 0 or a status. */
static int mm_dtypes(mmjob* j, uint64_t in_dt, uint64_t out_dt, int float_only) {
  j->in_dt = (uint8_t)in_dt;
  j->out_dt = (uint8_t)out_dt;
  if (in_dt == MTIA_PE_DT_INT8 && !float_only) {
    if (out_dt != MTIA_PE_DT_INT32) return MTIA_KSTATUS_BAD_DTYPE;
    j->acc_dt = MTIA_PE_DT_INT32;
    return MTIA_KSTATUS_OK;
  }
  if (!kdt_is_float(in_dt)) return MTIA_KSTATUS_BAD_DTYPE;
  if (out_dt != in_dt && out_dt != MTIA_PE_DT_FP32) return MTIA_KSTATUS_BAD_DTYPE;
  j->acc_dt = MTIA_PE_DT_FP32;
  return MTIA_KSTATUS_OK;
}

typedef struct {
  uint64_t c, a, b, in_dtype, out_dtype;
  int64_t m, n, k, a_stride_m, a_stride_k, b_stride_k, b_stride_n, c_stride_m, c_stride_n;
} matmul_args;

MTIA_KERNEL(matmul,
            "c:ptr a:ptr b:ptr in_dtype:dtype out_dtype:dtype m:i64 n:i64 k:i64 "
            "a_stride_m:i64 a_stride_k:i64 b_stride_k:i64 b_stride_n:i64 "
            "c_stride_m:i64 c_stride_n:i64");
int matmul(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(matmul_args, A);
  mmjob j;
  MTIA_ZERO_(j);
  const int s = mm_dtypes(&j, A->in_dtype, A->out_dtype, 0);
  if (s != MTIA_KSTATUS_OK) return s;
  j.batch = 1;
  j.m = (uint64_t)A->m;
  j.n = (uint64_t)A->n;
  j.k = (uint64_t)A->k;
  j.a = A->a;
  j.b = A->b;
  j.c = A->c;
  j.sa[1] = A->a_stride_m;
  j.sa[2] = A->a_stride_k;
  j.sb[1] = A->b_stride_k;
  j.sb[2] = A->b_stride_n;
  j.sc[1] = A->c_stride_m;
  j.sc[2] = A->c_stride_n;
  j.alpha = KF32_ONE;
  return mm_run(&j);
}

typedef struct {
  uint64_t c, a, b, in_dtype, out_dtype;
  int64_t batch, m, n, k;
  int64_t a_stride_batch, a_stride_m, a_stride_k;
  int64_t b_stride_batch, b_stride_k, b_stride_n;
  int64_t c_stride_batch, c_stride_m, c_stride_n;
} bmm_args;

MTIA_KERNEL(bmm,
            "c:ptr a:ptr b:ptr in_dtype:dtype out_dtype:dtype batch:i64 m:i64 n:i64 k:i64 "
            "a_stride_batch:i64 a_stride_m:i64 a_stride_k:i64 "
            "b_stride_batch:i64 b_stride_k:i64 b_stride_n:i64 "
            "c_stride_batch:i64 c_stride_m:i64 c_stride_n:i64");
int bmm(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(bmm_args, A);
  mmjob j;
  MTIA_ZERO_(j);
  const int s = mm_dtypes(&j, A->in_dtype, A->out_dtype, 0);
  if (s != MTIA_KSTATUS_OK) return s;
  j.batch = (uint64_t)A->batch;
  j.m = (uint64_t)A->m;
  j.n = (uint64_t)A->n;
  j.k = (uint64_t)A->k;
  j.a = A->a;
  j.b = A->b;
  j.c = A->c;
  j.sa[0] = A->a_stride_batch;
  j.sa[1] = A->a_stride_m;
  j.sa[2] = A->a_stride_k;
  j.sb[0] = A->b_stride_batch;
  j.sb[1] = A->b_stride_k;
  j.sb[2] = A->b_stride_n;
  j.sc[0] = A->c_stride_batch;
  j.sc[1] = A->c_stride_m;
  j.sc[2] = A->c_stride_n;
  j.alpha = KF32_ONE;
  return mm_run(&j);
}

typedef struct {
  uint64_t out, bias, a, b, in_dtype, out_dtype;
  int64_t m, n, k;
  uint64_t alpha, beta;
  int64_t bias_stride_m, bias_stride_n, a_stride_m, a_stride_k, b_stride_k, b_stride_n;
  int64_t out_stride_m, out_stride_n;
} addmm_args;

/* addmm: out = beta * bias + alpha * (a @ b), floating dtypes; bias has the output dtype and
 * broadcasts with stride 0 (a bias vector: bias_stride_m = 0). beta = 0 ignores bias. */
MTIA_KERNEL(addmm,
            "out:ptr bias:ptr a:ptr b:ptr in_dtype:dtype out_dtype:dtype m:i64 n:i64 "
            "k:i64 alpha:f32 beta:f32 bias_stride_m:i64 bias_stride_n:i64 "
            "a_stride_m:i64 a_stride_k:i64 b_stride_k:i64 b_stride_n:i64 "
            "out_stride_m:i64 out_stride_n:i64");
int addmm(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(addmm_args, A);
  mmjob j;
  MTIA_ZERO_(j);
  const int s = mm_dtypes(&j, A->in_dtype, A->out_dtype, 1);
  if (s != MTIA_KSTATUS_OK) return s;
  j.batch = 1;
  j.m = (uint64_t)A->m;
  j.n = (uint64_t)A->n;
  j.k = (uint64_t)A->k;
  j.a = A->a;
  j.b = A->b;
  j.c = A->out;
  j.bias = A->bias;
  j.sa[1] = A->a_stride_m;
  j.sa[2] = A->a_stride_k;
  j.sb[1] = A->b_stride_k;
  j.sb[2] = A->b_stride_n;
  j.sc[1] = A->out_stride_m;
  j.sc[2] = A->out_stride_n;
  j.sbias[0] = A->bias_stride_m;
  j.sbias[1] = A->bias_stride_n;
  j.alpha = (uint32_t)A->alpha;
  j.beta = (uint32_t)A->beta;
  j.has_bias = (j.beta & 0x7fffffffu) != 0; /* beta = +-0: bias ignored, NaNs in it too */
  return mm_run(&j);
}
