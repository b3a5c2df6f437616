/* Array arguments of Zephyr's C kernels (minhash_kernel.c, langid_kernel.c): a C-contiguous buffer checked to
 * hold whole items, so a numpy array of the wrong dtype fails with its name instead of being read misaligned.
 * Include after <Python.h>. */
#ifndef ZEPHYR_BUFFERS_H
#define ZEPHYR_BUFFERS_H
#include <Python.h>

/* `object`'s buffer into `view`, whose `len` must be a multiple of `item` bytes. Returns 0, or -1 with
 * BufferError/TypeError (not a C-contiguous buffer) or ValueError (`name`: not whole items) set. */
static int get_buffer(PyObject *object, Py_buffer *view, Py_ssize_t item, const char *name) {
    if (PyObject_GetBuffer(object, view, PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (view->len % item) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not a whole number of %zd-byte items", name, view->len, item);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

#endif
