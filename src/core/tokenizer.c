#include "tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "grow.h"
#include "o200k.h"

#define NONE UINT32_MAX

struct gptoss_tokenizer {
    uint8_t *file; /* the whole file; entries point into it */
    int vocab_size, max_token_length;
    size_t *offset;
    int32_t *length;
    float *score;
    uint8_t *special;
    /* open addressing: (hash tag << 32) | (id + 1); 0 is an empty slot */
    uint64_t *table;
    uint64_t mask;
    int32_t byte_id[256];
    uint8_t byte_value[256];
};

/* The files are little-endian, as is every host we build for. */
static int32_t read_i32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 29);
}

int gptoss_tokenizer_find(const gptoss_tokenizer *t, const uint8_t *s, size_t n) {
    if (n > (size_t)t->max_token_length)
        return -1;
    uint64_t h = hash_bytes(s, n);
    uint64_t tag = h >> 32;
    for (uint64_t i = h & t->mask;; i = (i + 1) & t->mask) {
        uint64_t slot = t->table[i];
        if (slot == 0)
            return -1;
        if (slot >> 32 != tag)
            continue;
        int id = (int)(uint32_t)slot - 1;
        if ((size_t)t->length[id] == n && memcmp(t->file + t->offset[id], s, n) == 0)
            return id;
    }
}

/* keeps the first (lowest) id of entries with equal bytes */
static void table_insert(gptoss_tokenizer *t, int id) {
    const uint8_t *s = t->file + t->offset[id];
    size_t n = (size_t)t->length[id];
    if (gptoss_tokenizer_find(t, s, n) >= 0)
        return;
    uint64_t h = hash_bytes(s, n);
    uint64_t i = h & t->mask;
    while (t->table[i] != 0)
        i = (i + 1) & t->mask;
    t->table[i] = (h >> 32) << 32 | (uint64_t)(uint32_t)(id + 1);
}

/* Reads the file once its size is plausible: vocab_size records of at most
 * max_token_length bytes bound it, so a wrong file (a model .bin, say) is
 * refused from its first four bytes instead of being read into memory. */
static gptoss_status read_whole_file(const char *path, int vocab_size, uint8_t **data, size_t *size,
                                     char *err) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return gptoss_fail(err, GPTOSS_E_IO, "cannot open tokenizer file '%s': %s", path,
                           strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return gptoss_fail(err, GPTOSS_E_IO, "cannot read tokenizer file '%s': not a regular file",
                           path);
    }
    *size = (size_t)st.st_size;
    uint8_t head[4];
    if (*size < 4 || fread(head, 1, 4, f) != 4) {
        fclose(f);
        /* too short is the file's content; a failed read of 4 bytes it has, the file system's */
        return gptoss_fail(err, *size < 4 ? GPTOSS_E_INVALID : GPTOSS_E_IO,
                           "tokenizer file '%s' has %zu bytes, too few for the max_token_length "
                           "field",
                           path, *size);
    }
    int32_t max_len = read_i32(head);
    uint64_t most = 4 + (uint64_t)vocab_size * (8 + (uint64_t)(max_len > 0 ? max_len : 0));
    if (max_len > 0 && *size > most) {
        fclose(f);
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "tokenizer file '%s' has %zu bytes, more than %d entries of at most %d "
                           "bytes (max_token_length) can fill (%llu): not a tokenizer.bin for "
                           "vocab_size=%d?",
                           path, *size, vocab_size, max_len, (unsigned long long)most, vocab_size);
    }
    gptoss_status s = GPTOSS_OK;
    *data = malloc(*size);
    if (!*data)
        s = gptoss_fail(err, GPTOSS_E_HOST_MEMORY,
                        "tokenizer file '%s': out of host memory for %zu bytes", path, *size);
    else if (memcpy(*data, head, 4), fread(*data + 4, 1, *size - 4, f) != *size - 4) {
        s = gptoss_fail(err, GPTOSS_E_IO, "cannot read tokenizer file '%s': %s", path,
                        ferror(f) ? strerror(errno) : "short read");
        free(*data);
        *data = NULL;
    }
    fclose(f);
    return s;
}

/* Walks the records without allocating; every length is checked against the
 * bytes that remain before it is used (GPTOSS_E_INVALID). */
static gptoss_status validate(const uint8_t *file, size_t size, int vocab_size, const char *path,
                              char *err) {
    int32_t max_len = read_i32(file); /* read_whole_file saw at least these 4 bytes */
    if (max_len <= 0)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "tokenizer file '%s': max_token_length is %d, must be positive", path,
                           max_len);
    size_t pos = 4;
    int count = 0;
    for (; pos < size; count++) {
        if (count == vocab_size)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "tokenizer file '%s' holds more than vocab_size=%d entries (%zu "
                               "bytes follow entry %d)",
                               path, vocab_size, size - pos, vocab_size - 1);
        if (size - pos < 8)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "tokenizer file '%s' is truncated: entry %d at byte %zu needs 8 "
                               "bytes of score and length, %zu remain",
                               path, count, pos, size - pos);
        int32_t len = read_i32(file + pos + 4);
        if (len < 0 || len > max_len)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "tokenizer file '%s': entry %d at byte %zu has length %d, outside "
                               "0..%d (max_token_length)",
                               path, count, pos, len, max_len);
        if ((size_t)len > size - pos - 8)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "tokenizer file '%s' is truncated: entry %d at byte %zu has length "
                               "%d, %zu bytes remain",
                               path, count, pos, len, size - pos - 8);
        pos += 8 + (size_t)len;
    }
    if (count != vocab_size)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "tokenizer file '%s' holds %d entries, expected vocab_size=%d (give "
                           "{vocab_size=%d} if that is the model's vocabulary)",
                           path, count, vocab_size, count);
    return GPTOSS_OK;
}

gptoss_status gptoss_tokenizer_load(const char *path, int vocab_size, gptoss_tokenizer **out,
                                    char *err) {
    if (vocab_size <= 0)
        return gptoss_fail(err, GPTOSS_E_INVALID, "tokenizer: vocab_size must be positive (got %d)",
                           vocab_size);
    size_t size = 0;
    uint8_t *file = NULL;
    gptoss_status s = read_whole_file(path, vocab_size, &file, &size, err);
    return s ? s : gptoss_tokenizer_from_records(file, size, vocab_size, path, out, err);
}

gptoss_status gptoss_tokenizer_from_records(uint8_t *file, size_t size, int vocab_size, const char *path,
                                            gptoss_tokenizer **out, char *err) {
    gptoss_status s = size < 4 ? gptoss_fail(err, GPTOSS_E_INVALID, "tokenizer '%s' has %zu bytes, too few for the "
                                             "max_token_length field", path, size)
                               : validate(file, size, vocab_size, path, err);
    if (s) {
        free(file);
        return s;
    }
    gptoss_tokenizer *t = calloc(1, sizeof *t);
    uint64_t slots = 1;
    while (slots < 2 * (uint64_t)vocab_size)
        slots <<= 1;
    if (t) {
        t->file = file;
        t->offset = malloc(sizeof *t->offset * (size_t)vocab_size);
        t->length = malloc(sizeof *t->length * (size_t)vocab_size);
        t->score = malloc(sizeof *t->score * (size_t)vocab_size);
        t->special = malloc((size_t)vocab_size);
        t->table = calloc(slots, sizeof *t->table);
    }
    if (!t || !t->offset || !t->length || !t->score || !t->special || !t->table) {
        if (t)
            gptoss_tokenizer_free(t);
        else
            free(file);
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "tokenizer file '%s': out of host memory", path);
    }
    t->vocab_size = vocab_size;
    t->max_token_length = read_i32(file);
    t->mask = slots - 1;
    size_t pos = 4;
    for (int id = 0; id < vocab_size; id++) {
        memcpy(&t->score[id], file + pos, 4);
        t->length[id] = read_i32(file + pos + 4);
        t->offset[id] = pos + 8;
        t->special[id] = t->score[id] <= GPTOSS_SPECIAL_SCORE;
        pos += 8 + (size_t)t->length[id];
    }
    for (int id = 0; id < vocab_size; id++)
        table_insert(t, id);
    /* A byte on its own: its raw entry, else "<0xHH>" (how the exporter stores
     * 0x00), else 0 as the course does for an unknown byte. */
    for (int b = 0; b < 256; b++) {
        uint8_t raw = (uint8_t)b;
        char hex[7];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        int id = gptoss_tokenizer_find(t, &raw, 1);
        if (id < 0)
            id = gptoss_tokenizer_find(t, (const uint8_t *)hex, 6);
        t->byte_id[b] = id < 0 ? 0 : id;
        t->byte_value[b] = raw;
    }
    *out = t;
    return GPTOSS_OK;
}

void gptoss_tokenizer_free(gptoss_tokenizer *t) {
    if (!t)
        return;
    free(t->file);
    free(t->offset);
    free(t->length);
    free(t->score);
    free(t->special);
    free(t->table);
    free(t);
}

int gptoss_tokenizer_vocab_size(const gptoss_tokenizer *t) { return t->vocab_size; }
int gptoss_tokenizer_max_token_length(const gptoss_tokenizer *t) { return t->max_token_length; }
int gptoss_tokenizer_is_special(const gptoss_tokenizer *t, int id) { return t->special[id]; }

const uint8_t *gptoss_tokenizer_entry(const gptoss_tokenizer *t, int id, size_t *len, float *score) {
    *len = (size_t)t->length[id];
    if (score)
        *score = t->score[id];
    return t->file + t->offset[id];
}

static int hex_digit(uint8_t c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

const uint8_t *gptoss_tokenizer_piece(const gptoss_tokenizer *t, int id, size_t *len) {
    const uint8_t *s = gptoss_tokenizer_entry(t, id, len, NULL);
    if (*len == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>') {
        int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
        if (hi >= 0 && lo >= 0) {
            *len = 1;
            return &t->byte_value[hi * 16 + lo];
        }
    }
    return s;
}

/* ---- encode ---- */

/* Per-call scratch, grown to the longest piece. Parts are named by their
 * start offset: nxt[a] is where part a ends, prv[a] where the part before it
 * starts, pid[a] its token id. heap holds (rank << 32 | a) for every part
 * whose pair with its right neighbour is in the vocabulary; hpos[a] is that
 * entry's heap index. */
typedef struct {
    size_t cap;
    uint32_t *nxt, *prv, *hpos;
    int32_t *pid;
    uint64_t *heap;
    size_t heap_n;
} bpe_work;

static void work_free(bpe_work *w) {
    free(w->nxt);
    free(w->prv);
    free(w->hpos);
    free(w->pid);
    free(w->heap);
}

static gptoss_status work_reserve(bpe_work *w, size_t n, char *err) {
    if (n <= w->cap)
        return GPTOSS_OK;
    if (n >= NONE)
        return gptoss_fail(err, GPTOSS_E_INVALID, "a piece of %zu bytes is too long to encode", n);
    size_t cap = w->cap ? w->cap : 256;
    while (cap < n)
        cap *= 2;
    /* a failure part-way leaves every array at least w->cap entries long, as before */
    if (gptoss_grow(&w->nxt, cap * sizeof *w->nxt) || gptoss_grow(&w->prv, cap * sizeof *w->prv) ||
        gptoss_grow(&w->hpos, cap * sizeof *w->hpos) || gptoss_grow(&w->pid, cap * sizeof *w->pid) ||
        gptoss_grow(&w->heap, cap * sizeof *w->heap))
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for a piece of %zu bytes",
                           n);
    w->cap = cap;
    return GPTOSS_OK;
}

static void heap_place(bpe_work *w, size_t i, uint64_t key) {
    w->heap[i] = key;
    w->hpos[(uint32_t)key] = (uint32_t)i;
}

static void sift_up(bpe_work *w, size_t i) {
    uint64_t key = w->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (w->heap[parent] <= key)
            break;
        heap_place(w, i, w->heap[parent]);
        i = parent;
    }
    heap_place(w, i, key);
}

static void sift_down(bpe_work *w, size_t i) {
    uint64_t key = w->heap[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= w->heap_n)
            break;
        if (child + 1 < w->heap_n && w->heap[child + 1] < w->heap[child])
            child++;
        if (w->heap[child] >= key)
            break;
        heap_place(w, i, w->heap[child]);
        i = child;
    }
    heap_place(w, i, key);
}

static void heap_remove(bpe_work *w, uint32_t part) {
    size_t i = w->hpos[part];
    if (i == NONE)
        return;
    w->hpos[part] = NONE;
    size_t last = --w->heap_n;
    if (i == last)
        return;
    uint64_t moved = w->heap[last];
    heap_place(w, i, moved);
    if (i > 0 && w->heap[(i - 1) / 2] > moved)
        sift_up(w, i);
    else
        sift_down(w, i);
}

static void heap_set(bpe_work *w, uint32_t part, uint32_t rank) {
    uint64_t key = (uint64_t)rank << 32 | part;
    size_t i = w->hpos[part];
    if (i == NONE) {
        i = w->heap_n++;
        heap_place(w, i, key);
        sift_up(w, i);
        return;
    }
    uint64_t old = w->heap[i];
    heap_place(w, i, key);
    if (key < old)
        sift_up(w, i);
    else
        sift_down(w, i);
}

/* the rank of s[a..e) as a merge: its id, unless absent or special */
static int32_t merge_rank(const gptoss_tokenizer *t, const uint8_t *s, uint32_t a, uint32_t e) {
    int id = gptoss_tokenizer_find(t, s + a, e - a);
    return id < 0 || t->special[id] ? -1 : id;
}

/* recomputes the candidate of part a (its pair with the next part) */
static void refresh(const gptoss_tokenizer *t, bpe_work *w, const uint8_t *s, uint32_t n, uint32_t a) {
    uint32_t b = w->nxt[a];
    int32_t rank = b < n ? merge_rank(t, s, a, w->nxt[b]) : -1;
    if (rank < 0)
        heap_remove(w, a);
    else
        heap_set(w, a, (uint32_t)rank);
}

static gptoss_status push_id(gptoss_ids *out, int32_t id, char *err) {
    if (out->n == out->cap) {
        size_t cap = out->cap ? out->cap * 2 : 64;
        if (gptoss_grow(&out->ids, cap * sizeof *out->ids))
            return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for %zu token ids",
                               cap);
        out->cap = cap;
    }
    out->ids[out->n++] = id;
    return GPTOSS_OK;
}

static gptoss_status encode_piece(const gptoss_tokenizer *t, bpe_work *w, const uint8_t *s,
                                  size_t len, gptoss_ids *out, char *err) {
    gptoss_status st = work_reserve(w, len, err);
    if (st)
        return st;
    uint32_t n = (uint32_t)len;
    w->heap_n = 0;
    for (uint32_t i = 0; i < n; i++) {
        w->nxt[i] = i + 1;
        w->prv[i] = i ? i - 1 : NONE;
        w->pid[i] = t->byte_id[s[i]];
        w->hpos[i] = NONE;
    }
    for (uint32_t i = 0; i + 1 < n; i++) {
        int32_t rank = merge_rank(t, s, i, i + 2);
        if (rank >= 0)
            heap_place(w, w->heap_n++, (uint64_t)rank << 32 | i);
    }
    for (size_t i = w->heap_n / 2; i-- > 0;)
        sift_down(w, i);
    while (w->heap_n > 0) {
        uint64_t top = w->heap[0];
        uint32_t a = (uint32_t)top, b = w->nxt[a], e = w->nxt[b];
        heap_remove(w, a);
        heap_remove(w, b);
        w->nxt[a] = e;
        w->pid[a] = (int32_t)(top >> 32);
        if (e < n)
            w->prv[e] = a;
        refresh(t, w, s, n, a);
        if (w->prv[a] != NONE)
            refresh(t, w, s, n, w->prv[a]);
    }
    for (uint32_t a = 0; a < n; a = w->nxt[a])
        if ((st = push_id(out, w->pid[a], err)))
            return st;
    return GPTOSS_OK;
}

static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

/* the course's pre-split: digit runs in chunks of three from the left, every
 * maximal run of other bytes one piece */
static gptoss_status split_course(const gptoss_tokenizer *t, bpe_work *w, const uint8_t *s,
                                  size_t len, gptoss_ids *out, char *err) {
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        int digits = is_digit(s[i]);
        while (j < len && is_digit(s[j]) == digits)
            j++;
        for (size_t k = i; k < j; k += digits ? 3 : j - k) {
            size_t piece = digits && j - k > 3 ? 3 : j - k;
            gptoss_status st = encode_piece(t, w, s + k, piece, out, err);
            if (st)
                return st;
        }
        i = j;
    }
    return GPTOSS_OK;
}

typedef struct {
    const gptoss_tokenizer *t;
    bpe_work *w;
    gptoss_ids *out;
} o200k_encode;

/* an o200k piece: its own id when the vocabulary has it (tiktoken looks the
 * whole piece up before merging), else merged */
static gptoss_status encode_o200k_piece(void *ctx, const uint8_t *s, size_t len, char *err) {
    o200k_encode *e = ctx;
    int id = gptoss_tokenizer_find(e->t, s, len);
    return id >= 0 && !e->t->special[id] ? push_id(e->out, id, err) : encode_piece(e->t, e->w, s, len, e->out, err);
}

static gptoss_status encode_text(const gptoss_tokenizer *t, bpe_work *w, gptoss_split split, const uint8_t *s,
                                 size_t len, gptoss_ids *out, char *err) {
    if (split == GPTOSS_SPLIT_COURSE)
        return split_course(t, w, s, len, out, err);
    o200k_encode e = {t, w, out};
    return gptoss_o200k_split(s, len, encode_o200k_piece, &e, err);
}

/* the special token spelled at s[0..), or -1 */
static int special_at(const gptoss_tokenizer *t, const uint8_t *s, size_t left) {
    size_t limit = left < (size_t)t->max_token_length ? left : (size_t)t->max_token_length;
    for (size_t k = 2; k + 1 < limit; k++)
        if (s[k] == '|' && s[k + 1] == '>') {
            int id = gptoss_tokenizer_find(t, s, k + 2);
            return id >= 0 && t->special[id] ? id : -1;
        }
    return -1;
}

gptoss_status gptoss_tokenizer_encode(const gptoss_tokenizer *t, const uint8_t *text, size_t len,
                                      int special, gptoss_split split, gptoss_ids *out, char *err) {
    bpe_work w = {0};
    gptoss_status rc = GPTOSS_OK;
    size_t start = 0;
    for (size_t i = 0; special && !rc && i + 1 < len; i++) {
        if (text[i] != '<' || text[i + 1] != '|')
            continue;
        int id = special_at(t, text + i, len - i);
        if (id < 0)
            continue;
        size_t n;
        gptoss_tokenizer_entry(t, id, &n, NULL);
        rc = encode_text(t, &w, split, text + start, i - start, out, err);
        if (!rc)
            rc = push_id(out, id, err);
        start = i + n;
        i = start - 1;
    }
    if (!rc)
        rc = encode_text(t, &w, split, text + start, len - start, out, err);
    work_free(&w);
    return rc;
}

void gptoss_ids_free(gptoss_ids *ids) {
    free(ids->ids);
    ids->ids = NULL;
    ids->n = ids->cap = 0;
}

size_t gptoss_utf8_complete_prefix(const uint8_t *s, size_t n) {
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        uint8_t c = s[n - back];
        if ((c & 0xC0) == 0x80)
            continue; /* a continuation byte: look further back for its lead */
        /* C0, C1 and F5..FF never start a valid sequence: nothing to wait for */
        size_t need = c < 0xC2 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 1;
        return back < need ? n - back : n;
    }
    return n;
}
