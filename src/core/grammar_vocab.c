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

static void trie_free(gm_trie *t) {
    free(t->sorted), free(t->key), free(t->here), free(t->end), free(t->first), free(t->plain);
}

static void vocab_free(gptoss_vocab *v) {
    if (!v)
        return;
    trie_free(&v->trie), trie_free(&v->others);
    free(v->offset), free(v->length), free(v->bytes), free(v->content_masks);
    free(v->suffixes), free(v->suffix_rank), free(v->suffix_first);
    free(v);
}

/* the bytes of every text token, and the text tokens in order (*n of them) */
static int copy_tokens(gptoss_vocab *v, const gptoss_tokenizer *t, gm_token_key **order, int32_t *n) {
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
    *n = 0;
    for (int id = 0; id < v->size; id++) {
        size_t len;
        const uint8_t *p = gptoss_tokenizer_piece(t, id, &len);
        if (gptoss_tokenizer_is_special(t, id) || len > GM_MAX_TOKEN_BYTES) /* a special token is an end token or nothing */
            len = 0;
        memcpy(v->bytes + at, p, len);
        v->offset[id] = (uint32_t)at;
        v->length[id] = (uint32_t)len;
        if (len) {
            k[(*n)++] = (gm_token_key){v->bytes + at, (uint32_t)len, id};
            v->longest = (int)len > v->longest ? (int)len : v->longest;
        }
        at += len;
    }
    qsort(k, (size_t)*n, sizeof *k, gm_token_key_order);
    *order = k;
    return 0;
}

/* room for n nodes */
static int node_room(gm_trie *t, size_t n) {
    uint16_t *key = realloc(t->key, n * sizeof *key), *here = key ? realloc(t->here, n * sizeof *here) : NULL;
    if (key)
        t->key = key;
    if (here)
        t->here = here;
    uint32_t *end = here ? realloc(t->end, n * sizeof *end) : NULL, *first = end ? realloc(t->first, n * sizeof *first) : NULL;
    if (end)
        t->end = end;
    if (first)
        t->first = first;
    return first ? 0 : -1;
}

/* The nodes of the tokens k[0..count): each token adds one node a byte
 * beyond what it shares with the token before it; a node's subtree ends
 * where a node at its depth or above comes next. */
static int build_trie(gm_trie *t, const gm_token_key *k, int32_t count) {
    size_t cap = 1024;
    uint32_t path[GM_MAX_TOKEN_BYTES + 1]; /* the open node at each depth */
    t->sorted = malloc(((size_t)count + 1) * sizeof *t->sorted);
    if (!t->sorted || node_room(t, cap))
        return -1;
    t->nsorted = count;
    uint32_t n = 0, open = 0;
    for (int32_t i = 0; i < count; i++) {
        uint32_t shared = 0;
        if (i)
            while (shared < k[i].len && shared < k[i - 1].len && k[i].p[shared] == k[i - 1].p[shared])
                shared++;
        for (; open > shared; open--)
            t->end[path[open]] = n;
        for (uint32_t d = shared + 1; d <= k[i].len; d++) {
            if (n == cap && node_room(t, cap *= 2))
                return -1;
            t->key[n] = (uint16_t)(d << 8 | k[i].p[d - 1]);
            t->here[n] = 0;
            t->first[n] = (uint32_t)i;
            path[d] = n++;
            open = d;
        }
        t->here[path[k[i].len]]++; /* duplicates end at the same node */
        t->sorted[i] = k[i].id;
    }
    for (; open > 0; open--)
        t->end[path[open]] = n;
    t->nnodes = n;
    return 0;
}

/* Each node's plain length, from the nodes after it: its children's come
 * after it in preorder, so a pass backwards folds them into it. */
static int plain_lengths(gm_trie *t) {
    int longest[GM_MAX_TOKEN_BYTES + 2] = {0}; /* per depth: the children folded so far, -1 once one is not plain */
    t->plain = malloc(t->nnodes + 1);
    if (!t->plain)
        return -1;
    for (uint32_t i = t->nnodes; i-- > 0;) {
        int d = t->key[i] >> 8, below = longest[d + 1];
        longest[d + 1] = 0;
        int mine = gm_plain((uint8_t)t->key[i]) && below >= 0 ? 1 + below : -1;
        t->plain[i] = (uint8_t)(mine > 0 ? mine : 0); /* at most a token's 255 bytes */
        longest[d] = longest[d] < 0 || mine < 0 ? -1 : mine > longest[d] ? mine : longest[d];
    }
    return 0;
}

static int trie_of(gm_trie *t, const gm_token_key *k, int32_t count) {
    return build_trie(t, k, count) || plain_lengths(t);
}

/* The content tokens' masks by their characters, and the trie of the other
 * tokens (k[0..count) in order, kept in place). */
static int split_content(gptoss_vocab *v, gm_token_key *k, int32_t count) {
    int32_t *chars = malloc(((size_t)count + 1) * sizeof *chars), others = 0;
    if (!chars)
        return -1;
    for (int32_t i = 0; i < count; i++) {
        chars[i] = gm_content_chars(k[i].p, k[i].len);
        v->content_most = chars[i] > v->content_most ? chars[i] : v->content_most;
    }
    size_t words = (size_t)v->words;
    v->content_masks = calloc(((size_t)v->content_most + 1) * words, sizeof *v->content_masks);
    for (int32_t i = 0; v->content_masks && i < count; i++)
        if (chars[i] >= 0)
            v->content_masks[(size_t)chars[i] * words + (size_t)(k[i].id >> 5)] |= 1u << (k[i].id & 31);
        else
            k[others++] = k[i];
    for (size_t n = 1; v->content_masks && n <= (size_t)v->content_most; n++) /* mask n: at most n characters */
        for (size_t w = n * words; w < (n + 1) * words; w++)
            v->content_masks[w] |= v->content_masks[w - words];
    free(chars);
    return !v->content_masks || trie_of(&v->others, k, others);
}

/* The others' suffixes in order, and the rank of each. */
static int rank_suffixes(gptoss_vocab *v) {
    const gm_trie *t = &v->others;
    int32_t *index = malloc((size_t)v->size * sizeof *index); /* per id: its place in t->sorted */
    v->suffix_first = malloc(((size_t)t->nsorted + 1) * sizeof *v->suffix_first);
    if (!index || !v->suffix_first)
        return free(index), -1;
    int32_t n = 0;
    for (int32_t k = 0; k < t->nsorted; k++) {
        index[t->sorted[k]] = k;
        v->suffix_first[k] = n;
        n += (int32_t)v->length[t->sorted[k]] - 1;
    }
    v->suffixes = malloc(((size_t)n + 1) * sizeof *v->suffixes);
    v->suffix_rank = malloc(((size_t)n + 1) * sizeof *v->suffix_rank);
    for (int32_t k = 0, at = 0; v->suffixes && k < t->nsorted; k++) {
        uint32_t len;
        const uint8_t *p = gm_token(v, t->sorted[k], &len);
        for (uint32_t from = 1; from < len; from++)
            v->suffixes[at++] = (gm_token_key){p + from, len - from, t->sorted[k]};
    }
    if (v->suffixes && v->suffix_rank) {
        qsort(v->suffixes, (size_t)n, sizeof *v->suffixes, gm_token_key_order);
        for (int32_t r = 0; r < n; r++) {
            const gm_token_key *s = &v->suffixes[r];
            v->suffix_rank[v->suffix_first[index[s->id]] + (int32_t)(s->p - (v->bytes + v->offset[s->id])) - 1] = r;
        }
        v->nsuffixes = n;
    }
    free(index);
    return v->suffixes && v->suffix_rank ? 0 : -1;
}

gptoss_status gptoss_vocab_new(const gptoss_tokenizer *t, gptoss_vocab **out, char *err) {
    gptoss_vocab *v = calloc(1, sizeof *v);
    gm_token_key *order = NULL;
    int32_t count = 0;
    int rc = !v;
    if (v) {
        atomic_init(&v->refs, 1);
        v->size = gptoss_tokenizer_vocab_size(t);
        v->words = (v->size + 31) / 32;
        v->offset = malloc((size_t)v->size * sizeof *v->offset);
        v->length = malloc((size_t)v->size * sizeof *v->length);
        rc = !v->offset || !v->length || copy_tokens(v, t, &order, &count) || trie_of(&v->trie, order, count) ||
             split_content(v, order, count) || rank_suffixes(v);
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
