/* Random bits on the device: Philox-4x32-10, the counter-based generator PyTorch's CUDA and
 * MTIA generators use, so that random ops can be captured in a graph and draw new numbers on
 * every replay (docs/tensor-layer.md, "Random numbers in graphs").
 *
 * Word i of the output is lane i % 4 of Philox(key = seed, counter = {block, stream}) with
 * block = i / 4 (low word first). The seed is read from device memory when the kernel runs,
 * not taken from the argument block: a graph's replay writes a new seed there before it runs
 * the captured launches, whose arguments stay as captured. `stream` tells the launches of one
 * graph apart, so two random ops of a replay never share a counter.
 *
 * The SE does the arithmetic, on vectors of 1024 counters at a time: each 32-bit word lives in
 * an int64 lane, a 32 x 32 -> 64-bit product is one int64 multiply, and its halves a shift and
 * a mask, so a round is 12 vector operations. The core only sets the counters up and bumps the
 * key. Each PE takes a contiguous share of the blocks; the DMA writes each lane's words to
 * every fourth output word straight from the int64 vectors (their low four bytes).
 *
 * Mode 1 writes uniform floats instead, as PyTorch's CPU kernel makes them from a word: its low
 * 24 bits times 2^-24, in [0, 1). Three more SE operations per lane, and the random ops built
 * on uniforms (rand, dropout, normal, ...) save the launches that would convert the words. */
#include "klib.h"
#include "ksig.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define PHILOX_LANES 1024u /* blocks per chunk */
#define PHILOX_LOW32 0xFFFFFFFFull

/* ---- philox --------------------------------------------------------------------------------
 * For i < words, w_i = lane i % 4 of Philox(seed, {i / 4, stream}), the seed a uint64 at
 * device address `seed` (8-byte aligned). Mode 0: out[i] = w_i (int32, contiguous); mode 1:
 * out[i] = (w_i & 0xFFFFFF) * 2^-24 (float32, contiguous). */
typedef struct {
  uint64_t out, seed, words, stream, mode;
} philox_args;

MTIA_KERNEL(philox, "out:ptr seed:ptr words:i64 stream:i64 mode:i64");
int philox(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(philox_args, A);
  if ((A->seed & 7u) != 0 || (A->out & 3u) != 0) return MTIA_KSTATUS_BAD_SHAPE;
  if (A->mode > 1) return MTIA_KSTATUS_BAD_OP;
  if (A->words == 0) return MTIA_KSTATUS_OK;
  karena a;
  karena_init(&a);
  uint64_t* key = (uint64_t*)kalloc(&a, 8);
  /* The four counter words, the round's two products, and the lane numbers 0..LANES-1. */
  int64_t* v[7];
  for (int i = 0; i < 7; ++i) v[i] = (int64_t*)kalloc(&a, PHILOX_LANES * 8u);
  if (key == 0 || v[6] == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;
  int64_t *c0 = v[0], *c1 = v[1], *c2 = v[2], *c3 = v[3], *p0 = v[4], *p1 = v[5], *lane = v[6];
  const uint64_t one = 1;
  const int64_t unit[1] = {1};
  mtia_wait(kdma_in(key, A->seed, unit, &one, 1, 8));
  for (uint32_t j = 0; j < PHILOX_LANES; ++j) lane[j] = (int64_t)j;
  const uint8_t I64 = MTIA_PE_DT_INT64;

  /* This PE's blocks: [first, last) of the output's ceil(words / 4). */
  const uint64_t blocks = kceil_div(A->words, 4), pes = mtia_num_pes(), pe = mtia_pe_id();
  const uint64_t share = kceil_div(blocks, pes);
  const uint64_t first = KMIN(blocks, pe * share), last = KMIN(blocks, first + share);
  for (uint64_t b = first; b < last; b += PHILOX_LANES) {
    const uint32_t nb = (uint32_t)KMIN((uint64_t)PHILOX_LANES, last - b);
    mtia_wait_all(); /* the previous chunk's words have left */
    /* Counter {block low, block high, stream low, stream high}, block = b + lane. */
    kse_imm(MTIA_PE_SE_ADD, I64, p0, lane, b, nb);
    kse_imm(MTIA_PE_SE_BAND, I64, c0, p0, PHILOX_LOW32, nb);
    kse_imm(MTIA_PE_SE_SHR, I64, c1, p0, 32, nb);
    kse_fill(I64, c2, A->stream & PHILOX_LOW32, nb);
    kse_fill(I64, c3, A->stream >> 32, nb);
    uint32_t k0 = (uint32_t)*key, k1 = (uint32_t)(*key >> 32);
    for (int round = 0; round < 10; ++round) {
      if (round > 0) {
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
      }
      const mtia_tag_t t0 = mtia_se_binary_imm(MTIA_PE_SE_MUL, I64, p0, c0, PHILOX_M0, nb);
      const mtia_tag_t t1 = mtia_se_binary_imm(MTIA_PE_SE_MUL, I64, p1, c2, PHILOX_M1, nb);
      mtia_wait(t0);
      mtia_wait(t1);
      /* c0' = hi(p1) ^ c1 ^ k0; c2' = hi(p0) ^ c3 ^ k1; c1' = lo(p1); c3' = lo(p0). A product
       * above 2^63 is negative as an int64: its shift brings sign bits, which the mask drops. */
      kse_imm(MTIA_PE_SE_SHR, I64, c0, p1, 32, nb);
      kse_imm(MTIA_PE_SE_BAND, I64, c0, c0, PHILOX_LOW32, nb);
      kse(MTIA_PE_SE_BXOR, I64, I64, c0, c0, c1, 0, nb);
      kse_imm(MTIA_PE_SE_BXOR, I64, c0, c0, k0, nb);
      kse_imm(MTIA_PE_SE_SHR, I64, c2, p0, 32, nb);
      kse_imm(MTIA_PE_SE_BAND, I64, c2, c2, PHILOX_LOW32, nb);
      kse(MTIA_PE_SE_BXOR, I64, I64, c2, c2, c3, 0, nb);
      kse_imm(MTIA_PE_SE_BXOR, I64, c2, c2, k1, nb);
      kse_imm(MTIA_PE_SE_BAND, I64, c1, p1, PHILOX_LOW32, nb);
      kse_imm(MTIA_PE_SE_BAND, I64, c3, p0, PHILOX_LOW32, nb);
    }
    /* Lane l's words are output words 4 (b + j) + l, every 16 bytes: the low halves of c_l,
     * or in mode 1 their uniforms, made through p0 (masked bits) into p1 (float32). */
    int64_t* const lanes[4] = {c0, c1, c2, c3};
    float* const u = (float*)(void*)p1;
    mtia_tag_t u_out = 0; /* the DMA still reading u */
    for (uint64_t l = 0; l < 4; ++l) {
      const uint64_t word = 4 * b + l;
      if (word >= A->words) break;
      const uint64_t n = KMIN((uint64_t)nb, (A->words - word + 3) / 4);
      const int64_t dst_st[1] = {16};
      if (A->mode == 0) {
        const int64_t src_st[1] = {8};
        kdma(A->out + 4 * word, MTIA_PE_SPACE_DEVICE, dst_st, kaddr(lanes[l]), MTIA_PE_SPACE_LOCAL,
             src_st, &n, 1, 4);
      } else {
        kse_imm(MTIA_PE_SE_BAND, I64, p0, lanes[l], 0xFFFFFFull, nb);
        mtia_wait(u_out);
        kcast(I64, MTIA_PE_DT_FP32, u, p0, nb);
        kse_imm(MTIA_PE_SE_MUL, MTIA_PE_DT_FP32, u, u, 0x33800000u /* 2^-24 */, nb);
        const int64_t src_st[1] = {4};
        u_out = kdma(A->out + 4 * word, MTIA_PE_SPACE_DEVICE, dst_st, kaddr(u), MTIA_PE_SPACE_LOCAL,
                     src_st, &n, 1, 4);
      }
    }
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}
