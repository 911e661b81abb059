/* Determinising a rule's NFA by subsets, calls being edges labelled by
 * their rule (the product of two call-free DFAs is grammar_product.c's).
 * Bytes are grouped into the classes the NFA's ranges cut them into, so
 * the tables are states x classes. */
#include <stdlib.h>
#include <string.h>

#include "grammar_internal.h"

typedef struct {
    gm_builder *b;
    const gm_nfa *nfa;
    int32_t *first, *edge; /* the edges out of state s: edge[first[s] .. first[s+1]) */
    uint32_t *mark;
    uint32_t stamp;
    int32_t *stack, *closed;
    int32_t *pool; /* the subsets, one after another */
    size_t pool_n, pool_cap;
    size_t *set_at;
    int32_t *set_len;
    int32_t *slots; /* hash of a subset -> its state + 1 */
    size_t nslots;
    int32_t *targets, *count; /* per class */
    const gm_edge **out_edges; /* the edges out of one subset's states */
    size_t out_cap;
    gm_call *pairs;           /* a state's calls before grouping */
    size_t pairs_cap, calls_cap;
    gm_dfa *out;
    int32_t cap; /* states the tables have room for */
} subsets;

static int grow(subsets *d, void *array, size_t bytes) {
    void **p = array;
    void *q = realloc(*p, bytes);
    if (!q) {
        gm_fail_memory(d->b);
        return -1;
    }
    *p = q;
    return 0;
}

static int adjacency(subsets *d) {
    const gm_nfa *nfa = d->nfa;
    d->first = calloc((size_t)nfa->states + 1, sizeof *d->first);
    d->edge = malloc((nfa->n ? nfa->n : 1) * sizeof *d->edge);
    d->mark = calloc((size_t)nfa->states, sizeof *d->mark);
    d->stack = malloc((size_t)nfa->states * sizeof *d->stack);
    d->closed = malloc((size_t)nfa->states * sizeof *d->closed);
    if (!d->first || !d->edge || !d->mark || !d->stack || !d->closed) {
        gm_fail_memory(d->b);
        return -1;
    }
    for (size_t i = 0; i < nfa->n; i++)
        d->first[nfa->edges[i].from + 1]++;
    for (int32_t s = 0; s < nfa->states; s++)
        d->first[s + 1] += d->first[s];
    int32_t *fill = d->stack; /* borrowed as the write positions */
    memcpy(fill, d->first, (size_t)nfa->states * sizeof *fill);
    for (size_t i = 0; i < nfa->n; i++)
        d->edge[fill[nfa->edges[i].from]++] = (int32_t)i;
    return 0;
}

static int int_order(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* The states the seeds reach without a byte or a call, sorted into d->closed. */
static int32_t closure(subsets *d, const int32_t *seeds, int32_t n) {
    uint32_t stamp = ++d->stamp;
    int32_t top = 0, size = 0;
    for (int32_t i = 0; i < n; i++)
        if (d->mark[seeds[i]] != stamp) {
            d->mark[seeds[i]] = stamp;
            d->stack[top++] = seeds[i];
        }
    while (top) {
        int32_t s = d->stack[--top];
        d->closed[size++] = s;
        for (int32_t k = d->first[s]; k < d->first[s + 1]; k++) {
            const gm_edge *e = &d->nfa->edges[d->edge[k]];
            if (e->lo < 0 && e->rule < 0 && d->mark[e->to] != stamp) {
                d->mark[e->to] = stamp;
                d->stack[top++] = e->to;
            }
        }
    }
    qsort(d->closed, (size_t)size, sizeof *d->closed, int_order);
    d->b->budget -= size;
    return size;
}

static uint64_t hash_set(const int32_t *s, int32_t n) {
    uint64_t h = 1469598103934665603u;
    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)s[i]) * 1099511628211u;
    return h;
}

static int rehash(subsets *d) {
    size_t nslots = d->nslots ? 2 * d->nslots : 1024;
    int32_t *slots = calloc(nslots, sizeof *slots);
    if (!slots) {
        gm_fail_memory(d->b);
        return -1;
    }
    for (int32_t id = 0; id < d->out->states; id++) {
        size_t h = hash_set(d->pool + d->set_at[id], d->set_len[id]) & (nslots - 1);
        while (slots[h])
            h = (h + 1) & (nslots - 1);
        slots[h] = id + 1;
    }
    free(d->slots);
    d->slots = slots;
    d->nslots = nslots;
    return 0;
}

/* room for one more state in the tables */
static int add_room(subsets *d) {
    gm_dfa *o = d->out;
    if (o->states < d->cap)
        return 0;
    if (o->states >= GM_MAX_DFA_STATES || (size_t)o->states * (size_t)o->classes >= GM_MAX_TABLE) {
        gm_fail(d->b, "the grammar is too large: a rule needs more than %d automaton states", o->states);
        return -1;
    }
    int32_t cap = d->cap ? 2 * d->cap : 64;
    if (grow(d, &o->next, (size_t)cap * (size_t)o->classes * sizeof *o->next) ||
        grow(d, &o->flags, (size_t)cap) || grow(d, &o->call_first, ((size_t)cap + 1) * sizeof *o->call_first) ||
        grow(d, &d->set_at, (size_t)cap * sizeof *d->set_at) || grow(d, &d->set_len, (size_t)cap * sizeof *d->set_len))
        return -1;
    d->cap = cap;
    return 0;
}

/* The state of the subset in d->closed (n states), added when new; -1 on failure. */
static int32_t state_of(subsets *d, int32_t n) {
    if ((size_t)d->out->states * 2 >= d->nslots && rehash(d))
        return -1;
    size_t h = hash_set(d->closed, n) & (d->nslots - 1);
    for (; d->slots[h]; h = (h + 1) & (d->nslots - 1)) {
        int32_t id = d->slots[h] - 1;
        if (d->set_len[id] == n && !memcmp(d->pool + d->set_at[id], d->closed, (size_t)n * sizeof *d->closed))
            return id;
    }
    if (add_room(d))
        return -1;
    if (d->pool_n + (size_t)n > d->pool_cap) {
        size_t cap = 2 * (d->pool_n + (size_t)n);
        if (grow(d, &d->pool, cap * sizeof *d->pool))
            return -1;
        d->pool_cap = cap;
    }
    gm_dfa *o = d->out;
    int32_t id = o->states++;
    memcpy(d->pool + d->pool_n, d->closed, (size_t)n * sizeof *d->closed);
    d->set_at[id] = d->pool_n;
    d->set_len[id] = n;
    d->pool_n += (size_t)n;
    int final = bsearch(&(int32_t){1}, d->closed, (size_t)n, sizeof *d->closed, int_order) != NULL;
    o->flags[id] = final ? GM_FINAL : 0;
    for (int c = 0; c < o->classes; c++)
        o->next[(size_t)id * (size_t)o->classes + (size_t)c] = -1;
    d->slots[h] = id + 1;
    return id;
}

static int call_order(const void *a, const void *b) {
    const gm_call *x = a, *y = b;
    return x->rule != y->rule ? (x->rule < y->rule ? -1 : 1) : (x->next < y->next ? -1 : x->next > y->next);
}

/* The edges out of subset id's states into d->out_edges; how many, or -1. */
static int64_t member_edges(subsets *d, int32_t id) {
    size_t n = 0;
    for (int32_t i = 0; i < d->set_len[id]; i++) {
        int32_t s = d->pool[d->set_at[id] + (size_t)i];
        for (int32_t k = d->first[s]; k < d->first[s + 1]; k++) {
            if (n == d->out_cap && grow(d, &d->out_edges, (d->out_cap = 2 * n + 16) * sizeof *d->out_edges))
                return -1;
            d->out_edges[n++] = &d->nfa->edges[d->edge[k]];
        }
    }
    return (int64_t)n;
}

/* The state after each byte class of subset id (its edges in d->out_edges, n of them). */
static int byte_moves(subsets *d, int32_t id, int64_t n) {
    int classes = d->out->classes;
    memset(d->count, 0, (size_t)classes * 2 * sizeof *d->count);
    int32_t *at = d->count + classes;
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t k = 0; k < n; k++) {
            const gm_edge *e = d->out_edges[k];
            if (e->lo < 0)
                continue;
            for (int c = d->out->cls[e->lo]; c <= d->out->cls[e->hi]; c++) {
                if (pass)
                    d->targets[at[c]++] = e->to;
                else
                    d->count[c]++;
            }
        }
        if (!pass) {
            int32_t total = 0;
            for (int c = 0; c < classes; c++) {
                at[c] = total;
                total += d->count[c];
            }
            if (grow(d, &d->targets, ((size_t)total + 1) * sizeof *d->targets))
                return -1;
        }
    }
    d->b->budget -= classes;
    for (int c = 0; c < classes; c++) {
        if (!d->count[c])
            continue;
        int32_t to = state_of(d, closure(d, d->targets + at[c] - d->count[c], d->count[c]));
        if (to < 0)
            return -1;
        d->out->next[(size_t)id * (size_t)classes + (size_t)c] = to;
    }
    return 0;
}

/* The calls of subset id (its edges in d->out_edges, count of them), one
 * per rule, each to the subset its returns reach. */
static int call_moves(subsets *d, int32_t id, int64_t count) {
    size_t n = 0;
    for (int64_t k = 0; k < count; k++) {
        const gm_edge *e = d->out_edges[k];
        if (e->rule < 0)
            continue;
        if (n == d->pairs_cap && grow(d, &d->pairs, (d->pairs_cap = 2 * n + 8) * sizeof *d->pairs))
            return -1;
        d->pairs[n++] = (gm_call){e->rule, e->to};
    }
    if (n > 1)
        qsort(d->pairs, n, sizeof *d->pairs, call_order);
    if (grow(d, &d->targets, (n + 1) * sizeof *d->targets))
        return -1;
    gm_dfa *o = d->out;
    int32_t ncalls = o->call_first[id];
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i; j < n && d->pairs[j].rule == d->pairs[i].rule; j++)
            d->targets[j - i] = d->pairs[j].next;
        int32_t to = state_of(d, closure(d, d->targets, (int32_t)(j - i)));
        if (to < 0)
            return -1;
        if ((size_t)ncalls == d->calls_cap && grow(d, &o->calls, (d->calls_cap = 2 * d->calls_cap + 8) * sizeof *o->calls))
            return -1;
        o->calls[ncalls++] = (gm_call){d->pairs[i].rule, to};
    }
    o->call_first[id + 1] = ncalls;
    return 0;
}

/* the byte classes: bytes no range's edge tells apart share one */
static void byte_classes(const gm_nfa *nfa, gm_dfa *out) {
    uint8_t cut[257] = {0};
    for (size_t i = 0; i < nfa->n; i++)
        if (nfa->edges[i].lo >= 0) {
            cut[nfa->edges[i].lo] = 1;
            cut[nfa->edges[i].hi + 1] = 1;
        }
    int c = -1;
    for (int byte = 0; byte < 256; byte++) {
        c += byte == 0 || cut[byte];
        out->cls[byte] = (uint8_t)c;
    }
    out->classes = c + 1;
}

int gm_dfa_build(gm_builder *b, const gm_nfa *nfa, gm_dfa *out) {
    memset(out, 0, sizeof *out);
    subsets d = {.b = b, .nfa = nfa, .out = out};
    byte_classes(nfa, out);
    d.count = malloc(2 * (size_t)out->classes * sizeof *d.count);
    int rc = !d.count ? (gm_fail_memory(b), -1) : adjacency(&d);
    if (!rc) {
        int32_t start = 0;
        rc = state_of(&d, closure(&d, &start, 1)) < 0;
        if (!rc)
            out->call_first[0] = 0;
    }
    for (int32_t id = 0; !rc && id < out->states; id++) {
        int64_t n = member_edges(&d, id);
        rc = n < 0 || byte_moves(&d, id, n) || call_moves(&d, id, n);
        if (!rc && b->budget < 0)
            rc = -1, gm_fail(b, "the grammar is too complex: determinising it takes too long");
    }
    if (!rc)
        gm_dfa_flag(out);
    free(d.first), free(d.edge), free(d.mark), free(d.stack), free(d.closed), free(d.pool), free(d.set_at);
    free(d.set_len), free(d.slots), free(d.targets), free(d.count), free(d.pairs), free(d.out_edges);
    if (rc)
        gm_dfa_free(out);
    return rc ? -1 : 0;
}

void gm_dfa_flag(gm_dfa *d) {
    for (int32_t s = 0; s < d->states; s++) {
        d->flags[s] &= (uint8_t)~(GM_HAS_BYTES | GM_HAS_CALLS);
        if (d->call_first[s + 1] > d->call_first[s])
            d->flags[s] |= GM_HAS_CALLS;
        for (int c = 0; c < d->classes; c++)
            if (d->next[(size_t)s * (size_t)d->classes + (size_t)c] >= 0) {
                d->flags[s] |= GM_HAS_BYTES;
                break;
            }
    }
}

void gm_dfa_free(gm_dfa *d) {
    free(d->next), free(d->flags), free(d->room), free(d->content_left), free(d->call_first), free(d->calls);
    d->next = NULL, d->flags = NULL, d->room = NULL, d->content_left = NULL, d->call_first = NULL, d->calls = NULL;
    d->states = 0;
}
