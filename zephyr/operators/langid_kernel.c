/* py3langid's two inner loops in C, for zephyr/operators/langid_native.py, which computes the rest of
 * py3langid's `classify` in numpy exactly as py3langid does and is tested against it bit for bit
 * (tests/operators/test_langid_native.py).
 *
 * `new_walker(nextmove, rows, output)` and `visit_counts(walker, texts)`: py3langid finds its byte n-gram
 * features with a DFA over the text's UTF-8 bytes (`visit_counts` in py3langid/langid.py: state =
 * nextmove[rows[state] * 256 + byte]; a state whose output is >= 0 visits that feature) and counts them
 * with a Counter. In Python that is ~0.15 us a byte, 45% of a page's classification (3,000 bytes, ~1 ms);
 * here ~10 ns, most of it waiting on the 40 MB transition table, so eight texts are walked side by side.
 * The features come out in the order they were first visited, which is the Counter's order, so the scores
 * sum in the same order. The walker checks the automaton once (every row and transition inside the
 * tables), so the walk itself needs no bounds checks.
 *
 * `gather_rows(table, features)`: the float16 rows of the model's feature x class table for the visited
 * features, as float32. py3langid indexes the float16 table with numpy (a float16 fancy index, then a
 * cast inside the matmul), 28% of the time; float16 -> float32 is exact, so the rows are the same numbers
 * and the matmul that follows is numpy's own, unchanged. Rows are prefetched a few features ahead.
 *
 * Built by setuptools from pyproject.toml (`pip install -e .` / `make install`); no numpy headers: arrays
 * come in through the buffer protocol and go out as bytes that numpy views.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buffers.h"
#include "grow.h"
#include "kernel_module.h"

/* ------------------------------------------------------------------------------ the walker */

/* The kernel keeps the GIL throughout, so one walker's scratch (slot, features, counts) serves every caller. */

typedef struct {
    Py_buffer nextmove; /* uint32: 256 transitions a row */
    Py_buffer rows;     /* uint32: each state's row of nextmove */
    Py_buffer output;   /* int32: each state's feature, -1 for none */
    int32_t *slot;      /* feature -> its place in the current text's list; -1 between calls */
    int64_t *features;  /* the current text's features, first visit first */
    uint32_t *counts;
    size_t features_capacity, counts_capacity;
} Walker;

static void walker_free(Walker *walker) {
    if (!walker) return;
    if (walker->nextmove.obj) PyBuffer_Release(&walker->nextmove);
    if (walker->rows.obj) PyBuffer_Release(&walker->rows);
    if (walker->output.obj) PyBuffer_Release(&walker->output);
    free(walker->slot);
    free(walker->features);
    free(walker->counts);
    free(walker);
}

static void capsule_destructor(PyObject *capsule) {
    walker_free((Walker *)PyCapsule_GetPointer(capsule, "zephyr.langid_walker"));
}

/* Every row inside nextmove, every transition to a state that exists, every output -1 or a feature.
 * Returns the number of features (largest output + 1), or -1 with ValueError set. */
static Py_ssize_t check_automaton(const uint32_t *nextmove, size_t n_transitions, const uint32_t *rows,
                                  const int32_t *output, size_t n_states) {
    size_t n_rows = n_transitions / 256;
    int32_t largest = -1;
    for (size_t s = 0; s < n_states; s++) {
        if (rows[s] >= n_rows) {
            PyErr_Format(PyExc_ValueError, "rows[%zu] = %u, but nextmove holds %zu rows of 256", s, rows[s], n_rows);
            return -1;
        }
        if (output[s] < -1) {
            PyErr_Format(PyExc_ValueError, "output[%zu] = %d: expected a feature index or -1", s, output[s]);
            return -1;
        }
        if (output[s] > largest) largest = output[s];
    }
    for (size_t i = 0; i < n_transitions; i++) {
        if (nextmove[i] >= n_states) {
            PyErr_Format(PyExc_ValueError, "nextmove[%zu] = %u, but there are %zu states", i, nextmove[i], n_states);
            return -1;
        }
    }
    return (Py_ssize_t)largest + 1;
}

PyDoc_STRVAR(new_walker_doc,
             "new_walker(nextmove, rows, output) -> walker\n\n"
             "py3langid's byte automaton: nextmove uint32 (256 transitions a row), rows uint32 (each state's row\n"
             "of nextmove), output int32 (each state's feature, -1 for none), one of rows and output per state;\n"
             "state 0 is the start. Checked once here (ValueError naming the first bad entry); the walker keeps\n"
             "the buffers for its lifetime.");

static PyObject *new_walker(PyObject *self, PyObject *args) {
    PyObject *nextmove_object, *rows_object, *output_object;
    if (!PyArg_ParseTuple(args, "OOO", &nextmove_object, &rows_object, &output_object)) return NULL;
    Walker *walker = calloc(1, sizeof(Walker));
    if (!walker) return PyErr_NoMemory();
    if (get_buffer(nextmove_object, &walker->nextmove, 4, "nextmove (uint32)") < 0) goto fail;
    if (get_buffer(rows_object, &walker->rows, 4, "rows (uint32)") < 0) goto fail;
    if (get_buffer(output_object, &walker->output, 4, "output (int32)") < 0) goto fail;
    size_t n_transitions = (size_t)walker->nextmove.len / 4, n_states = (size_t)walker->rows.len / 4;
    if (!n_transitions || n_transitions % 256 || !n_states || (size_t)walker->output.len / 4 != n_states) {
        PyErr_Format(PyExc_ValueError,
                     "new_walker expects nextmove of whole 256-transition rows and one row and one output per "
                     "state, got %zu transitions, %zu rows, %zd outputs",
                     n_transitions, n_states, walker->output.len / 4);
        goto fail;
    }
    Py_ssize_t n_features = check_automaton(walker->nextmove.buf, n_transitions, walker->rows.buf,
                                            walker->output.buf, n_states);
    if (n_features < 0) goto fail;
    walker->slot = malloc(((size_t)n_features + 1) * sizeof(int32_t));
    if (!walker->slot) {
        PyErr_NoMemory();
        goto fail;
    }
    memset(walker->slot, 0xFF, ((size_t)n_features + 1) * sizeof(int32_t)); /* all -1 */
    PyObject *capsule = PyCapsule_New(walker, "zephyr.langid_walker", capsule_destructor);
    if (capsule) return capsule;
fail:
    walker_free(walker);
    return NULL;
}

/* Texts walked side by side: each step of a walk waits for a load from the 40 MB transition table, which a
 * busy cache misses, so eight independent walks keep eight loads in flight instead of one. Measured on the
 * real pages (load 2.3): 23 ns a byte one text at a time, 13 with 4 lanes, 8-11 with 8, 11-15 with 16. */
#define LANES 8

typedef struct {
    Py_buffer text;
    size_t size;
    int32_t *trail; /* the features visited, in order, repeats included */
    size_t trail_capacity, visited;
} Lane;

/* Walk up to LANES texts side by side, each lane's visits into its trail. */
static void walk_lanes(const Walker *walker, Lane *lanes, int n_lanes, size_t longest) {
    const uint32_t *nextmove = walker->nextmove.buf, *rows = walker->rows.buf;
    const int32_t *output = walker->output.buf;
    uint32_t state[LANES] = {0};
    for (size_t i = 0; i < longest; i++) {
        for (int j = 0; j < n_lanes; j++) {
            Lane *lane = &lanes[j];
            if (i >= lane->size) continue;
            state[j] = nextmove[(size_t)rows[state[j]] * 256 + ((const unsigned char *)lane->text.buf)[i]];
            int32_t feature = output[state[j]];
            if (feature >= 0) lane->trail[lane->visited++] = feature;
        }
    }
}

/* One lane's trail counted into walker->features / counts from `n` on: first visit first. Returns the new n. */
static size_t count_trail(Walker *walker, const Lane *lane, size_t n) {
    int32_t *slot = walker->slot;
    int64_t *features = walker->features;
    uint32_t *counts = walker->counts;
    size_t first = n;
    for (size_t v = 0; v < lane->visited; v++) {
        int32_t feature = lane->trail[v], at = slot[feature];
        if (at < 0) {
            slot[feature] = (int32_t)(n - first);
            features[n] = feature;
            counts[n++] = 1;
        } else {
            counts[first + (size_t)at]++;
        }
    }
    for (size_t k = first; k < n; k++) slot[features[k]] = -1;
    return n;
}

PyDoc_STRVAR(visit_counts_doc,
             "visit_counts(walker, texts) -> (features, counts, sizes)\n\n"
             "For each of `texts` (bytes-like objects: py3langid's encoded texts) the features the automaton\n"
             "visits over its bytes, each once, in the order of their first visit, back to back (int64 bytes);\n"
             "how often each is visited (float32 bytes, as py3langid's np.fromiter(counter.values(), float32)\n"
             "has them); and how many features each text has (int64 bytes).");

static PyObject *visit_counts(PyObject *self, PyObject *args) {
    PyObject *sequence;
    Walker *walker = handle_and_texts(args, "visit_counts", "zephyr.langid_walker", "a walker", "new_walker",
                                      "visit_counts expects a sequence of bytes-like texts", &sequence);
    if (!walker) return NULL;
    Py_ssize_t n_texts = PySequence_Fast_GET_SIZE(sequence);
    Lane lanes[LANES];
    memset(lanes, 0, sizeof(lanes));
    PyObject *sizes = PyBytes_FromStringAndSize(NULL, n_texts * 8), *result = NULL;
    size_t n = 0;
    if (!sizes) goto done;
    int64_t *size_of = (int64_t *)PyBytes_AS_STRING(sizes);
    for (Py_ssize_t group = 0; group < n_texts; group += LANES) {
        int n_lanes = (int)(n_texts - group < LANES ? n_texts - group : LANES);
        size_t longest = 0, total = 0;
        for (int j = 0; j < n_lanes; j++) {
            Lane *lane = &lanes[j];
            PyObject *text = PySequence_Fast_GET_ITEM(sequence, group + j);
            if (PyObject_GetBuffer(text, &lane->text, PyBUF_SIMPLE) < 0) {
                if (PyErr_ExceptionMatches(PyExc_TypeError))
                    PyErr_Format(PyExc_TypeError, "texts[%zd] is a %s, expected a bytes-like object (the encoded text)",
                                 group + j, Py_TYPE(text)->tp_name);
                goto done;
            }
            lane->size = (size_t)lane->text.len;
            lane->visited = 0;
            if (lane->size > longest) longest = lane->size;
            total += lane->size;
            /* at most one visit a byte */
            if (grow((void **)&lane->trail, &lane->trail_capacity, lane->size, sizeof(int32_t), 4096) < 0) goto done;
        }
        if (grow((void **)&walker->features, &walker->features_capacity, n + total, sizeof(int64_t), 4096) < 0 ||
            grow((void **)&walker->counts, &walker->counts_capacity, n + total, sizeof(uint32_t), 4096) < 0)
            goto done;
        walk_lanes(walker, lanes, n_lanes, longest);
        for (int j = 0; j < n_lanes; j++) {
            size_t before = n;
            n = count_trail(walker, &lanes[j], n);
            size_of[group + j] = (int64_t)(n - before);
            PyBuffer_Release(&lanes[j].text);
        }
    }
    PyObject *features = PyBytes_FromStringAndSize((const char *)walker->features, (Py_ssize_t)(n * 8));
    PyObject *counts = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 4));
    if (!features || !counts) {
        Py_XDECREF(features);
        Py_XDECREF(counts);
        goto done;
    }
    float *count_of = (float *)PyBytes_AS_STRING(counts);
    for (size_t k = 0; k < n; k++) count_of[k] = (float)walker->counts[k];
    result = Py_BuildValue("(NNO)", features, counts, sizes);
done:
    for (int j = 0; j < LANES; j++) {
        if (lanes[j].text.obj) PyBuffer_Release(&lanes[j].text);
        free(lanes[j].trail);
    }
    Py_XDECREF(sizes);
    Py_DECREF(sequence);
    return result;
}

/* ------------------------------------------------------------------------------ the table's rows */

/* The float32 of a float16's bits, exactly, in integers only (no reliance on the FPU's denormal mode). */
static inline uint32_t half_to_float_bits(uint16_t half) {
    uint32_t sign = (uint32_t)(half & 0x8000) << 16, exponent = (half >> 10) & 0x1F, mantissa = half & 0x3FF;
    if (exponent == 0x1F) return sign | 0x7F800000u | (mantissa << 13); /* inf, nan (payload kept) */
    if (exponent) return sign | ((exponent + 112) << 23) | (mantissa << 13);
    if (!mantissa) return sign;
    /* subnormal: mantissa * 2^-24, normalized */
    int shift = 0;
    while (!(mantissa & 0x400)) {
        mantissa <<= 1;
        shift++;
    }
    return sign | ((uint32_t)(113 - shift) << 23) | ((mantissa & 0x3FF) << 13);
}

static void halves_to_floats(const uint16_t *half, size_t n, uint32_t *out) {
    for (size_t i = 0; i < n; i++) out[i] = half_to_float_bits(half[i]);
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define HAVE_F16C_PATH 1
/* The same conversion by the F16C instruction (exact too; NaN payloads kept), eight at a time: ~10x faster
 * than the integer version, which is what a row of 142 classes spends its time on. */
__attribute__((target("avx,f16c"))) static void halves_to_floats_f16c(const uint16_t *half, size_t n, uint32_t *out) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i eight = _mm_loadu_si128((const __m128i *)(half + i));
        _mm256_storeu_ps((float *)(out + i), _mm256_cvtph_ps(eight));
    }
    for (; i < n; i++) out[i] = half_to_float_bits(half[i]);
}
#endif

PyDoc_STRVAR(gather_rows_doc,
             "gather_rows(table, features) -> bytes\n\n"
             "Rows `features` (int64) of `table` (a C-contiguous 2-d float16 array), as len(features) x\n"
             "table.shape[1] float32 bytes: numpy's table[features].astype(float32), exactly.");

static PyObject *gather_rows(PyObject *self, PyObject *args) {
    PyObject *table_object, *features_object;
    if (!PyArg_ParseTuple(args, "OO", &table_object, &features_object)) return NULL;
    Py_buffer table = {0}, features = {0};
    PyObject *result = NULL;
    if (PyObject_GetBuffer(table_object, &table, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    if (table.ndim != 2 || table.itemsize != 2 || !table.format || strcmp(table.format, "e") != 0) {
        PyErr_Format(PyExc_ValueError,
                     "gather_rows expects a 2-d float16 table (format 'e'), got %d dimensions of format '%s'",
                     table.ndim, table.format ? table.format : "B");
        goto done;
    }
    if (get_buffer(features_object, &features, 8, "features (int64)") < 0) goto done;
    size_t n = (size_t)features.len / 8, n_rows = (size_t)table.shape[0], width = (size_t)table.shape[1];
    const int64_t *feature = features.buf;
    for (size_t k = 0; k < n; k++) {
        if (feature[k] < 0 || (size_t)feature[k] >= n_rows) {
            PyErr_Format(PyExc_IndexError, "features[%zu] = %lld is outside the table's %zu rows", k,
                         (long long)feature[k], n_rows);
            goto done;
        }
    }
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * width * 4));
    if (!result) goto done;
    uint32_t *out = (uint32_t *)PyBytes_AS_STRING(result);
    const uint16_t *halves = table.buf;
    void (*convert)(const uint16_t *, size_t, uint32_t *) = halves_to_floats;
#ifdef HAVE_F16C_PATH
    if (__builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c")) convert = halves_to_floats_f16c;
#endif
    for (size_t k = 0; k < n; k++) {
        if (k + 8 < n) {
            const char *ahead = (const char *)(halves + (size_t)feature[k + 8] * width);
            for (size_t b = 0; b < width * 2; b += 64) __builtin_prefetch(ahead + b);
        }
        convert(halves + (size_t)feature[k] * width, width, out + k * width);
    }
done:
    PyBuffer_Release(&table);
    if (features.obj) PyBuffer_Release(&features);
    return result;
}

static PyMethodDef methods[] = {
    {"new_walker", new_walker, METH_VARARGS, new_walker_doc},
    {"visit_counts", visit_counts, METH_VARARGS, visit_counts_doc},
    {"gather_rows", gather_rows, METH_VARARGS, gather_rows_doc},
    {NULL, NULL, 0, NULL},
};

KERNEL_MODULE("langid_kernel", "py3langid's DFA walk and row gather in C (see zephyr.operators.langid_native).");

PyMODINIT_FUNC PyInit_langid_kernel(void) { return PyModule_Create(&module); }
