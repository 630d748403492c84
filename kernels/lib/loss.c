/* The negative log-likelihood loss over [N, C, S] views (S: the spatial positions, folded by
 * the host; 1 for the plain [N, C] loss) with any strides:
 *   nll_loss           per position -weight[t] * in[n, t, s] (t = target[n, s]), written per
 *                      position (reduction none) and/or summed per PE with the picked weights;
 *   nll_loss_backward  writes the gradient of the picked elements of grad_in (the host zeroes
 *                      the rest first).
 * A position whose target equals ignore_index picks nothing (loss 0, weight 0). A target
 * outside [0, C) is the library's status 16 with flag CHECK (before anything of its chunk is
 * written); without it (a graph capture, where the host cannot check) it picks nothing.
 *
 * Positions are dealt to the PEs in chunks along s at fixed n. The targets of a chunk come in
 * by one DMA; the core then issues one single-element DMA per valid position for the picked
 * input (and weight), so a position costs the same for any class count; with flag BOX (up to
 * NLL_BOX_MAX_CLASSES classes) the chunk's whole [C, chunk] box and the weights come in by one
 * DMA each and the core picks the elements (the backward pass writes whole boxes of grad_in,
 * zeros included, so the host need not fill it). The SE computes the
 * products in fp32 and the RE sums them; the sums of each PE go to its own slot of `sums`
 * (loss sum, weight sum: two fp32 values), which the host adds up. No two PEs write the same
 * bytes. */
#include "klib.h"
#include "ksig.h"

#define NLL_WEIGHT 1u  /* weight given (else every class weighs 1) */
#define NLL_PER_POS 2u /* forward: write out[n, s]; backward: grad_out is per position */
#define NLL_SUMS 4u    /* forward: write this PE's sums */
#define NLL_CHECK 8u   /* forward: a target outside [0, C) fails the launch */
#define NLL_MEAN 16u   /* backward: divide grad_out by total_weight[0] */
#define NLL_BOX 32u    /* few classes: move whole [C, chunk] boxes (backward: all of grad_in) */
#define NLL_FWD_FLAGS (NLL_WEIGHT | NLL_PER_POS | NLL_SUMS | NLL_CHECK | NLL_BOX)
#define NLL_BWD_FLAGS (NLL_WEIGHT | NLL_PER_POS | NLL_MEAN | NLL_BOX)
#define NLL_BOX_MAX_CLASSES 256

#define NLL_STATUS_BAD_TARGET 16 /* the index kernels' status for an index out of range */

/* The fp32/fp16/bf16 bit pattern of 1. */
static uint64_t nll_one(uint64_t dt) {
  return dt == MTIA_PE_DT_FP32 ? KF32_ONE : dt == MTIA_PE_DT_FP16 ? 0x3c00u : 0x3f80u;
}

/* Loads an element of es bytes (the core's own load). */
static uint64_t nll_get(const uint8_t* p, unsigned es) {
  return es == 4 ? *(const uint32_t*)(const void*)p : *(const uint16_t*)(const void*)p;
}

/* Stores an element of es bytes (the core's own store). */
static void nll_put(uint8_t* p, unsigned es, uint64_t bits) {
  if (es == 4) {
    *(uint32_t*)(void*)p = (uint32_t)bits;
  } else {
    *(uint16_t*)(void*)p = (uint16_t)bits;
  }
}

static int nll_shape_ok(int64_t n, int64_t c, int64_t s, const int64_t* st, int nst) {
  const int64_t sizes[3] = {n, c, s};
  if (kcheck_shape(sizes, 3) != MTIA_KSTATUS_OK) return 0;
  return kcheck_shape(st, nst) == MTIA_KSTATUS_OK;
}

/* A single-element DMA descriptor whose addresses are patched per element. */
static void nll_elem_desc(mtia_pe_dma_desc* d, uint8_t dsp, uint8_t ssp, unsigned es) {
  const uint64_t one = 1;
  const int64_t st = (int64_t)es;
  kdma_build(d, 0, dsp, &st, 0, ssp, &st, &one, 1, es);
}

/* The chunk plan shared by both kernels: positions per chunk and chunks per n. */
static int64_t nll_chunk(uint64_t left, uint64_t per, int64_t total, int64_t S) {
  int64_t cap = (int64_t)KMIN(left / per, 1u << 14);
  const int64_t share = (int64_t)KMAX(kceil_div((uint64_t)total, mtia_num_pes()), 64u);
  cap = KMIN(cap, share);
  return KMAX(KMIN(cap, S), 1);
}

typedef struct {
  uint64_t out, sums, in, target, weight, dtype;
  int64_t flags, ignore, n, c, s;
  int64_t in_st[3], tgt_st[2], out_st[2], w_st;
} nll_fwd_args;

MTIA_KERNEL(nll_loss,
            "out:ptr sums:ptr in:ptr target:ptr weight:ptr dtype:dtype flags:i64 "
            "ignore_index:i64 n:i64 c:i64 s:i64 in_st_n:i64 in_st_c:i64 in_st_s:i64 "
            "tgt_st_n:i64 tgt_st_s:i64 out_st_n:i64 out_st_s:i64 w_st:i64");
int nll_loss(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(nll_fwd_args, A);
  if (((uint64_t)A->flags & ~(uint64_t)NLL_FWD_FLAGS) != 0) return MTIA_KSTATUS_BAD_OP;
  if (!kdt_is_float(A->dtype)) return MTIA_KSTATUS_BAD_DTYPE;
  const int64_t st[8] = {A->in_st[0],  A->in_st[1],  A->in_st[2],  A->tgt_st[0],
                         A->tgt_st[1], A->out_st[0], A->out_st[1], A->w_st};
  if (!nll_shape_ok(A->n, A->c, A->s, st, 8)) return MTIA_KSTATUS_BAD_SHAPE;
  const uint8_t dt = (uint8_t)A->dtype;
  const unsigned es = kdt_size(A->dtype);
  const int64_t N = A->n, C = A->c, S = A->s;
  const uint64_t flags = (uint64_t)A->flags;
  const uint8_t F = MTIA_PE_DT_FP32;

  karena ar;
  karena_init(&ar);
  float* sums = (float*)kalloc(&ar, 64);
  if (!sums) return MTIA_KSTATUS_NO_LOCAL_STORE;
  sums[0] = 0;
  sums[1] = 0;
  const int box = (flags & NLL_BOX) != 0;
  if (box && C > NLL_BOX_MAX_CLASSES) return MTIA_KSTATUS_BAD_SHAPE;
  uint8_t* wb = 0; /* box: the weights */
  if (box && (flags & NLL_WEIGHT) && C > 0) {
    wb = (uint8_t*)kalloc(&ar, (uint64_t)C * es);
    if (!wb) return MTIA_KSTATUS_NO_LOCAL_STORE;
    mtia_wait(ktile_in(wb, A->weight, 0, A->w_st, 1, (uint64_t)C, es));
  }
  /* target, x, w, xf, wf, product, stage; box: a column of classes */
  const uint64_t per = 8 + 2 * es + 4 * 3 + es + (box ? (uint64_t)C * es : 0);
  if (karena_left(&ar) < 9 * 64 + 64 * per) return MTIA_KSTATUS_NO_LOCAL_STORE;
  const int64_t L = nll_chunk(karena_left(&ar) - 9 * 64, per, N * S, S);
  uint8_t* xb = box ? (uint8_t*)kalloc(&ar, (uint64_t)(C * L) * es + 8) : 0;
  int64_t* tg = (int64_t*)kalloc(&ar, (uint64_t)L * 8);
  uint8_t* x = (uint8_t*)kalloc(&ar, (uint64_t)L * es);
  uint8_t* w = (uint8_t*)kalloc(&ar, (uint64_t)L * es);
  float* xf = (float*)kalloc(&ar, (uint64_t)L * 4);
  float* wf = (float*)kalloc(&ar, (uint64_t)L * 4);
  float* pr = (float*)kalloc(&ar, (uint64_t)L * 4);
  uint8_t* stage = (uint8_t*)kalloc(&ar, (uint64_t)L * es);
  if (!tg || !x || !w || !xf || !wf || !pr || !stage || (box && !xb)) {
    return MTIA_KSTATUS_NO_LOCAL_STORE;
  }
  mtia_pe_dma_desc d;
  nll_elem_desc(&d, MTIA_PE_SPACE_LOCAL, MTIA_PE_SPACE_DEVICE, es);
  const uint64_t one = nll_one(dt);
  const int weighted = (flags & NLL_WEIGHT) != 0;

  const int64_t per_n = (S + L - 1) / L;
  const uint64_t chunks = (uint64_t)(N * per_n);
  for (uint64_t k = mtia_pe_id(); k < chunks; k += mtia_num_pes()) {
    const int64_t n = (int64_t)(k / (uint64_t)per_n);
    const int64_t s0 = (int64_t)(k % (uint64_t)per_n) * L;
    const int64_t len = KMIN(L, S - s0);
    mtia_wait_all(); /* the previous chunk's store has left the stage */
    mtia_wait(ktile_in(tg, A->target + (uint64_t)((n * A->tgt_st[0] + s0 * A->tgt_st[1]) * 8), 0,
                       A->tgt_st[1], 1, (uint64_t)len, 8));
    const uint64_t xrow = A->in + (uint64_t)((n * A->in_st[0] + s0 * A->in_st[2]) * (int64_t)es);
    if (box && C > 0) {
      ktile_in(xb, xrow, A->in_st[1], A->in_st[2], (uint64_t)C, (uint64_t)len, es);
    }
    for (int64_t j = 0; j < len; ++j) {
      const int64_t t = tg[j];
      const int valid = t != A->ignore && t >= 0 && t < C;
      if (!valid) {
        if (t != A->ignore && (flags & NLL_CHECK)) {
          mtia_wait_all();
          return NLL_STATUS_BAD_TARGET;
        }
        nll_put(x + j * es, es, 0);
        nll_put(w + j * es, es, 0);
        continue;
      }
      if (box) {
        nll_put(w + j * es, es, wb ? nll_get(wb + t * es, es) : one);
        continue;
      }
      d.dst = kaddr(x + j * es);
      d.src = xrow + (uint64_t)((j * A->in_st[2] + t * A->in_st[1]) * (int64_t)es);
      mtia_dma_start(&d);
      if (weighted) {
        d.dst = kaddr(w + j * es);
        d.src = A->weight + (uint64_t)(t * A->w_st * (int64_t)es);
        mtia_dma_start(&d);
      } else {
        nll_put(w + j * es, es, one);
      }
    }
    mtia_wait_all();
    if (box) {
      for (int64_t j = 0; j < len; ++j) {
        const int64_t t = tg[j];
        if (t != A->ignore && t >= 0 && t < C) {
          nll_put(x + j * es, es, nll_get(xb + (t * len + j) * es, es));
        }
      }
    }
    const uint32_t m = (uint32_t)len;
    kcast(dt, F, xf, x, m);
    kcast(dt, F, wf, w, m);
    kse(MTIA_PE_SE_MUL, F, F, pr, xf, wf, 0, m);
    {
      /* 0 - x * w: the loss, +0 where nothing is picked */
      mtia_pe_se_desc sd;
      MTIA_ZERO_(sd);
      sd.hdr = mtia_desc_header(MTIA_PE_DESC_SE, 0);
      sd.op = MTIA_PE_SE_SUB;
      sd.in_dtype = F;
      sd.out_dtype = F;
      sd.count = m;
      sd.mode[0] = MTIA_PE_OPND_IMMEDIATE;
      sd.src[1] = kaddr(pr);
      sd.dst = kaddr(pr);
      mtia_wait(mtia_se_op(&sd));
    }
    if (flags & NLL_SUMS) {
      kre(MTIA_PE_RE_SUM, F, F, 1, 1, &sums[0], pr, 1, m);
      kre(MTIA_PE_RE_SUM, F, F, 1, 1, &sums[1], wf, 1, m);
    }
    if (flags & NLL_PER_POS) {
      const void* res = pr;
      if (es != 4) {
        kcast(F, dt, stage, pr, m);
        res = stage;
      }
      ktile_out(A->out + (uint64_t)((n * A->out_st[0] + s0 * A->out_st[1]) * (int64_t)es), 0,
                A->out_st[1], res, 1, (uint64_t)len, es);
    }
  }
  if (flags & NLL_SUMS) {
    mtia_wait(mtia_dma_out(A->sums + mtia_pe_id() * 8, sums, 8));
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}

typedef struct {
  uint64_t grad_in, grad_out, target, weight, total_weight, dtype;
  int64_t flags, ignore, n, c, s;
  int64_t gi_st[3], go_st[2], tgt_st[2], w_st;
} nll_bwd_args;

MTIA_KERNEL(nll_loss_backward,
            "grad_in:ptr grad_out:ptr target:ptr weight:ptr total_weight:ptr dtype:dtype "
            "flags:i64 ignore_index:i64 n:i64 c:i64 s:i64 gi_st_n:i64 gi_st_c:i64 gi_st_s:i64 "
            "go_st_n:i64 go_st_s:i64 tgt_st_n:i64 tgt_st_s:i64 w_st:i64");
int nll_loss_backward(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(nll_bwd_args, A);
  if (((uint64_t)A->flags & ~(uint64_t)NLL_BWD_FLAGS) != 0) return MTIA_KSTATUS_BAD_OP;
  if (!kdt_is_float(A->dtype)) return MTIA_KSTATUS_BAD_DTYPE;
  const int64_t st[8] = {A->gi_st[0], A->gi_st[1],  A->gi_st[2],  A->go_st[0],
                         A->go_st[1], A->tgt_st[0], A->tgt_st[1], A->w_st};
  if (!nll_shape_ok(A->n, A->c, A->s, st, 8)) return MTIA_KSTATUS_BAD_SHAPE;
  const uint8_t dt = (uint8_t)A->dtype;
  const unsigned es = kdt_size(A->dtype);
  const int64_t N = A->n, C = A->c, S = A->s;
  const uint64_t flags = (uint64_t)A->flags;
  const uint8_t F = MTIA_PE_DT_FP32;
  if (N * S == 0) return MTIA_KSTATUS_OK;

  karena ar;
  karena_init(&ar);
  /* The scalar coefficient -(grad_out / total_weight) (or -grad_out), fp32. */
  uint8_t* sc = (uint8_t*)kalloc(&ar, 64);
  float* coef = (float*)kalloc(&ar, 64);
  const int box = (flags & NLL_BOX) != 0;
  if (box && C > NLL_BOX_MAX_CLASSES) return MTIA_KSTATUS_BAD_SHAPE;
  uint8_t* wb = 0; /* box: the weights */
  if (box && (flags & NLL_WEIGHT) && C > 0) {
    wb = (uint8_t*)kalloc(&ar, (uint64_t)C * es);
    if (!wb) return MTIA_KSTATUS_NO_LOCAL_STORE;
    mtia_wait(ktile_in(wb, A->weight, 0, A->w_st, 1, (uint64_t)C, es));
  }
  /* target, w, g, wf, gf, value, stage; box: a column of classes */
  const uint64_t per = 8 + es + es + 4 * 3 + es + (box ? (uint64_t)C * es : 0);
  if (!coef || karena_left(&ar) < 9 * 64 + 64 * per) return MTIA_KSTATUS_NO_LOCAL_STORE;
  const int64_t L = nll_chunk(karena_left(&ar) - 9 * 64, per, N * S, S);
  uint8_t* gb = box ? (uint8_t*)kalloc(&ar, (uint64_t)(C * L) * es + 8) : 0;
  int64_t* tg = (int64_t*)kalloc(&ar, (uint64_t)L * 8);
  uint8_t* w = (uint8_t*)kalloc(&ar, (uint64_t)L * es);
  uint8_t* g = (uint8_t*)kalloc(&ar, (uint64_t)L * es);
  float* wf = (float*)kalloc(&ar, (uint64_t)L * 4);
  float* gf = (float*)kalloc(&ar, (uint64_t)L * 4);
  float* v = (float*)kalloc(&ar, (uint64_t)L * 4);
  uint8_t* stage = (uint8_t*)kalloc(&ar, (uint64_t)L * es);
  if (!tg || !w || !g || !wf || !gf || !v || !stage || (box && !gb)) {
    return MTIA_KSTATUS_NO_LOCAL_STORE;
  }
  const int per_pos = (flags & NLL_PER_POS) != 0;
  if (!per_pos) {
    mtia_wait(mtia_dma_in(sc, A->grad_out, es));
    kcast(dt, F, coef, sc, 1);
    if (flags & NLL_MEAN) {
      mtia_wait(mtia_dma_in(sc, A->total_weight, es));
      kcast(dt, F, &coef[1], sc, 1);
      kse(MTIA_PE_SE_DIV, F, F, coef, coef, &coef[1], 0, 1);
    }
    kse(MTIA_PE_SE_NEG, F, F, coef, coef, 0, 0, 1);
  }
  mtia_pe_dma_desc din, dout;
  nll_elem_desc(&din, MTIA_PE_SPACE_LOCAL, MTIA_PE_SPACE_DEVICE, es);
  nll_elem_desc(&dout, MTIA_PE_SPACE_DEVICE, MTIA_PE_SPACE_LOCAL, es);
  const uint64_t one = nll_one(dt);
  const int weighted = (flags & NLL_WEIGHT) != 0;

  const int64_t per_n = (S + L - 1) / L;
  const uint64_t chunks = (uint64_t)(N * per_n);
  for (uint64_t k = mtia_pe_id(); k < chunks; k += mtia_num_pes()) {
    const int64_t n = (int64_t)(k / (uint64_t)per_n);
    const int64_t s0 = (int64_t)(k % (uint64_t)per_n) * L;
    const int64_t len = KMIN(L, S - s0);
    const uint32_t m = (uint32_t)len;
    mtia_wait_all(); /* the previous chunk's stores have left the stage */
    mtia_wait(ktile_in(tg, A->target + (uint64_t)((n * A->tgt_st[0] + s0 * A->tgt_st[1]) * 8), 0,
                       A->tgt_st[1], 1, (uint64_t)len, 8));
    if (per_pos) {
      ktile_in(g, A->grad_out + (uint64_t)((n * A->go_st[0] + s0 * A->go_st[1]) * (int64_t)es), 0,
               A->go_st[1], 1, (uint64_t)len, es);
    }
    for (int64_t j = 0; j < len; ++j) {
      const int64_t t = tg[j];
      if (t == A->ignore || t < 0 || t >= C) {
        nll_put(w + j * es, es, 0);
      } else if (wb) {
        nll_put(w + j * es, es, nll_get(wb + t * es, es));
      } else if (weighted) {
        din.dst = kaddr(w + j * es);
        din.src = A->weight + (uint64_t)(t * A->w_st * (int64_t)es);
        mtia_dma_start(&din);
      } else {
        nll_put(w + j * es, es, one);
      }
    }
    mtia_wait_all();
    kcast(dt, F, wf, w, m);
    if (per_pos) {
      /* -(w * g) */
      kcast(dt, F, gf, g, m);
      kse(MTIA_PE_SE_MUL, F, F, v, wf, gf, 0, m);
      kse(MTIA_PE_SE_NEG, F, F, v, v, 0, 0, m);
    } else {
      mtia_pe_se_desc sd;
      MTIA_ZERO_(sd);
      sd.hdr = mtia_desc_header(MTIA_PE_DESC_SE, 0);
      sd.op = MTIA_PE_SE_MUL;
      sd.in_dtype = F;
      sd.out_dtype = F;
      sd.count = m;
      sd.src[0] = kaddr(wf);
      sd.mode[1] = MTIA_PE_OPND_BROADCAST;
      sd.src[1] = kaddr(coef);
      sd.dst = kaddr(v);
      mtia_wait(mtia_se_op(&sd));
    }
    const uint8_t* res = (const uint8_t*)v;
    if (es != 4) {
      kcast(F, dt, stage, v, m);
      res = stage;
    }
    const uint64_t gi_row =
        A->grad_in + (uint64_t)((n * A->gi_st[0] + s0 * A->gi_st[2]) * (int64_t)es);
    if (box) {
      /* The whole [C, len] box: zeros and the picked gradients. */
      if (C == 0) continue;
      kse_fill(dt, gb, 0, (uint32_t)(C * len));
      for (int64_t j = 0; j < len; ++j) {
        const int64_t t = tg[j];
        if (t == A->ignore || t < 0 || t >= C) continue;
        nll_put(gb + (t * len + j) * es, es, nll_get(res + j * es, es));
      }
      ktile_out(gi_row, A->gi_st[1], A->gi_st[2], gb, (uint64_t)C, (uint64_t)len, es);
      continue;
    }
    for (int64_t j = 0; j < len; ++j) {
      const int64_t t = tg[j];
      if (t == A->ignore || t < 0 || t >= C) continue;
      dout.src = kaddr(res + j * es);
      dout.dst = gi_row + (uint64_t)((j * A->gi_st[2] + t * A->gi_st[1]) * (int64_t)es);
      mtia_dma_start(&dout);
    }
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}
