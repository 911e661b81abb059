/* The product of two call-free DFAs (the strings in both languages: a
 * number's syntax and its bounds), and whether a DFA matches anything. */
#include <stdlib.h>
#include <string.h>

#include "grammar_internal.h"

/* the product's classes: bytes that fall into one class of each side */
static void product_classes(const gm_dfa *x, const gm_dfa *y, gm_dfa *out, uint8_t *rep) {
    out->classes = 0;
    for (int byte = 0; byte < 256; byte++) {
        int c = 0;
        while (c < out->classes && (x->cls[rep[c]] != x->cls[byte] || y->cls[rep[c]] != y->cls[byte]))
            c++;
        if (c == out->classes)
            rep[out->classes++] = (uint8_t)byte;
        out->cls[byte] = (uint8_t)c;
    }
}

typedef struct {
    int64_t *keys; /* x state * y states + y state, -1 empty */
    int32_t *ids;
    size_t nslots;
} pair_map;

static size_t pair_slot(const pair_map *m, int64_t key) {
    size_t h = (size_t)((uint64_t)key * 0x9E3779B97F4A7C15u >> 20) & (m->nslots - 1);
    while (m->keys[h] >= 0 && m->keys[h] != key)
        h = (h + 1) & (m->nslots - 1);
    return h;
}

/* twice the slots, the pairs of the states so far put back */
static int pair_rehash(pair_map *m, const int64_t *pairs, int32_t states) {
    pair_map bigger = {malloc(2 * m->nslots * sizeof *m->keys), malloc(2 * m->nslots * sizeof *m->ids), 2 * m->nslots};
    if (!bigger.keys || !bigger.ids) {
        free(bigger.keys), free(bigger.ids);
        return -1;
    }
    memset(bigger.keys, 0xff, bigger.nslots * sizeof *bigger.keys);
    for (int32_t id = 0; id < states; id++) {
        size_t h = pair_slot(&bigger, pairs[id]);
        bigger.keys[h] = pairs[id];
        bigger.ids[h] = id;
    }
    free(m->keys), free(m->ids);
    *m = bigger;
    return 0;
}

/* the product state of key, added (and queued as pairs[id]) when new */
static int32_t product_state(gm_builder *b, pair_map *m, int64_t key, gm_dfa *out, int64_t **pairs) {
    size_t h = pair_slot(m, key);
    if (m->keys[h] == key)
        return m->ids[h];
    if (out->states >= GM_MAX_DFA_STATES || (size_t)out->states * (size_t)out->classes >= GM_MAX_TABLE) {
        gm_fail(b, "the grammar is too large: bounds whose automaton needs more than %d states", out->states);
        return -1;
    }
    int32_t id = out->states + 1;
    int64_t *p = realloc(*pairs, (size_t)id * sizeof *p);
    int32_t *next = realloc(out->next, (size_t)id * (size_t)out->classes * sizeof *next);
    if (p)
        *pairs = p;
    if (next)
        out->next = next;
    if (!p || !next) {
        gm_fail_memory(b);
        return -1;
    }
    id = out->states++;
    (*pairs)[id] = key;
    if ((size_t)out->states * 2 >= m->nslots) {
        if (pair_rehash(m, *pairs, out->states)) {
            gm_fail_memory(b);
            return -1;
        }
        return id;
    }
    m->keys[h] = key;
    m->ids[h] = id;
    return id;
}

int gm_dfa_intersect(gm_builder *b, const gm_dfa *x, const gm_dfa *y, gm_dfa *out) {
    memset(out, 0, sizeof *out);
    uint8_t rep[256];
    product_classes(x, y, out, rep);
    pair_map m = {.nslots = 256};
    int64_t *pairs = NULL;
    m.keys = malloc(m.nslots * sizeof *m.keys);
    m.ids = malloc(m.nslots * sizeof *m.ids);
    int rc = !m.keys || !m.ids ? (gm_fail_memory(b), -1) : 0;
    if (!rc) {
        memset(m.keys, 0xff, m.nslots * sizeof *m.keys);
        rc = product_state(b, &m, 0, out, &pairs) < 0;
    }
    for (int32_t id = 0; !rc && id < out->states; id++) {
        int32_t sx = (int32_t)(pairs[id] / y->states), sy = (int32_t)(pairs[id] % y->states);
        for (int c = 0; !rc && c < out->classes; c++) {
            int32_t tx = gm_next(x, sx, rep[c]), ty = gm_next(y, sy, rep[c]), to = -1;
            if (tx >= 0 && ty >= 0)
                rc = (to = product_state(b, &m, (int64_t)tx * y->states + ty, out, &pairs)) < 0;
            if (!rc)
                out->next[(size_t)id * (size_t)out->classes + (size_t)c] = to;
        }
        b->budget -= out->classes;
    }
    if (!rc && (!(out->flags = malloc((size_t)out->states)) || !(out->call_first = calloc((size_t)out->states + 1, sizeof *out->call_first))))
        rc = -1, gm_fail_memory(b);
    for (int32_t id = 0; !rc && id < out->states; id++) {
        int32_t sx = (int32_t)(pairs[id] / y->states), sy = (int32_t)(pairs[id] % y->states);
        out->flags[id] = (x->flags[sx] & y->flags[sy] & GM_FINAL);
    }
    if (!rc)
        gm_dfa_flag(out);
    free(m.keys), free(m.ids), free(pairs);
    if (rc)
        gm_dfa_free(out);
    return rc ? -1 : 0;
}

int gm_dfa_matches_something(const gm_dfa *d) {
    uint8_t *seen = calloc((size_t)d->states, 1);
    int32_t *queue = malloc((size_t)d->states * sizeof *queue);
    int found = 0, n = 0;
    if (seen && queue && d->states) {
        queue[n++] = 0;
        seen[0] = 1;
    }
    for (int i = 0; i < n && !found; i++) {
        found = d->flags[queue[i]] & GM_FINAL;
        for (int c = 0; c < d->classes; c++) {
            int32_t t = d->next[(size_t)queue[i] * (size_t)d->classes + (size_t)c];
            if (t >= 0 && !seen[t]) {
                seen[t] = 1;
                queue[n++] = t;
            }
        }
    }
    free(seen);
    free(queue);
    return found;
}
