/* MinHash sketches of many texts in one call: normalization, word hashes, shingles, signatures and
 * sorted shingle sets, in C.
 *
 * Why: the same work in numpy (zephyr/operators/minhash.py, kept as the reference and the fallback)
 * spends most of its time on whole-batch temporaries and on a regex over the UTF-8 bytes; here each
 * text is scanned once, its words hashed as they are found, and every permutation's minimum kept
 * in L1. The output is bit-identical to the numpy path (tests/operators/test_minhash.py compares
 * them), so signatures, LSH keys and dedup decisions do not depend on which one ran.
 *
 * Built by setuptools from pyproject.toml (`pip install -e .` / `make install`); no numpy headers:
 * arrays come in through the buffer protocol and go out as bytes that numpy views.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buffers.h"
#include "fmix64.h"
#include "grow.h"
#include "kernel_module.h"

#define CHUNK_SALT 0x9E3779B97F4A7C15ULL
#define WORD_LENGTH_MULTIPLIER 0xD6E8FEB86659FD93ULL
#define VECTOR_CHUNKS 32 /* words up to 256 bytes are hashed 8 bytes a round; longer ones whole by xxh3 */
#define EMPTY_HASH 0xFFFFFFFFu

/* ------------------------------------------------------------------------------ growable buffers */

typedef struct {
    void *data;
    size_t size; /* bytes */
} Buffer;

static int reserve(Buffer *buffer, size_t bytes) { return grow(&buffer->data, &buffer->size, bytes, 1, 4096); }

/* ------------------------------------------------------------------------------ words */

/* The 8 bytes of `word` from `offset` as a little-endian integer, zero beyond `length`. */
static inline uint64_t chunk_at(const unsigned char *word, size_t length, size_t offset) {
    uint64_t value = 0;
    size_t remaining = length - offset;
    if (remaining >= 8) {
        memcpy(&value, word + offset, 8); /* x86 and ARM little-endian: the numpy path's "<u8" */
    } else {
        memcpy(&value, word + offset, remaining);
    }
    return value;
}

typedef struct {
    PyObject *long_word_hash; /* xxhash.xxh3_64_intdigest */
    Py_ssize_t long_words;
} WordContext;

/* The numpy path's word hash (minhash._word_tokens), for one word. Returns -1 on a Python error. */
static int word_token(const unsigned char *word, size_t length, WordContext *context, uint64_t *out) {
    uint64_t hash = fmix64(chunk_at(word, length, 0) ^ CHUNK_SALT) ^ ((uint64_t)length * WORD_LENGTH_MULTIPLIER);
    size_t index = 1;
    while (length > 8 * index && index < VECTOR_CHUNKS) {
        uint64_t more = fmix64(chunk_at(word, length, 8 * index) ^ (CHUNK_SALT * (uint64_t)(index + 1)));
        hash = fmix64(hash + more);
        index++;
    }
    if (length > 8 * VECTOR_CHUNKS) {
        PyObject *value = PyObject_CallFunction(context->long_word_hash, "y#", (const char *)word, (Py_ssize_t)length);
        if (!value) return -1;
        uint64_t whole = PyLong_AsUnsignedLongLong(value);
        Py_DECREF(value);
        if (whole == (uint64_t)-1 && PyErr_Occurred()) return -1;
        hash = fmix64(hash + whole);
        context->long_words++;
    }
    *out = fmix64(hash);
    return 0;
}

/* ASCII: separators (not a letter or digit) to space, upper case to lower: minhash._ascii_table. */
static unsigned char ASCII_TABLE[128];

static void init_ascii_table(void) {
    for (int b = 0; b < 128; b++) {
        int alnum = (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z');
        ASCII_TABLE[b] = !alnum ? ' ' : (b >= 'A' && b <= 'Z') ? (unsigned char)(b + 32) : (unsigned char)b;
    }
}

/* Normalize the ASCII `text` into `out`: through the table. */
static size_t normalize_ascii(const unsigned char *text, size_t size, unsigned char *out) {
    for (size_t i = 0; i < size; i++) out[i] = ASCII_TABLE[text[i]];
    return size;
}

#define NO_SIMPLE_LOWER 0xFFFFFFFFu

typedef struct {
    const unsigned char *separators; /* one bit per code point of the plane: minhash._is_separator */
    const uint32_t *lower_bmp;       /* str.lower() of each code point of the plane, one code point, or
                                        NO_SIMPLE_LOWER (U+0130, final-sigma U+03A3, surrogates) */
    const uint32_t *lower_astral;    /* (code point, its lowercase) pairs beyond the plane, sorted */
    size_t n_astral;
} Tables;

static uint32_t lower_astral(const Tables *tables, uint32_t code) {
    size_t lo = 0, hi = tables->n_astral;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint32_t key = tables->lower_astral[2 * mid];
        if (key == code) return tables->lower_astral[2 * mid + 1];
        if (key < code) lo = mid + 1;
        else hi = mid;
    }
    return code;
}

/* Lowercase and normalize a non-ASCII str into UTF-8 `out` (4 bytes per character at most), as
 * `text.lower().encode("utf-8")` then minhash's separator regex and ASCII table would: the lowered
 * character, when it is a separator, becomes one space. Returns the length, or -1 when a character's
 * lowercase is not one code point of its own (U+0130; U+03A3, whose lowercase depends on its
 * neighbours; a lone surrogate): the caller then runs str.lower() itself. */
static Py_ssize_t normalize_unicode(PyObject *text, const Tables *tables, unsigned char *out) {
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t length = PyUnicode_GET_LENGTH(text), n = 0;
    for (Py_ssize_t i = 0; i < length; i++) {
        uint32_t code = PyUnicode_READ(kind, data, i);
        if (code < 0x80) {
            out[n++] = ASCII_TABLE[code];
            continue;
        }
        code = code < 0x10000 ? tables->lower_bmp[code] : lower_astral(tables, code);
        if (code == NO_SIMPLE_LOWER) return -1;
        if (code < 0x80) {
            out[n++] = ASCII_TABLE[code];
        } else if (code < 0x800) {
            if ((tables->separators[code >> 3] >> (code & 7)) & 1) {
                out[n++] = ' ';
                continue;
            }
            out[n++] = (unsigned char)(0xC0 | (code >> 6));
            out[n++] = (unsigned char)(0x80 | (code & 0x3F));
        } else if (code < 0x10000) {
            if ((tables->separators[code >> 3] >> (code & 7)) & 1) {
                out[n++] = ' ';
                continue;
            }
            out[n++] = (unsigned char)(0xE0 | (code >> 12));
            out[n++] = (unsigned char)(0x80 | ((code >> 6) & 0x3F));
            out[n++] = (unsigned char)(0x80 | (code & 0x3F));
        } else {
            out[n++] = (unsigned char)(0xF0 | (code >> 18));
            out[n++] = (unsigned char)(0x80 | ((code >> 12) & 0x3F));
            out[n++] = (unsigned char)(0x80 | ((code >> 6) & 0x3F));
            out[n++] = (unsigned char)(0x80 | (code & 0x3F));
        }
    }
    return n;
}

/* The slow path for texts normalize_unicode declines: str.lower(), its UTF-8 (raising on a lone
 * surrogate, as the numpy path's encode does), then the same per-character rule. */
static Py_ssize_t normalize_lowered(PyObject *text, const Tables *tables, Buffer *buffer) {
    PyObject *lowered = PyObject_CallMethod(text, "lower", NULL);
    if (!lowered) return -1;
    Py_ssize_t size;
    const unsigned char *utf8 = (const unsigned char *)PyUnicode_AsUTF8AndSize(lowered, &size);
    if (!utf8 || reserve(buffer, (size_t)size + 1) < 0) {
        Py_DECREF(lowered);
        return -1;
    }
    unsigned char *out = (unsigned char *)buffer->data;
    Py_ssize_t i = 0, n = 0;
    while (i < size) {
        unsigned char byte = utf8[i];
        if (byte < 0x80) {
            out[n++] = ASCII_TABLE[byte];
            i++;
            continue;
        }
        Py_ssize_t width = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : 2;
        uint32_t code = 0x10000; /* beyond the plane: never a separator */
        if (width == 2) code = ((uint32_t)(byte & 0x1F) << 6) | (utf8[i + 1] & 0x3F);
        if (width == 3) code = ((uint32_t)(byte & 0x0F) << 12) | ((uint32_t)(utf8[i + 1] & 0x3F) << 6) | (utf8[i + 2] & 0x3F);
        if (code < 0x10000 && (tables->separators[code >> 3] >> (code & 7)) & 1) {
            out[n++] = ' ';
        } else {
            memcpy(out + n, utf8 + i, (size_t)width);
            n += width;
        }
        i += width;
    }
    Py_DECREF(lowered);
    return n;
}

/* ------------------------------------------------------------------------------ MinHash */

#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

/* signature[i] = min over shingles of (a[i] * (shingle >> 32) + b[i]) mod 2^32. */
VECTOR_CLONES
static void min_hash(const uint64_t *shingles, size_t count, const uint32_t *restrict a, const uint32_t *restrict b,
                     size_t num_perm, uint32_t *restrict signature) {
    for (size_t i = 0; i < num_perm; i++) signature[i] = EMPTY_HASH;
    for (size_t s = 0; s < count; s++) {
        uint32_t h = (uint32_t)(shingles[s] >> 32);
        for (size_t i = 0; i < num_perm; i++) {
            uint32_t v = a[i] * h + b[i];
            signature[i] = v < signature[i] ? v : signature[i];
        }
    }
}

/* ------------------------------------------------------------------------------ sorting */

static inline void insertion_sort(uint64_t *v, size_t n) {
    for (size_t i = 1; i < n; i++) {
        uint64_t x = v[i];
        size_t j = i;
        while (j > 0 && v[j - 1] > x) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
}

/* In-place quicksort (median of three, insertion sort below 24 elements, recursion on the smaller
 * side): inlined comparisons are ~3x faster than qsort's callback on a document's few hundred hashes. */
static void sort_u64(uint64_t *v, size_t n) {
    while (n > 24) {
        uint64_t x = v[0], y = v[n / 2], z = v[n - 1];
        uint64_t pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        size_t i = 0, j = n - 1;
        for (;;) {
            while (v[i] < pivot) i++;
            while (v[j] > pivot) j--;
            if (i >= j) break;
            uint64_t t = v[i];
            v[i] = v[j];
            v[j] = t;
            i++;
            j--;
        }
        size_t left = j + 1; /* v[0..j] <= pivot <= v[j+1..n-1] */
        if (left < n - left) {
            sort_u64(v, left);
            v += left;
            n -= left;
        } else {
            sort_u64(v + left, n - left);
            n = left;
        }
    }
    insertion_sort(v, n);
}

/* Sort `n` shingle hashes: one counting pass by their top bits into ~n/2 buckets (the hashes are
 * uniform, so a bucket holds a few), then each bucket by insertion sort, or quicksort when it is large
 * (a text repeating itself repeats hashes). ~2x faster than quicksort alone on a document's hashes. */
static int sort_hashes(uint64_t *v, size_t n, Buffer *scratch, Buffer *histogram) {
    if (n <= 32) {
        insertion_sort(v, n);
        return 0;
    }
    int bits = 1;
    while (bits < 16 && ((size_t)1 << (bits + 1)) <= n) bits++;
    size_t buckets = (size_t)1 << bits;
    if (reserve(scratch, n * 8) < 0 || reserve(histogram, (buckets + 1) * sizeof(size_t)) < 0) return -1;
    uint64_t *out = (uint64_t *)scratch->data;
    size_t *start = (size_t *)histogram->data;
    memset(start, 0, (buckets + 1) * sizeof(size_t));
    int shift = 64 - bits;
    for (size_t i = 0; i < n; i++) start[(v[i] >> shift) + 1]++;
    for (size_t k = 0; k < buckets; k++) start[k + 1] += start[k];
    for (size_t i = 0; i < n; i++) out[start[v[i] >> shift]++] = v[i]; /* start[k] ends as bucket k's end */
    size_t begin = 0;
    for (size_t k = 0; k < buckets; k++) {
        size_t size = start[k] - begin;
        if (size > 32) sort_u64(out + begin, size);
        else if (size > 1) insertion_sort(out + begin, size);
        begin = start[k];
    }
    memcpy(v, out, n * 8);
    return 0;
}

/* ------------------------------------------------------------------------------ sketch() */

PyDoc_STRVAR(sketch_doc,
             "sketch(texts, separators, lower_bmp, lower_astral, ngram_coeffs, a, b, cap, with_sets, long_word_hash)\n"
             "-> (signatures, shingle counts, set values, set counts, (long words, documents capped, tokens "
             "not shingled))\n\n"
             "Word n-gram MinHash of each text, bit-identical to zephyr.operators.minhash's numpy path.\n"
             "Arrays come as buffers (uint64 ngram_coeffs, uint32 a and b) and go out as bytes: signatures\n"
             "len(texts) x len(a) uint32, counts int64, and with `with_sets` every text's sorted distinct\n"
             "64-bit shingle hashes back to back (uint64) and how many each has (int64); else None, None.");

static PyObject *sketch(PyObject *self, PyObject *args) {
    PyObject *texts, *separators_object, *lower_bmp_object, *lower_astral_object, *coeffs_object, *a_object,
        *b_object, *long_word_hash;
    Py_ssize_t cap;
    int with_sets;
    if (!PyArg_ParseTuple(args, "OOOOOOOnpO", &texts, &separators_object, &lower_bmp_object, &lower_astral_object,
                          &coeffs_object, &a_object, &b_object, &cap, &with_sets, &long_word_hash))
        return NULL;
    PyObject *sequence = PySequence_Fast(texts, "texts must be a sequence of str");
    if (!sequence) return NULL;
    Py_ssize_t n_texts = PySequence_Fast_GET_SIZE(sequence);
    Py_buffer separators = {0}, lower_bmp = {0}, lower_astral_pairs = {0}, coeffs = {0}, a = {0}, b = {0};
    Tables tables;
    Buffer normalized = {0}, tokens = {0}, shingles = {0}, values = {0}, scratch = {0}, histogram = {0};
    PyObject *signatures = NULL, *counts = NULL, *set_counts = NULL, *result = NULL;
    WordContext context = {long_word_hash, 0};
    Py_ssize_t capped = 0, not_shingled = 0;
    size_t n_values = 0;

    if (get_buffer(separators_object, &separators, 1, "separators") < 0) goto done;
    if (separators.len != 0x10000 / 8) {
        PyErr_SetString(PyExc_ValueError, "separators must hold one bit per code point of the plane (8192 bytes)");
        goto done;
    }
    if (get_buffer(lower_bmp_object, &lower_bmp, 4, "lower_bmp") < 0) goto done;
    if (get_buffer(lower_astral_object, &lower_astral_pairs, 8, "lower_astral") < 0) goto done;
    if (lower_bmp.len != 0x10000 * 4) {
        PyErr_SetString(PyExc_ValueError, "lower_bmp must hold one uint32 per code point of the plane");
        goto done;
    }
    tables.separators = (const unsigned char *)separators.buf;
    tables.lower_bmp = (const uint32_t *)lower_bmp.buf;
    tables.lower_astral = (const uint32_t *)lower_astral_pairs.buf;
    tables.n_astral = (size_t)(lower_astral_pairs.len / 8);
    if (get_buffer(coeffs_object, &coeffs, 8, "ngram_coeffs") < 0) goto done;
    if (get_buffer(a_object, &a, 4, "a") < 0) goto done;
    if (get_buffer(b_object, &b, 4, "b") < 0) goto done;
    size_t ngram = (size_t)(coeffs.len / 8), num_perm = (size_t)(a.len / 4);
    if (ngram < 1 || (size_t)(b.len / 4) != num_perm || cap < 1) {
        PyErr_SetString(PyExc_ValueError, "need ngram_coeffs of >= 1 item, a and b of one length, cap >= 1");
        goto done;
    }
    const uint64_t *C = (const uint64_t *)coeffs.buf;
    signatures = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n_texts * num_perm * 4));
    counts = PyBytes_FromStringAndSize(NULL, n_texts * 8);
    if (with_sets) set_counts = PyBytes_FromStringAndSize(NULL, n_texts * 8);
    if (!signatures || !counts || (with_sets && !set_counts)) goto done;
    uint32_t *signature_rows = (uint32_t *)PyBytes_AS_STRING(signatures);
    int64_t *count_of = (int64_t *)PyBytes_AS_STRING(counts);
    int64_t *set_count_of = with_sets ? (int64_t *)PyBytes_AS_STRING(set_counts) : NULL;

    for (Py_ssize_t t = 0; t < n_texts; t++) {
        PyObject *text = PySequence_Fast_GET_ITEM(sequence, t);
        if (!PyUnicode_Check(text)) {
            PyErr_Format(PyExc_TypeError, "texts[%zd] is a %s, expected str", t, Py_TYPE(text)->tp_name);
            goto done;
        }
        Py_ssize_t size = PyUnicode_GET_LENGTH(text), length;
        if (reserve(&normalized, 4 * (size_t)size + 1) < 0) goto done;
        if (PyUnicode_IS_ASCII(text)) {
            length = (Py_ssize_t)normalize_ascii((const unsigned char *)PyUnicode_DATA(text), (size_t)size,
                                                 (unsigned char *)normalized.data);
        } else {
            length = normalize_unicode(text, &tables, (unsigned char *)normalized.data);
            if (length < 0) length = normalize_lowered(text, &tables, &normalized);
            if (length < 0) goto done;
        }
        const unsigned char *norm = (const unsigned char *)normalized.data;

        /* words -> tokens, the first `cap` of them */
        size_t n_tokens = 0, n_words = 0;
        size_t i = 0, end = (size_t)length;
        while (i < end) {
            while (i < end && norm[i] <= 32) i++;
            if (i >= end) break;
            size_t start = i;
            while (i < end && norm[i] > 32) i++;
            n_words++;
            if (n_tokens >= (size_t)cap) continue;
            if (reserve(&tokens, (n_tokens + 1) * 8) < 0) goto done;
            if (word_token(norm + start, i - start, &context, (uint64_t *)tokens.data + n_tokens) < 0) goto done;
            n_tokens++;
        }
        if (n_words > (size_t)cap) {
            capped++;
            not_shingled += (Py_ssize_t)(n_words - (size_t)cap);
        }

        /* shingles: sum_j T[p + j] * C_j mod 2^64, mixed; one shingle of every token when fewer than n */
        const uint64_t *T = (const uint64_t *)tokens.data;
        size_t n_shingles = n_tokens >= ngram ? n_tokens - ngram + 1 : (n_tokens ? 1 : 0);
        if (reserve(&shingles, (n_shingles + 1) * 8) < 0) goto done;
        uint64_t *S = (uint64_t *)shingles.data;
        if (n_tokens >= ngram) {
            for (size_t p = 0; p < n_shingles; p++) {
                uint64_t g = 0;
                for (size_t j = 0; j < ngram; j++) g += T[p + j] * C[j];
                S[p] = fmix64(g);
            }
        } else if (n_tokens) {
            uint64_t g = 0;
            for (size_t j = 0; j < n_tokens; j++) g += T[j] * C[j];
            S[0] = fmix64(g);
        }
        count_of[t] = (int64_t)n_shingles;
        min_hash(S, n_shingles, (const uint32_t *)a.buf, (const uint32_t *)b.buf, num_perm,
                 signature_rows + (size_t)t * num_perm);
        if (with_sets) {
            if (sort_hashes(S, n_shingles, &scratch, &histogram) < 0) goto done;
            if (reserve(&values, (n_values + n_shingles + 1) * 8) < 0) goto done;
            uint64_t *V = (uint64_t *)values.data + n_values;
            size_t kept = 0;
            for (size_t s = 0; s < n_shingles; s++)
                if (!kept || S[s] != V[kept - 1]) V[kept++] = S[s];
            n_values += kept;
            set_count_of[t] = (int64_t)kept;
        }
    }
    if (with_sets) {
        PyObject *set_values = PyBytes_FromStringAndSize(values.data ? (const char *)values.data : "", (Py_ssize_t)(n_values * 8));
        if (!set_values) goto done;
        result = Py_BuildValue("(OONN(nnn))", signatures, counts, set_values, set_counts, context.long_words, capped,
                               not_shingled);
        set_counts = NULL; /* stolen by "N" */
    } else {
        result = Py_BuildValue("(OOOO(nnn))", signatures, counts, Py_None, Py_None, context.long_words, capped,
                               not_shingled);
    }

done:
    Py_XDECREF(signatures);
    Py_XDECREF(counts);
    Py_XDECREF(set_counts);
    if (separators.obj) PyBuffer_Release(&separators);
    if (lower_bmp.obj) PyBuffer_Release(&lower_bmp);
    if (lower_astral_pairs.obj) PyBuffer_Release(&lower_astral_pairs);
    if (coeffs.obj) PyBuffer_Release(&coeffs);
    if (a.obj) PyBuffer_Release(&a);
    if (b.obj) PyBuffer_Release(&b);
    free(normalized.data);
    free(tokens.data);
    free(shingles.data);
    free(values.data);
    free(scratch.data);
    free(histogram.data);
    Py_DECREF(sequence);
    return result;
}

static PyMethodDef methods[] = {
    {"sketch", sketch, METH_VARARGS, sketch_doc},
    {NULL, NULL, 0, NULL},
};

KERNEL_MODULE("minhash_kernel", "MinHash sketches in C (see zephyr.operators.minhash).");

PyMODINIT_FUNC PyInit_minhash_kernel(void) {
    init_ascii_table();
    return PyModule_Create(&module);
}
