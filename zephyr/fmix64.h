/* murmur3's 64-bit finalizer, shared by Zephyr's C kernels (minhash_kernel.c, bpe_kernel.c): every output
 * bit depends on every input bit. The MinHash kernel must give the bits of the numpy `fmix64`
 * (zephyr/fmix64.py) that zephyr/operators/minhash.py uses, so this is that function, written once. */
#ifndef ZEPHYR_FMIX64_H
#define ZEPHYR_FMIX64_H
#include <stdint.h>

static inline uint64_t fmix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDULL;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ULL;
    x ^= x >> 33;
    return x;
}

#endif
