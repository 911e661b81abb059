/* Encode (tokenizer.h): the text cut into pieces, the course's way or
 * o200k's (o200k.c), special-token names taken whole when asked, and each
 * piece's BPE merges on an indexed min-heap. */
#include "tokenizer_internal.h"

#include <stdlib.h>

#include "grow.h"
#include "o200k.h"

#define NONE UINT32_MAX

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

/* The special token spelled from the "<|" at text[i]: the text up to the
 * first "|>" after it, when a special token has that length and those
 * bytes; else -1. *close is where that "|>" starts (len: none): the search
 * for it starts where the one for an earlier "<|" ended, and a lookup is
 * made only for the lengths special tokens have, so that a text of many
 * "<|" costs time linear in its length, however long the vocabulary's
 * entries are. */
static int special_at(const gptoss_tokenizer *t, const uint8_t *text, size_t len, size_t i, size_t *close) {
    if (*close < i + 2)
        for (*close = i + 2; *close + 1 < len && !(text[*close] == '|' && text[*close + 1] == '>'); ++*close)
            ;
    if (*close + 1 >= len)
        return -1;
    size_t n = *close + 2 - i;
    if (n > (size_t)t->max_token_length || !t->special_length[n])
        return -1;
    int id = gptoss_tokenizer_find(t, text + i, n);
    return id >= 0 && t->special[id] ? id : -1;
}

gptoss_status gptoss_tokenizer_encode(const gptoss_tokenizer *t, const uint8_t *text, size_t len,
                                      int special, gptoss_split split, gptoss_ids *out, char *err) {
    bpe_work w = {0};
    gptoss_status rc = GPTOSS_OK;
    size_t start = 0, close = 0;
    for (size_t i = 0; special && !rc && i + 1 < len; i++) {
        if (text[i] != '<' || text[i + 1] != '|')
            continue;
        int id = special_at(t, text, len, i, &close);
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
