/* The freestanding runtime every kernel links: clang may lower struct copies and
 * initialisation to these calls even with -ffreestanding. */
#include <stddef.h>
#include <stdint.h>

/* Eight bytes at a time where both sides are 8-byte aligned (descriptors and most structs
 * are): every instruction costs core cycles, and a byte loop over a 128-byte DMA descriptor
 * would cost more than the kernel's own work. */
void* memset(void* dst, int c, size_t n) {
  unsigned char* d = (unsigned char*)dst;
  if (((uintptr_t)d & 7) == 0) {
    const uint64_t w = (uint64_t)(unsigned char)c * 0x0101010101010101ull;
    for (; n >= 8; n -= 8, d += 8) *(uint64_t*)d = w;
  }
  while (n-- > 0) *d++ = (unsigned char)c;
  return dst;
}

void* memcpy(void* restrict dst, const void* restrict src, size_t n) {
  unsigned char* d = (unsigned char*)dst;
  const unsigned char* s = (const unsigned char*)src;
  if ((((uintptr_t)d | (uintptr_t)s) & 7) == 0) {
    for (; n >= 8; n -= 8, d += 8, s += 8) *(uint64_t*)d = *(const uint64_t*)s;
  }
  while (n-- > 0) *d++ = *s++;
  return dst;
}

void* memmove(void* dst, const void* src, size_t n) {
  unsigned char* d = (unsigned char*)dst;
  const unsigned char* s = (const unsigned char*)src;
  if (d < s) {
    while (n-- > 0) *d++ = *s++;
  } else {
    while (n-- > 0) d[n] = s[n];
  }
  return dst;
}

int memcmp(const void* a, const void* b, size_t n) {
  const unsigned char* x = (const unsigned char*)a;
  const unsigned char* y = (const unsigned char*)b;
  for (size_t i = 0; i < n; ++i) {
    if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
  }
  return 0;
}
