/* A tokenizer's vocabulary as the matchers walk it: every text token's bytes
 * in a trie laid out in preorder, so that a walk is one pass over an array
 * and a refused prefix skips its whole subtree (o200k: 200k tokens, 420k
 * nodes). */
#include <stdlib.h>
#include <string.h>

#include "grammar_match.h"

int gm_token_key_order(const void *a, const void *b) {
    const gm_token_key *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    if (c)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void vocab_free(gptoss_vocab *v) {
    if (!v)
        return;
    free(v->sorted), free(v->offset), free(v->length), free(v->bytes);
    free(v->key), free(v->here), free(v->end), free(v->first), free(v->plain);
    free(v);
}

/* the bytes of every text token, and the order of the text tokens */
static int copy_tokens(gptoss_vocab *v, const gptoss_tokenizer *t, gm_token_key **order) {
    size_t total = 0;
    for (int id = 0; id < v->size; id++) {
        size_t len;
        gptoss_tokenizer_piece(t, id, &len);
        total += gptoss_tokenizer_is_special(t, id) || len > GM_MAX_TOKEN_BYTES ? 0 : len;
    }
    v->bytes = malloc(total ? total : 1);
    gm_token_key *k = malloc((size_t)v->size * sizeof *k);
    if (!v->bytes || !k || total > UINT32_MAX) {
        free(k);
        return -1;
    }
    size_t at = 0;
    for (int id = 0; id < v->size; id++) {
        size_t len;
        const uint8_t *p = gptoss_tokenizer_piece(t, id, &len);
        if (gptoss_tokenizer_is_special(t, id) || len > GM_MAX_TOKEN_BYTES) /* a special token is an end token or nothing */
            len = 0;
        memcpy(v->bytes + at, p, len);
        v->offset[id] = (uint32_t)at;
        v->length[id] = (uint32_t)len;
        if (len) {
            k[v->nsorted++] = (gm_token_key){v->bytes + at, (uint32_t)len, id};
            v->longest = (int)len > v->longest ? (int)len : v->longest;
        }
        at += len;
    }
    qsort(k, (size_t)v->nsorted, sizeof *k, gm_token_key_order);
    *order = k;
    return 0;
}

/* room for n nodes */
static int node_room(gptoss_vocab *v, size_t n) {
    uint16_t *key = realloc(v->key, n * sizeof *key), *here = key ? realloc(v->here, n * sizeof *here) : NULL;
    if (key)
        v->key = key;
    if (here)
        v->here = here;
    uint32_t *end = here ? realloc(v->end, n * sizeof *end) : NULL, *first = end ? realloc(v->first, n * sizeof *first) : NULL;
    if (end)
        v->end = end;
    if (first)
        v->first = first;
    return first ? 0 : -1;
}

/* The nodes: each token adds one node a byte beyond what it shares with the
 * token before it; a node's subtree ends where a node at its depth or above
 * comes next. */
static int build_trie(gptoss_vocab *v, const gm_token_key *k) {
    size_t cap = 1024;
    uint32_t path[GM_MAX_TOKEN_BYTES + 1]; /* the open node at each depth */
    if (node_room(v, cap))
        return -1;
    uint32_t n = 0, open = 0;
    for (int32_t i = 0; i < v->nsorted; i++) {
        uint32_t shared = 0;
        if (i)
            while (shared < k[i].len && shared < k[i - 1].len && k[i].p[shared] == k[i - 1].p[shared])
                shared++;
        for (; open > shared; open--)
            v->end[path[open]] = n;
        for (uint32_t d = shared + 1; d <= k[i].len; d++) {
            if (n == cap && node_room(v, cap *= 2))
                return -1;
            v->key[n] = (uint16_t)(d << 8 | k[i].p[d - 1]);
            v->here[n] = 0;
            v->first[n] = (uint32_t)i;
            path[d] = n++;
            open = d;
        }
        v->here[path[k[i].len]]++; /* duplicates end at the same node */
        v->sorted[i] = k[i].id;
    }
    for (; open > 0; open--)
        v->end[path[open]] = n;
    v->nnodes = n;
    return 0;
}

/* Each node's plain length, from the nodes after it: its children's come
 * after it in preorder, so a pass backwards folds them into it. */
static int plain_lengths(gptoss_vocab *v) {
    int longest[GM_MAX_TOKEN_BYTES + 2] = {0}; /* per depth: the children folded so far, -1 once one is not plain */
    v->plain = malloc(v->nnodes + 1);
    if (!v->plain)
        return -1;
    for (uint32_t i = v->nnodes; i-- > 0;) {
        int d = v->key[i] >> 8, below = longest[d + 1];
        longest[d + 1] = 0;
        int mine = gm_plain((uint8_t)v->key[i]) && below >= 0 ? 1 + below : -1;
        v->plain[i] = (uint8_t)(mine > 0 ? mine : 0); /* at most a token's 255 bytes */
        longest[d] = longest[d] < 0 || mine < 0 ? -1 : mine > longest[d] ? mine : longest[d];
    }
    return 0;
}

gptoss_status gptoss_vocab_new(const gptoss_tokenizer *t, gptoss_vocab **out, char *err) {
    gptoss_vocab *v = calloc(1, sizeof *v);
    gm_token_key *order = NULL;
    int rc = !v;
    if (v) {
        atomic_init(&v->refs, 1);
        v->size = gptoss_tokenizer_vocab_size(t);
        v->words = (v->size + 31) / 32;
        v->offset = malloc((size_t)v->size * sizeof *v->offset);
        v->length = malloc((size_t)v->size * sizeof *v->length);
        v->sorted = malloc((size_t)v->size * sizeof *v->sorted);
        rc = !v->offset || !v->length || !v->sorted || copy_tokens(v, t, &order) || build_trie(v, order) ||
             plain_lengths(v);
    }
    free(order);
    if (rc) {
        vocab_free(v);
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for the vocabulary's trie");
    }
    *out = v;
    return GPTOSS_OK;
}

gptoss_vocab *gptoss_vocab_retain(gptoss_vocab *v) {
    atomic_fetch_add(&v->refs, 1);
    return v;
}

void gptoss_vocab_release(gptoss_vocab *v) {
    if (v && atomic_fetch_sub(&v->refs, 1) == 1)
        vocab_free(v);
}

int gptoss_vocab_size(const gptoss_vocab *v) { return v->size; }
int gptoss_vocab_mask_words(const gptoss_vocab *v) { return v->words; }
