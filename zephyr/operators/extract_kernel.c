/* String loops of the extractor (zephyr/operators/extract.py, extract_clean.py, charset.py, render.py) in C, each tested
 * against the Python it replaces, which stays as the fallback.
 *
 * `visible_len(text)`: the code points of a str that are not ' ', '\n', '\t' or '\r' (`_visible_len`).
 * The scorer measures every paragraph, link and candidate container of a page, ~170 strings and ~60,000
 * characters a page on aeb-dev. In Python that is four str.count passes plus a function call each (8% of
 * extraction time); here one branch-free pass over the str's own storage (1, 2 or 4 bytes a code point).
 *
 * `needle_set(needles)` and `contains_any(text, needle_set)`: whether a str holds any of a fixed set of
 * ASCII substrings, by one pass that looks up each character among the needles' first characters. A
 * needle may start and/or end with the two characters `\b`: a word boundary there, as in Python's re
 * (word characters: str.isalnum() and '_'). The
 * class/id hint regexes cost ~1 us a class string in Python's sre (~26 ns a character: it tries the
 * alternation at every position) and a crawl meets ~75 new class strings a page; most hold none of the
 * keywords, and this answers that in ~0.1 us, so the regex runs only on the few that might match.
 *
 * `utf8_valid(data)`: whether bytes are strict UTF-8, exactly as bytes.decode("utf-8") accepts them (no
 * overlong forms, no surrogates, nothing above U+10FFFF). Pages go to lexbor as the bytes they came as when
 * they are valid UTF-8; deciding that by decoding built a str only to drop it (0.05 ms a page on aeb-dev).
 *
 * `collapse_spaces(text)`: `" ".join(text.split())` (whitespace runs to one space, ends stripped; whitespace
 * as str.isspace has it) in two passes and one allocation, for every block the renderer writes; in Python
 * the list of words is built only to be joined again.
 *
 * Built by setuptools from pyproject.toml (`pip install -e .` / `make install`).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "kernel_module.h"

/* 0 for a str ready to read; else -1 with the exception set (a TypeError naming `function` for a non-str). */
static int ready_str(PyObject *text, const char *function) {
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "%s expects a str, got %s", function, Py_TYPE(text)->tp_name);
        return -1;
    }
    return PyUnicode_READY(text) < 0 ? -1 : 0;
}

#define COUNT_SPACES(type)                                                                           \
    do {                                                                                             \
        const type *chars = (const type *)data;                                                      \
        for (Py_ssize_t i = 0; i < length; i++) {                                                    \
            type c = chars[i];                                                                       \
            spaces += (c == ' ') | (c == '\n') | (c == '\t') | (c == '\r');                          \
        }                                                                                            \
    } while (0)

static PyObject *visible_len(PyObject *self, PyObject *text) {
    (void)self;
    if (ready_str(text, "visible_len") < 0) return NULL;
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    Py_ssize_t spaces = 0;
    const void *data = PyUnicode_DATA(text);
    switch (PyUnicode_KIND(text)) {
        case PyUnicode_1BYTE_KIND:
            COUNT_SPACES(Py_UCS1);
            break;
        case PyUnicode_2BYTE_KIND:
            COUNT_SPACES(Py_UCS2);
            break;
        default:
            COUNT_SPACES(Py_UCS4);
            break;
    }
    return PyLong_FromSsize_t(length - spaces);
}

/* ------------------------------------------------------------------------------ contains_any */

#define NEEDLE_CAPSULE "zephyr.operators.extract_kernel.NeedleSet"

typedef struct {
    Py_ssize_t count;
    Py_ssize_t *lengths;       /* of each needle, sorted by first character */
    unsigned char *bounds;     /* each needle's word boundaries: 1 before it, 2 after it */
    unsigned char **chars;     /* each needle's ASCII characters */
    Py_ssize_t first[129];     /* the needles starting with character c are [first[c], first[c + 1]) */
} NeedleSet;

static void needle_set_free(NeedleSet *set) {
    if (!set) return;
    if (set->chars)
        for (Py_ssize_t i = 0; i < set->count; i++) PyMem_Free(set->chars[i]);
    PyMem_Free(set->chars);
    PyMem_Free(set->lengths);
    PyMem_Free(set->bounds);
    PyMem_Free(set);
}

static void needle_capsule_destructor(PyObject *capsule) {
    needle_set_free((NeedleSet *)PyCapsule_GetPointer(capsule, NEEDLE_CAPSULE));
}

/* The length of a needle without its `\b` markers (<= 0: nothing left); its start and markers (1 | 2). */
static Py_ssize_t needle_core(PyObject *needle, Py_ssize_t *start, unsigned char *bounds) {
    const unsigned char *data = PyUnicode_1BYTE_DATA(needle);
    Py_ssize_t length = PyUnicode_GET_LENGTH(needle), from = 0;
    unsigned char marks = 0;
    if (length >= 2 && data[0] == '\\' && data[1] == 'b') {
        marks |= 1;
        from = 2;
    }
    if (length - from >= 2 && data[length - 2] == '\\' && data[length - 1] == 'b') {
        marks |= 2;
        length -= 2;
    }
    if (start) *start = from;
    if (bounds) *bounds = marks;
    return length - from;
}

/* Python's re word characters (sre's SRE_UNI_IS_WORD) */
static inline int is_word(Py_UCS4 c) { return c == '_' || Py_UNICODE_ISALNUM(c); }

static inline int word_at(int kind, const void *data, Py_ssize_t length, Py_ssize_t i) {
    return i >= 0 && i < length && is_word(PyUnicode_READ(kind, data, i));
}

static PyObject *needle_set(PyObject *self, PyObject *needles) {
    (void)self;
    if (!PyTuple_Check(needles)) {
        PyErr_Format(PyExc_TypeError, "needle_set expects a tuple of str, got %s", Py_TYPE(needles)->tp_name);
        return NULL;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(needles);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *needle = PyTuple_GET_ITEM(needles, i);
        if (!PyUnicode_Check(needle) || PyUnicode_READY(needle) < 0 || !PyUnicode_IS_ASCII(needle) ||
            needle_core(needle, NULL, NULL) <= 0) {
            PyErr_Format(PyExc_ValueError, "needle_set expects non-empty ASCII str needles, got %R at %zd",
                         needle, i);
            return NULL;
        }
    }
    NeedleSet *set = PyMem_Calloc(1, sizeof(NeedleSet));
    if (!set) return PyErr_NoMemory();
    set->count = count;
    set->lengths = PyMem_Calloc(count ? count : 1, sizeof(Py_ssize_t));
    set->chars = PyMem_Calloc(count ? count : 1, sizeof(unsigned char *));
    set->bounds = PyMem_Calloc(count ? count : 1, 1);
    if (!set->lengths || !set->chars || !set->bounds) {
        needle_set_free(set);
        return PyErr_NoMemory();
    }
    /* counting sort by first character */
    Py_ssize_t at = 0;
    for (int c = 0; c < 128; c++) {
        set->first[c] = at;
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *needle = PyTuple_GET_ITEM(needles, i);
            Py_ssize_t start;
            unsigned char bounds;
            Py_ssize_t length = needle_core(needle, &start, &bounds);
            const unsigned char *data = PyUnicode_1BYTE_DATA(needle) + start;
            if (data[0] != c) continue;
            set->bounds[at] = bounds;
            set->chars[at] = PyMem_Malloc(length);
            if (!set->chars[at]) {
                needle_set_free(set);
                return PyErr_NoMemory();
            }
            memcpy(set->chars[at], data, length);
            set->lengths[at] = length;
            at++;
        }
    }
    set->first[128] = at;
    PyObject *capsule = PyCapsule_New(set, NEEDLE_CAPSULE, needle_capsule_destructor);
    if (!capsule) needle_set_free(set);
    return capsule;
}

static PyObject *contains_any(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "contains_any expects (text, needle_set), got %zd arguments", nargs);
        return NULL;
    }
    PyObject *text = args[0];
    if (ready_str(text, "contains_any") < 0) return NULL;
    NeedleSet *set = (NeedleSet *)PyCapsule_GetPointer(args[1], NEEDLE_CAPSULE);
    if (!set) return NULL;
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    for (Py_ssize_t i = 0; i < length; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 128) continue;
        for (Py_ssize_t j = set->first[c]; j < set->first[c + 1]; j++) {
            Py_ssize_t n = set->lengths[j];
            if (i + n > length) continue;
            const unsigned char *needle = set->chars[j];
            Py_ssize_t k = 1;
            while (k < n && PyUnicode_READ(kind, data, i + k) == needle[k]) k++;
            if (k < n) continue;
            unsigned char bounds = set->bounds[j];
            if ((bounds & 1) && word_at(kind, data, length, i - 1) == word_at(kind, data, length, i)) continue;
            if ((bounds & 2) && word_at(kind, data, length, i + n - 1) == word_at(kind, data, length, i + n))
                continue;
            Py_RETURN_TRUE;
        }
    }
    Py_RETURN_FALSE;
}

/* ------------------------------------------------------------------------------ utf8_valid */

static PyObject *utf8_valid(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyBytes_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "utf8_valid expects bytes, got %s", Py_TYPE(arg)->tp_name);
        return NULL;
    }
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t n = PyBytes_GET_SIZE(arg), i = 0;
    while (i < n) {
        if (i + 8 <= n) { /* 8 ASCII bytes at a time */
            uint64_t word;
            memcpy(&word, s + i, 8);
            if (!(word & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        Py_ssize_t need;
        unsigned char low = 0x80, high = 0xBF; /* bounds of the byte after the lead */
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) low = 0xA0;  /* no overlong forms */
            if (c == 0xED) high = 0x9F; /* no surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) low = 0x90;  /* no overlong forms */
            if (c == 0xF4) high = 0x8F; /* nothing above U+10FFFF */
        } else {
            Py_RETURN_FALSE;
        }
        if (i + need >= n) Py_RETURN_FALSE; /* a truncated sequence */
        if (s[i + 1] < low || s[i + 1] > high) Py_RETURN_FALSE;
        for (Py_ssize_t k = 2; k <= need; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) Py_RETURN_FALSE;
        i += need + 1;
    }
    Py_RETURN_TRUE;
}

/* ------------------------------------------------------------------------------ collapse_spaces */

static unsigned char latin1_space[256]; /* Py_UNICODE_ISSPACE of U+0000..U+00FF, filled at import */

#define IS_SPACE(type, c) (sizeof(type) == 1 ? latin1_space[(unsigned char)(c)] : Py_UNICODE_ISSPACE(c))

/* The walk both passes of collapse_spaces make over the text's words: ON_SPACE at each whitespace character,
 * ON_GAP where the one space between two words goes, ON_CHAR at each character of a word. Written once, so
 * that the first pass measures exactly what the second writes into the str it allocated. */
#define COLLAPSE_WALK(type, ON_SPACE, ON_GAP, ON_CHAR)                                                   \
    do {                                                                                                 \
        const type *chars = (const type *)data;                                                          \
        for (Py_ssize_t i = 0; i < length; i++) {                                                        \
            type c = chars[i];                                                                           \
            if (IS_SPACE(type, c)) {                                                                     \
                ON_SPACE;                                                                                \
                in_word = 0;                                                                             \
                continue;                                                                                \
            }                                                                                            \
            if (!in_word) {                                                                              \
                if (words++) ON_GAP;                                                                     \
                in_word = 1;                                                                             \
            }                                                                                            \
            ON_CHAR;                                                                                     \
        }                                                                                                \
    } while (0)

/* the result's length and largest code point (a str must have the narrowest storage that fits); whether it
 * differs from the text at all */
#define COLLAPSE_MEASURE(type)                                                                           \
    COLLAPSE_WALK(type,                                                                                  \
                  if (c != ' ' || !in_word || i + 1 == length || IS_SPACE(type, chars[i + 1])) changed = 1, \
                  size++,                                                                                \
                  size++; if (c > maxchar) maxchar = c)

#define COLLAPSE_WRITE(type)                                                                             \
    COLLAPSE_WALK(type,                                                                                  \
                  (void)0,                                                                               \
                  PyUnicode_WRITE(out_kind, out, j++, ' '),                                              \
                  PyUnicode_WRITE(out_kind, out, j++, c))

static PyObject *collapse_spaces(PyObject *self, PyObject *text) {
    (void)self;
    if (ready_str(text, "collapse_spaces") < 0) return NULL;
    Py_ssize_t length = PyUnicode_GET_LENGTH(text), size = 0, j = 0;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_UCS4 maxchar = 0;
    int in_word = 0, words = 0, changed = 0;
    switch (kind) {
        case PyUnicode_1BYTE_KIND: COLLAPSE_MEASURE(Py_UCS1); break;
        case PyUnicode_2BYTE_KIND: COLLAPSE_MEASURE(Py_UCS2); break;
        default: COLLAPSE_MEASURE(Py_UCS4); break;
    }
    if (!changed) {
        Py_INCREF(text);
        return text;
    }
    if (words > 1 && maxchar < ' ') maxchar = ' ';
    PyObject *result = PyUnicode_New(size, maxchar);
    if (!result) return NULL;
    int out_kind = PyUnicode_KIND(result);
    void *out = PyUnicode_DATA(result);
    in_word = 0;
    words = 0;
    switch (kind) {
        case PyUnicode_1BYTE_KIND: COLLAPSE_WRITE(Py_UCS1); break;
        case PyUnicode_2BYTE_KIND: COLLAPSE_WRITE(Py_UCS2); break;
        default: COLLAPSE_WRITE(Py_UCS4); break;
    }
    return result;
}

static PyMethodDef methods[] = {
    {"visible_len", visible_len, METH_O,
     "visible_len(text: str) -> int: code points of text that are not ' ', '\\n', '\\t' or '\\r'."},
    {"needle_set", needle_set, METH_O,
     "needle_set(needles: tuple[str, ...]) -> capsule: non-empty ASCII needles (a leading or trailing \\b: a "
     "word boundary there), indexed for contains_any."},
    {"collapse_spaces", collapse_spaces, METH_O,
     "collapse_spaces(text: str) -> str: ' '.join(text.split())."},
    {"utf8_valid", utf8_valid, METH_O,
     "utf8_valid(data: bytes) -> bool: whether data.decode('utf-8') would succeed."},
    {"contains_any", (PyCFunction)(void (*)(void))contains_any, METH_FASTCALL,
     "contains_any(text: str, needle_set) -> bool: whether text holds any of the needles."},
    {NULL, NULL, 0, NULL},
};

KERNEL_MODULE("extract_kernel",
              "String loops of the extractor in C: visible_len, needle_set, contains_any, utf8_valid, collapse_spaces.");

PyMODINIT_FUNC PyInit_extract_kernel(void) {
    for (int c = 0; c < 256; c++) latin1_space[c] = Py_UNICODE_ISSPACE(c) ? 1 : 0;
    return PyModule_Create(&module);
}
