/* Growable arrays, shared by Zephyr's C kernels (minhash_kernel.c, bpe_kernel.c): the capacity doubles from a
 * first size, so n appends cost O(n) copies in all, and a failed realloc raises MemoryError and leaves the old
 * block valid (the caller frees it as usual). Include after <Python.h>. */
#ifndef ZEPHYR_GROW_H
#define ZEPHYR_GROW_H
#include <Python.h>
#include <stdlib.h>

/* `*block`, `*capacity` elements of `element_size` bytes, grown to hold `needed` (from `first` elements when it
 * is empty). Returns 0, or -1 with MemoryError set. */
static int grow(void **block, size_t *capacity, size_t needed, size_t element_size, size_t first) {
    if (needed <= *capacity) return 0;
    size_t grown = *capacity ? *capacity : first;
    while (grown < needed) grown *= 2;
    void *data = realloc(*block, grown * element_size);
    if (!data) {
        PyErr_NoMemory();
        return -1;
    }
    *block = data;
    *capacity = grown;
    return 0;
}

#endif
