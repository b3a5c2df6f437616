/* What every C kernel of Zephyr (extract_kernel.c, langid_kernel.c, minhash_kernel.c, quality_kernel.c,
 * bpe_kernel.c) declares the same way: its module object, and the (handle, texts) arguments of a batch call
 * such as visit_counts(walker, texts) or encode_many(encoder, texts), so that a wrong handle fails with the same
 * TypeError naming the function that makes the right one. Include after <Python.h>. */
#ifndef ZEPHYR_KERNEL_MODULE_H
#define ZEPHYR_KERNEL_MODULE_H
#include <Python.h>

/* `static struct PyModuleDef module`: single-phase initialisation, no per-module state, the functions of the
 * file's `methods` table. PyInit_<NAME> returns PyModule_Create(&module) once its tables are ready. */
#define KERNEL_MODULE(NAME, DOC)                                                                                 \
    static struct PyModuleDef module = {                                                                         \
        PyModuleDef_HEAD_INIT, .m_name = NAME, .m_doc = DOC, .m_size = -1, .m_methods = methods,                 \
    }

/* The arguments (handle, texts) of `function`: returns the pointer held by `handle`, a capsule named
 * `capsule_name` that `maker` returns (`made` says what it is, e.g. "a walker"), and sets `*sequence` to `texts`
 * as a fast sequence (a new reference). Returns NULL with TypeError set: `handle` is not such a capsule, or
 * `texts` not a sequence (`texts_error`, the message). */
static inline void *handle_and_texts(PyObject *args, const char *function, const char *capsule_name, const char *made,
                                     const char *maker, const char *texts_error, PyObject **sequence) {
    PyObject *handle, *texts;
    if (!PyArg_ParseTuple(args, "OO", &handle, &texts)) return NULL;
    if (!PyCapsule_IsValid(handle, capsule_name)) {
        PyErr_Format(PyExc_TypeError, "%s expects %s from %s(), got %s", function, made, maker,
                     Py_TYPE(handle)->tp_name);
        return NULL;
    }
    void *pointer = PyCapsule_GetPointer(handle, capsule_name);
    *sequence = PySequence_Fast(texts, texts_error);
    return *sequence ? pointer : NULL;
}

#endif
