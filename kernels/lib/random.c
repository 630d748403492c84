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
 * The core does the arithmetic (32 x 32 -> 64-bit products: RV64IM's mul): about 30
 * instructions a word. Each PE takes a contiguous share of the blocks and writes them through
 * two local buffers, the DMA taking one out while the core fills the other. */
#include "klib.h"
#include "ksig.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define PHILOX_BUF_WORDS 2048u /* per buffer; a multiple of 4 */

/* The four words of Philox-4x32-10 for counter c and key (k0, k1), into out[0..3]. */
static void philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                          uint32_t k1, uint32_t* out) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += PHILOX_W0;
      k1 += PHILOX_W1;
    }
    const uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
    const uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
    const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/* ---- philox --------------------------------------------------------------------------------
 * out[i] (int32, contiguous) for i < words: lane i % 4 of Philox(seed, {i / 4, stream}), the
 * seed a uint64 at device address `seed` (8-byte aligned). */
typedef struct {
  uint64_t out, seed, words, stream;
} philox_args;

MTIA_KERNEL(philox, "out:ptr seed:ptr words:i64 stream:i64");
int philox(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(philox_args, A);
  if ((A->seed & 7u) != 0 || (A->out & 3u) != 0) return MTIA_KSTATUS_BAD_SHAPE;
  if (A->words == 0) return MTIA_KSTATUS_OK;
  karena a;
  karena_init(&a);
  uint64_t* key = (uint64_t*)kalloc(&a, 8);
  uint32_t* buf[2];
  buf[0] = (uint32_t*)kalloc(&a, PHILOX_BUF_WORDS * 4u);
  buf[1] = (uint32_t*)kalloc(&a, PHILOX_BUF_WORDS * 4u);
  if (key == 0 || buf[0] == 0 || buf[1] == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;
  const uint64_t one = 1;
  const int64_t unit[1] = {1};
  mtia_wait(kdma_in(key, A->seed, unit, &one, 1, 8));
  const uint32_t k0 = (uint32_t)*key, k1 = (uint32_t)(*key >> 32);
  const uint32_t s0 = (uint32_t)A->stream, s1 = (uint32_t)(A->stream >> 32);

  /* This PE's blocks: [first, last) of the output's ceil(words / 4). */
  const uint64_t blocks = kceil_div(A->words, 4), pes = mtia_num_pes(), pe = mtia_pe_id();
  const uint64_t share = kceil_div(blocks, pes);
  const uint64_t first = KMIN(blocks, pe * share), last = KMIN(blocks, first + share);
  mtia_tag_t out_tag[2] = {0, 0};
  int which = 0;
  for (uint64_t b = first; b < last; b += PHILOX_BUF_WORDS / 4, which ^= 1) {
    const uint64_t nb = KMIN((uint64_t)(PHILOX_BUF_WORDS / 4), last - b);
    uint32_t* w = buf[which];
    mtia_wait(out_tag[which]); /* its last chunk has left */
    for (uint64_t j = 0; j < nb; ++j) {
      const uint64_t block = b + j;
      philox4x32_10((uint32_t)block, (uint32_t)(block >> 32), s0, s1, k0, k1, w + 4 * j);
    }
    const uint64_t word = 4 * b;
    const uint64_t n = KMIN(4 * nb, A->words - word); /* the last block may be partial */
    out_tag[which] = kdma_out(A->out + 4 * word, unit, w, &n, 1, 4);
  }
  mtia_wait_all();
  return MTIA_KSTATUS_OK;
}
