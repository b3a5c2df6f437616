/* Byte-level BPE as Hugging Face `tokenizers` does it, in C, with a cache of the pieces already seen.
 *
 * Why: tokenization is the largest per-token cost of a pipeline, and both `tokenizers` (offsets,
 * normalised strings, per-word allocations) and tiktoken (a regex VM, no cache across calls) do work a
 * pretraining tokenizer does not need. Web text repeats its words: after the first few thousand
 * documents nearly every piece is a cache hit, so the cost is the pre-tokenizer's one pass over the
 * text plus a hash lookup per piece.
 *
 * Semantics, chosen to be those of `tokenizers` (checked against it in zephyr/tokenize/native_bpe.py
 * on a fixed sample before use, and on real text in the tests):
 *   - added tokens (the ones the caller lets match) split the text first, leftmost-longest;
 *   - optionally `Digits(individual_digits=True)`: every numeric character is a piece of its own;
 *   - GPT-2's pre-tokenizer regex on each piece, written out as code:
 *       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *     (first alternative that matches wins; the lookahead sees the end of the piece as the end);
 *   - BPE over the piece's bytes: start from each byte's token, merge the adjacent pair of lowest merge
 *     rank, leftmost first, until no pair is a merge (the merges list, not concatenations: a pair whose
 *     concatenation is a token but not a listed merge is not merged, as in `tokenizers`).
 * A text holding a byte the vocabulary lacks is reported back, so the caller encodes it with
 * `tokenizers` (which drops such bytes, letting their neighbours merge).
 *
 * Character classes (White_Space, L, N) come from the caller as one byte per code point, so this file
 * carries no Unicode table of its own.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fmix64.h"
#include "grow.h"
#include "kernel_module.h"

enum { CLASS_OTHER = 0, CLASS_LETTER = 1, CLASS_NUMBER = 2, CLASS_SPACE = 3 };
#define NO_ID 0xFFFFFFFFu
#define NO_RANK 0xFFFFFFFFu
#define CACHE_MAX_PIECE 64         /* bytes: longer pieces are rare and not cached */
#define CACHE_MAX_ENTRIES (1 << 18) /* then the cache starts over: ~20 MB per process at most */
#define SCAN_LIMIT 48              /* symbols: longer pieces merge through a heap */

static uint64_t hash_bytes(const unsigned char *data, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t chunk;
        memcpy(&chunk, data, 8);
        h = fmix64(h ^ chunk) * 0x9E3779B97F4A7C15ULL;
        data += 8;
        n -= 8;
    }
    uint64_t tail = 0;
    memcpy(&tail, data, n);
    return fmix64(h ^ tail);
}

/* ------------------------------------------------------------------------------ merges: (left, right) -> (rank, id) */

typedef struct {
    uint64_t key; /* left << 32 | right; 0xFFFF.. empty */
    uint32_t rank;
    uint32_t id;
} MergeSlot;

typedef struct {
    MergeSlot *slots;
    size_t mask;
} MergeTable;

static inline uint64_t pair_key(uint32_t left, uint32_t right) { return ((uint64_t)left << 32) | right; }

static int merges_init(MergeTable *table, const uint32_t *triples, size_t count) {
    size_t capacity = 16;
    while (capacity < 2 * count + 16) capacity *= 2;
    table->slots = malloc(capacity * sizeof(MergeSlot));
    if (!table->slots) return -1;
    memset(table->slots, 0xFF, capacity * sizeof(MergeSlot));
    table->mask = capacity - 1;
    for (size_t r = 0; r < count; r++) {
        uint64_t key = pair_key(triples[3 * r], triples[3 * r + 1]);
        size_t at = fmix64(key) & table->mask;
        while (table->slots[at].key != UINT64_MAX && table->slots[at].key != key) at = (at + 1) & table->mask;
        if (table->slots[at].key == key) continue; /* a repeated merge: the first (lowest rank) wins */
        table->slots[at].key = key;
        table->slots[at].rank = (uint32_t)r;
        table->slots[at].id = triples[3 * r + 2];
    }
    return 0;
}

static inline const MergeSlot *merge_of(const MergeTable *table, uint32_t left, uint32_t right) {
    uint64_t key = pair_key(left, right);
    size_t at = fmix64(key) & table->mask;
    for (;;) {
        const MergeSlot *slot = &table->slots[at];
        if (slot->key == key) return slot;
        if (slot->key == UINT64_MAX) return NULL;
        at = (at + 1) & table->mask;
    }
}

/* ------------------------------------------------------------------------------ piece cache: bytes -> ids */

typedef struct {
    uint64_t hash;
    uint32_t key_at, key_len; /* in keys */
    uint32_t ids_at, n_ids;   /* in ids */
} CacheSlot;

typedef struct {
    CacheSlot *slots;
    size_t mask, used;
    unsigned char *keys;
    size_t keys_used, keys_size;
    uint32_t *ids;
    size_t ids_used, ids_size;
} Cache;

static int cache_init(Cache *cache) {
    size_t capacity = 2 * CACHE_MAX_ENTRIES;
    cache->slots = malloc(capacity * sizeof(CacheSlot));
    cache->keys_size = 4u << 20;
    cache->ids_size = 1u << 20;
    cache->keys = malloc(cache->keys_size);
    cache->ids = malloc(cache->ids_size * sizeof(uint32_t));
    if (!cache->slots || !cache->keys || !cache->ids) return -1;
    cache->mask = capacity - 1;
    memset(cache->slots, 0, capacity * sizeof(CacheSlot));
    cache->used = cache->keys_used = cache->ids_used = 0;
    return 0;
}

static void cache_clear(Cache *cache) {
    memset(cache->slots, 0, (cache->mask + 1) * sizeof(CacheSlot));
    cache->used = cache->keys_used = cache->ids_used = 0;
}

/* Slot of `piece` (n_ids == 0: not cached; key_len 0 marks an empty slot, pieces are never empty). */
static CacheSlot *cache_find(Cache *cache, const unsigned char *piece, size_t n, uint64_t hash) {
    size_t at = hash & cache->mask;
    for (;;) {
        CacheSlot *slot = &cache->slots[at];
        if (slot->key_len == 0) return slot;
        if (slot->hash == hash && slot->key_len == n && memcmp(cache->keys + slot->key_at, piece, n) == 0) return slot;
        at = (at + 1) & cache->mask;
    }
}

static void cache_put(Cache *cache, CacheSlot *slot, const unsigned char *piece, size_t n, uint64_t hash,
                      const uint32_t *ids, size_t n_ids) {
    if (cache->used >= CACHE_MAX_ENTRIES || cache->keys_used + n > cache->keys_size ||
        cache->ids_used + n_ids > cache->ids_size) {
        cache_clear(cache);
        slot = cache_find(cache, piece, n, hash);
    }
    memcpy(cache->keys + cache->keys_used, piece, n);
    memcpy(cache->ids + cache->ids_used, ids, n_ids * sizeof(uint32_t));
    slot->hash = hash;
    slot->key_at = (uint32_t)cache->keys_used;
    slot->key_len = (uint32_t)n;
    slot->ids_at = (uint32_t)cache->ids_used;
    slot->n_ids = (uint32_t)n_ids;
    cache->keys_used += n;
    cache->ids_used += n_ids;
    cache->used++;
}

/* ------------------------------------------------------------------------------ the encoder */

typedef struct {
    unsigned char *bytes;
    size_t length;
    uint32_t id;
} AddedToken;

typedef struct {
    unsigned char *classes; /* one per code point, 0x110000 */
    uint32_t byte_id[256];  /* token of each byte; NO_ID when the vocabulary lacks it */
    MergeTable merges;
    Cache cache;
    int digits_split;
    AddedToken *added; /* longest first */
    size_t n_added;
    unsigned char added_first[32]; /* bit per first byte of an added token */
} Encoder;

static void encoder_free(Encoder *encoder) {
    if (!encoder) return;
    free(encoder->classes);
    free(encoder->merges.slots);
    free(encoder->cache.slots);
    free(encoder->cache.keys);
    free(encoder->cache.ids);
    for (size_t i = 0; i < encoder->n_added; i++) free(encoder->added[i].bytes);
    free(encoder->added);
    free(encoder);
}

static void capsule_destructor(PyObject *capsule) {
    encoder_free((Encoder *)PyCapsule_GetPointer(capsule, "zephyr.bpe_encoder"));
}

/* Growable uint32 output. */
typedef struct {
    uint32_t *data;
    size_t size, capacity;
} Ids;

static int ids_reserve(Ids *ids, size_t more) {
    void *data = ids->data;
    if (grow(&data, &ids->capacity, ids->size + more, sizeof(uint32_t), 1 << 16) < 0) return -1;
    ids->data = data;
    return 0;
}

/* Work space for one merge. */
typedef struct {
    uint32_t *id;
    int32_t *next, *prev;
    uint64_t *heap; /* rank << 32 | position */
    size_t capacity;
} Symbols;

static int symbols_reserve(Symbols *s, size_t n) {
    if (n <= s->capacity) return 0;
    size_t capacity = s->capacity ? s->capacity : 256;
    while (capacity < n) capacity *= 2;
    uint32_t *id = realloc(s->id, capacity * sizeof(uint32_t));
    if (id) s->id = id;
    int32_t *next = realloc(s->next, capacity * sizeof(int32_t));
    if (next) s->next = next;
    int32_t *prev = realloc(s->prev, capacity * sizeof(int32_t));
    if (prev) s->prev = prev;
    uint64_t *heap = realloc(s->heap, 3 * capacity * sizeof(uint64_t)); /* n pairs + 2 per merge */
    if (heap) s->heap = heap;
    if (!id || !next || !prev || !heap) {
        PyErr_NoMemory();
        return -1;
    }
    s->capacity = capacity;
    return 0;
}

static inline void heap_push(uint64_t *heap, size_t *n, uint64_t value) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (heap[parent] <= value) break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i] = value;
}

static inline uint64_t heap_pop(uint64_t *heap, size_t *n) {
    uint64_t top = heap[0], last = heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= *n) break;
        if (child + 1 < *n && heap[child + 1] < heap[child]) child++;
        if (heap[child] >= last) break;
        heap[i] = heap[child];
        i = child;
    }
    if (*n) heap[i] = last;
    return top;
}

/* BPE of `n` byte tokens in s->id[0..n): merges applied by (rank, position); ids appended to `out`. */
static int bpe_merge(const Encoder *encoder, Symbols *s, size_t n, Ids *out) {
    const MergeTable *merges = &encoder->merges;
    for (size_t i = 0; i < n; i++) {
        s->next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        s->prev[i] = (int32_t)i - 1;
    }
    if (n <= SCAN_LIMIT) {
        /* few symbols: find the lowest-ranked pair by scanning, leftmost on ties */
        for (;;) {
            uint32_t best_rank = NO_RANK, best_id = 0;
            int32_t best = -1;
            for (int32_t i = 0; i >= 0 && s->next[i] >= 0; i = s->next[i]) {
                const MergeSlot *m = merge_of(merges, s->id[i], s->id[s->next[i]]);
                if (m && m->rank < best_rank) {
                    best_rank = m->rank;
                    best_id = m->id;
                    best = i;
                }
            }
            if (best < 0) break;
            int32_t gone = s->next[best];
            s->id[best] = best_id;
            s->next[best] = s->next[gone];
            if (s->next[gone] >= 0) s->prev[s->next[gone]] = best;
        }
    } else {
        /* many symbols: a heap of (rank, position); an entry is stale when its pair has changed */
        size_t heap_n = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            const MergeSlot *m = merge_of(merges, s->id[i], s->id[i + 1]);
            if (m) heap_push(s->heap, &heap_n, ((uint64_t)m->rank << 32) | i);
        }
        while (heap_n) {
            uint64_t top = heap_pop(s->heap, &heap_n);
            int32_t i = (int32_t)(top & 0xFFFFFFFFu);
            uint32_t rank = (uint32_t)(top >> 32);
            if (s->id[i] == NO_ID || s->next[i] < 0) continue;
            const MergeSlot *m = merge_of(merges, s->id[i], s->id[s->next[i]]);
            if (!m || m->rank != rank) continue; /* ranks are unique per pair: another pair now */
            int32_t gone = s->next[i];
            s->id[i] = m->id;
            s->id[gone] = NO_ID;
            s->next[i] = s->next[gone];
            if (s->next[gone] >= 0) s->prev[s->next[gone]] = i;
            if (s->prev[i] >= 0) {
                const MergeSlot *left = merge_of(merges, s->id[s->prev[i]], s->id[i]);
                if (left) heap_push(s->heap, &heap_n, ((uint64_t)left->rank << 32) | (uint32_t)s->prev[i]);
            }
            if (s->next[i] >= 0) {
                const MergeSlot *right = merge_of(merges, s->id[i], s->id[s->next[i]]);
                if (right) heap_push(s->heap, &heap_n, ((uint64_t)right->rank << 32) | (uint32_t)i);
            }
        }
    }
    size_t count = 0;
    for (int32_t i = 0; i >= 0; i = s->next[i]) count++;
    if (ids_reserve(out, count) < 0) return -1;
    for (int32_t i = 0; i >= 0; i = s->next[i]) out->data[out->size++] = s->id[i];
    return 0;
}

/* Ids of one piece. Returns 1 when a byte has no token (the text goes to `tokenizers`), -1 on error. */
static int encode_piece(Encoder *encoder, Symbols *s, const unsigned char *piece, size_t n, Ids *out) {
    if (n == 1) {
        uint32_t id = encoder->byte_id[piece[0]];
        if (id == NO_ID) return 1;
        if (ids_reserve(out, 1) < 0) return -1;
        out->data[out->size++] = id;
        return 0;
    }
    CacheSlot *slot = NULL;
    uint64_t hash = 0;
    if (n <= CACHE_MAX_PIECE) {
        hash = hash_bytes(piece, n);
        slot = cache_find(&encoder->cache, piece, n, hash);
        if (slot->key_len) {
            if (ids_reserve(out, slot->n_ids) < 0) return -1;
            memcpy(out->data + out->size, encoder->cache.ids + slot->ids_at, slot->n_ids * sizeof(uint32_t));
            out->size += slot->n_ids;
            return 0;
        }
    }
    if (symbols_reserve(s, n) < 0) return -1;
    for (size_t i = 0; i < n; i++) {
        s->id[i] = encoder->byte_id[piece[i]];
        if (s->id[i] == NO_ID) return 1;
    }
    size_t start = out->size;
    if (bpe_merge(encoder, s, n, out) < 0) return -1;
    if (slot) cache_put(&encoder->cache, slot, piece, n, hash, out->data + start, out->size - start);
    return 0;
}

/* Class and UTF-8 width of the character at text[i]. */
static inline int char_at(const Encoder *encoder, const unsigned char *text, size_t i, size_t end, size_t *width) {
    unsigned char byte = text[i];
    if (byte < 0x80) {
        *width = 1;
        return encoder->classes[byte];
    }
    uint32_t code;
    size_t w = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : 2;
    if (i + w > end) w = end - i; /* not for str's UTF-8; stay in bounds */
    if (w == 2) code = ((uint32_t)(byte & 0x1F) << 6) | (text[i + 1] & 0x3F);
    else if (w == 3) code = ((uint32_t)(byte & 0x0F) << 12) | ((uint32_t)(text[i + 1] & 0x3F) << 6) | (text[i + 2] & 0x3F);
    else if (w == 4)
        code = ((uint32_t)(byte & 0x07) << 18) | ((uint32_t)(text[i + 1] & 0x3F) << 12) |
               ((uint32_t)(text[i + 2] & 0x3F) << 6) | (text[i + 3] & 0x3F);
    else code = byte;
    *width = w;
    return code < 0x110000 ? encoder->classes[code] : CLASS_OTHER;
}

/* End of the run of characters of class `cls` starting at i. */
static inline size_t run_end(const Encoder *encoder, const unsigned char *text, size_t i, size_t end, int cls) {
    size_t width;
    while (i < end && char_at(encoder, text, i, end, &width) == cls) i += width;
    return i;
}

/* End of the GPT-2 regex match starting at i (i < end): see the alternatives at the top. */
static size_t match_end(const Encoder *encoder, const unsigned char *text, size_t i, size_t end) {
    unsigned char byte = text[i];
    if (byte == '\'' && i + 1 < end) {
        unsigned char c = text[i + 1];
        if (c == 's' || c == 't' || c == 'm' || c == 'd') return i + 2;
        if (i + 2 < end) {
            unsigned char d = text[i + 2];
            if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l')) return i + 3;
        }
    }
    size_t width, next_width;
    int cls = char_at(encoder, text, i, end, &width);
    if (byte == ' ' && i + 1 < end) {
        int next = char_at(encoder, text, i + 1, end, &next_width);
        if (next != CLASS_SPACE) return run_end(encoder, text, i + 1, end, next); /* " ?" + letters/numbers/other */
    }
    if (cls != CLASS_SPACE) return run_end(encoder, text, i, end, cls);
    /* whitespace: \s+(?!\S) gives the run but its last character when a non-space follows; \s+ then
       takes a lone whitespace character */
    size_t last = i, j = i;
    while (j < end) {
        if (char_at(encoder, text, j, end, &width) != CLASS_SPACE) break;
        last = j;
        j += width;
    }
    if (j >= end || last == i) return j;
    return last;
}

/* Encode text[begin, end) (no added token inside): digit pieces, then regex pieces. */
static int encode_segment(Encoder *encoder, Symbols *s, const unsigned char *text, size_t begin, size_t end, Ids *out) {
    size_t i = begin;
    while (i < end) {
        size_t piece_end = end, width;
        if (encoder->digits_split) {
            /* the piece up to the next numeric character, or that character alone */
            if (char_at(encoder, text, i, end, &width) == CLASS_NUMBER) {
                int r = encode_piece(encoder, s, text + i, width, out);
                if (r) return r;
                i += width;
                continue;
            }
            size_t j = i;
            while (j < end && char_at(encoder, text, j, end, &width) != CLASS_NUMBER) j += width;
            piece_end = j;
        }
        while (i < piece_end) {
            size_t j = match_end(encoder, text, i, piece_end);
            int r = encode_piece(encoder, s, text + i, j - i, out);
            if (r) return r;
            i = j;
        }
    }
    return 0;
}

static int encode_text(Encoder *encoder, Symbols *s, const unsigned char *text, size_t size, Ids *out) {
    if (!encoder->n_added) return encode_segment(encoder, s, text, 0, size, out);
    size_t begin = 0, i = 0;
    while (i < size) {
        unsigned char byte = text[i];
        if ((encoder->added_first[byte >> 3] >> (byte & 7)) & 1) {
            for (size_t k = 0; k < encoder->n_added; k++) { /* longest first */
                const AddedToken *token = &encoder->added[k];
                if (token->length <= size - i && memcmp(text + i, token->bytes, token->length) == 0) {
                    int r = encode_segment(encoder, s, text, begin, i, out);
                    if (r) return r;
                    if (ids_reserve(out, 1) < 0) return -1;
                    out->data[out->size++] = token->id;
                    i += token->length;
                    begin = i;
                    goto next;
                }
            }
        }
        i++;
    next:;
    }
    return encode_segment(encoder, s, text, begin, size, out);
}

/* ------------------------------------------------------------------------------ Python API */

PyDoc_STRVAR(new_encoder_doc,
             "new_encoder(classes, byte_ids, merges, added, digits_split) -> encoder\n\n"
             "classes: one byte per code point (0 other, 1 letter, 2 number, 3 White_Space), 0x110000 bytes;\n"
             "byte_ids: 256 int32 (-1: no token); merges: uint32 (left, right, merged id) triples in rank\n"
             "order; added: list of (UTF-8 bytes, id) to match in the text; digits_split: numeric characters\n"
             "are pieces of their own.");

static PyObject *new_encoder(PyObject *self, PyObject *args) {
    PyObject *classes_object, *byte_ids_object, *merges_object, *added_list;
    int digits_split;
    if (!PyArg_ParseTuple(args, "OOOOp", &classes_object, &byte_ids_object, &merges_object, &added_list, &digits_split))
        return NULL;
    Py_buffer classes = {0}, byte_ids = {0}, merges = {0};
    Encoder *encoder = calloc(1, sizeof(Encoder));
    PyObject *capsule = NULL;
    if (!encoder) return PyErr_NoMemory();
    if (PyObject_GetBuffer(classes_object, &classes, PyBUF_C_CONTIGUOUS) < 0) goto fail;
    if (PyObject_GetBuffer(byte_ids_object, &byte_ids, PyBUF_C_CONTIGUOUS) < 0) goto fail;
    if (PyObject_GetBuffer(merges_object, &merges, PyBUF_C_CONTIGUOUS) < 0) goto fail;
    if (classes.len != 0x110000 || byte_ids.len != 256 * 4 || merges.len % 12) {
        PyErr_SetString(PyExc_ValueError, "classes: 0x110000 bytes; byte_ids: 256 int32; merges: uint32 triples");
        goto fail;
    }
    encoder->classes = malloc(0x110000);
    if (!encoder->classes) goto fail_memory;
    memcpy(encoder->classes, classes.buf, 0x110000);
    memcpy(encoder->byte_id, byte_ids.buf, 256 * 4);
    if (merges_init(&encoder->merges, (const uint32_t *)merges.buf, (size_t)(merges.len / 12)) < 0) goto fail_memory;
    if (cache_init(&encoder->cache) < 0) goto fail_memory;
    encoder->digits_split = digits_split;
    PyObject *added = PySequence_Fast(added_list, "added must be a list of (bytes, id)");
    if (!added) goto fail;
    Py_ssize_t n_added = PySequence_Fast_GET_SIZE(added);
    encoder->added = calloc((size_t)n_added + 1, sizeof(AddedToken));
    if (!encoder->added) {
        Py_DECREF(added);
        goto fail_memory;
    }
    for (Py_ssize_t k = 0; k < n_added; k++) {
        const char *bytes;
        Py_ssize_t length;
        unsigned int id;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(added, k), "y#I", &bytes, &length, &id) || length < 1) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "an added token is empty");
            Py_DECREF(added);
            goto fail;
        }
        AddedToken *token = &encoder->added[encoder->n_added];
        token->bytes = malloc((size_t)length);
        if (!token->bytes) {
            Py_DECREF(added);
            goto fail_memory;
        }
        memcpy(token->bytes, bytes, (size_t)length);
        token->length = (size_t)length;
        token->id = id;
        encoder->n_added++;
        unsigned char first = (unsigned char)bytes[0];
        encoder->added_first[first >> 3] |= (unsigned char)(1u << (first & 7));
    }
    Py_DECREF(added);
    /* longest first: leftmost-longest at each position */
    for (size_t a = 1; a < encoder->n_added; a++) {
        AddedToken token = encoder->added[a];
        size_t b = a;
        while (b > 0 && encoder->added[b - 1].length < token.length) {
            encoder->added[b] = encoder->added[b - 1];
            b--;
        }
        encoder->added[b] = token;
    }
    capsule = PyCapsule_New(encoder, "zephyr.bpe_encoder", capsule_destructor);
    if (!capsule) goto fail;
    PyBuffer_Release(&classes);
    PyBuffer_Release(&byte_ids);
    PyBuffer_Release(&merges);
    return capsule;
fail_memory:
    PyErr_NoMemory();
fail:
    if (classes.obj) PyBuffer_Release(&classes);
    if (byte_ids.obj) PyBuffer_Release(&byte_ids);
    if (merges.obj) PyBuffer_Release(&merges);
    encoder_free(encoder);
    return NULL;
}

PyDoc_STRVAR(encode_many_doc,
             "encode_many(encoder, texts) -> (ids, lengths, redo)\n\n"
             "Every text's ids back to back (uint32 bytes), each text's count (int64 bytes), and the indices of\n"
             "texts holding a byte without a token (their count is 0: encode them with tokenizers).");

static PyObject *encode_many(PyObject *self, PyObject *args) {
    PyObject *sequence;
    Encoder *encoder = handle_and_texts(args, "encode_many", "zephyr.bpe_encoder", "an encoder", "new_encoder",
                                        "texts must be a sequence of str", &sequence);
    if (!encoder) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(sequence);
    Ids out = {0};
    Symbols symbols = {0};
    PyObject *lengths = PyBytes_FromStringAndSize(NULL, n * 8), *redo = PyList_New(0), *result = NULL;
    if (!lengths || !redo) goto done;
    int64_t *length_of = (int64_t *)PyBytes_AS_STRING(lengths);
    for (Py_ssize_t t = 0; t < n; t++) {
        PyObject *text = PySequence_Fast_GET_ITEM(sequence, t);
        if (!PyUnicode_Check(text)) {
            PyErr_Format(PyExc_TypeError, "texts[%zd] is a %s, expected str", t, Py_TYPE(text)->tp_name);
            goto done;
        }
        Py_ssize_t size;
        const unsigned char *utf8;
        if (PyUnicode_IS_ASCII(text)) {
            utf8 = (const unsigned char *)PyUnicode_DATA(text);
            size = PyUnicode_GET_LENGTH(text);
        } else {
            utf8 = (const unsigned char *)PyUnicode_AsUTF8AndSize(text, &size);
            if (!utf8) goto done;
        }
        size_t start = out.size;
        int r = encode_text(encoder, &symbols, utf8, (size_t)size, &out);
        if (r < 0) goto done;
        if (r > 0) {
            out.size = start;
            PyObject *index = PyLong_FromSsize_t(t);
            if (!index || PyList_Append(redo, index) < 0) {
                Py_XDECREF(index);
                goto done;
            }
            Py_DECREF(index);
        }
        length_of[t] = (int64_t)(out.size - start);
    }
    PyObject *ids = PyBytes_FromStringAndSize(out.data ? (const char *)out.data : "", (Py_ssize_t)(out.size * 4));
    if (!ids) goto done;
    result = Py_BuildValue("(NOO)", ids, lengths, redo);
done:
    Py_XDECREF(lengths);
    Py_XDECREF(redo);
    Py_DECREF(sequence);
    free(out.data);
    free(symbols.id);
    free(symbols.next);
    free(symbols.prev);
    free(symbols.heap);
    return result;
}

static PyMethodDef methods[] = {
    {"new_encoder", new_encoder, METH_VARARGS, new_encoder_doc},
    {"encode_many", encode_many, METH_VARARGS, encode_many_doc},
    {NULL, NULL, 0, NULL},
};

KERNEL_MODULE("bpe_kernel", "Byte-level BPE in C (see zephyr.tokenize.native_bpe).");

PyMODINIT_FUNC PyInit_bpe_kernel(void) { return PyModule_Create(&module); }
