/* The constraint's cache: for one rule state, which tokens the state takes
 * whatever lies below it on the stack (llguidance's and xgrammar's idea).
 *
 * One walk of the vocabulary's trie from a frame alone over an empty
 * stack: a token whose bytes the frame (and whatever it calls) takes whole
 * is accepted for good; a prefix the frame refuses, unless the frame could
 * have ended on the way, refuses its whole subtree; and where the frame
 * could end after k >= 1 bytes, the rest of the token (its suffix from k)
 * is what the stack below must take. The matcher ORs the accepted tokens
 * and walks only the distinct suffixes from the real stack below, sharing
 * their prefixes. Most of a walk stays with the frame's own DFA (a string's
 * body, a number's digits): one table lookup a trie node, or none for a
 * subtree of plain text the state has room for. A state that counts a
 * string's characters (a content_left) walks only the trie of the tokens
 * that are not string content: each content token it takes or refuses by
 * its characters alone, never leaving the frame (gm_content_left), so the
 * vocabulary's mask of that many characters holds those it takes. */
#include <stdlib.h>
#include <string.h>

#include "grammar_match.h"

/* where the walk is after a prefix: the frame alone at `state` (fast), or
 * a closed set of stacks in pool[at .. at+n); ends: the frame could have
 * ended right here, so the stack below could take the rest */
typedef struct {
    int fast, ends;
    int32_t state;
    int32_t at, n;
} walk_point;

typedef struct {
    gptoss_constraint *c;
    const gm_trie *trie; /* the vocabulary's, or for a state with a content_left its tokens that are not content */
    const gm_dfa *rule;
    int32_t r, state;
    gm_stacks st;
    gm_ints pool, scratch;
    walk_point *points; /* per depth, for the points that are not fast */
    int32_t *fast;      /* per depth: the frame's state where the point is fast, else -1 */
    int32_t *pool_end;  /* per depth: the pool's length with the sets up to it */
    int32_t *pops;      /* pops[d]: depths 1..d where the frame could end */
    uint32_t *bits;     /* the accepted tokens */
    int32_t naccepted;
    gm_token_key *keys;
    size_t nkeys, cap;
    uint64_t *ranked; /* over the others' trie: a bit per suffix rank (grammar_match.h), the keys found */
    int failure;      /* GM_NOMEM or GM_AMBIGUOUS */
} walk;

/* The point after the frame alone moved to state t: fast unless t calls
 * rules, in which case the calls are made (a closed set). */
static int settle(walk *w, int32_t t, walk_point *out) {
    const gm_dfa *d = w->rule;
    if (d->call_first[t] == d->call_first[t + 1]) {
        *out = (walk_point){1, d->flags[t] & GM_FINAL, t, 0, 0};
        return 1;
    }
    int32_t id = gm_intern(&w->st, w->r, t, 0);
    out->fast = 0;
    out->at = w->pool.n;
    int rc = id < 0 ? GM_NOMEM : gm_closure(&w->st, &id, 1, &w->pool);
    if (rc < 0)
        return w->failure = rc, 0;
    out->ends = rc;
    out->n = w->pool.n - out->at;
    return 1;
}

/* The point after byte from `from` (depth 0 takes only the frame's own
 * bytes: what it calls, the matcher reaches through the callees' frames);
 * 0 when the byte is refused. */
static int advance(walk *w, const walk_point *from, uint8_t byte, walk_point *out) {
    if (from->fast) {
        int32_t t = gm_next(w->rule, from->state, byte);
        return t >= 0 && settle(w, t, out);
    }
    w->scratch.n = 0;
    int rc = gm_step(&w->st, w->pool.v + from->at, from->n, byte, &w->scratch);
    if (rc < 0 || w->scratch.n == 0)
        return rc < 0 ? (w->failure = rc, 0) : 0;
    const gm_frame *only = &w->st.frames[w->scratch.v[0]];
    if (w->scratch.n == 1 && only->parent == 0) /* the frame alone again */
        return settle(w, only->state, out);
    out->fast = 0;
    out->at = w->pool.n;
    rc = gm_closure(&w->st, w->scratch.v, w->scratch.n, &w->pool);
    if (rc < 0)
        return w->failure = rc, 0;
    out->ends = rc;
    out->n = w->pool.n - out->at;
    return 1;
}

static int add_key(walk *w, int32_t id, uint32_t from) {
    if (w->nkeys == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 256;
        gm_token_key *k = realloc(w->keys, cap * sizeof *k);
        if (!k)
            return w->failure = GM_NOMEM, -1;
        w->keys = k;
        w->cap = cap;
    }
    uint32_t len;
    const uint8_t *p = gm_token(w->c->v, id, &len);
    w->keys[w->nkeys++] = (gm_token_key){p + from, len - from, id};
    return 0;
}

/* The tokens below trie node i, refused by the frame at depth d: their
 * suffixes from each depth before d where the frame could have ended. */
static int add_suffixes(walk *w, uint32_t i, int d) {
    const gptoss_vocab *v = w->c->v;
    const gm_trie *t = w->trie;
    for (uint32_t k = t->first[i]; k < gm_subtree_tokens_end(t, i); k++)
        for (int at = 1; at < d; at++) {
            if (w->pops[at] == w->pops[at - 1])
                continue;
            if (!w->ranked && add_key(w, t->sorted[k], (uint32_t)at))
                return -1;
            if (w->ranked) { /* each (token, at) comes once: a refused subtree is left at once */
                int32_t rank = v->suffix_rank[v->suffix_first[k] + at - 1];
                w->ranked[rank >> 6] |= 1ull << (rank & 63);
                w->nkeys++;
            }
        }
    return 0;
}

/* The keys in order: by their ranks' bits, or sorted. */
static int order_keys(walk *w) {
    if (!w->ranked) {
        if (w->nkeys > 1)
            qsort(w->keys, w->nkeys, sizeof *w->keys, gm_token_key_order);
        return 0;
    }
    const gptoss_vocab *v = w->c->v;
    free(w->keys);
    if (!(w->keys = malloc((w->nkeys + 1) * sizeof *w->keys)))
        return -1;
    size_t n = 0;
    for (int32_t word = 0; word < (v->nsuffixes + 63) / 64; word++)
        for (uint64_t b = w->ranked[word]; b; b &= b - 1)
            w->keys[n++] = v->suffixes[word * 64 + __builtin_ctzll(b)];
    return 0;
}

/* Sets the bits of the tokens that end at node i; returns how many. Without
 * a branch for the usual none or one: whether a node ends a token is as
 * good as random, and a mispredicted branch a node would cost more than
 * the rest of the walk. */
static inline int32_t accept_node(const gm_trie *v, uint32_t i, uint32_t *bits) {
    uint32_t here = v->here[i], k = v->first[i];
    int32_t id = v->sorted[k]; /* node i's first token (k < nsorted: every node leads to one) */
    bits[id >> 5] |= (uint32_t)(here != 0) << (id & 31);
    for (uint32_t more = 1; more < here; more++) /* the same bytes again: rare */
        bits[v->sorted[k + more] >> 5] |= 1u << (v->sorted[k + more] & 31);
    return (int32_t)here;
}

/* Sets the bits of every token below node i; returns how many. */
static int32_t accept_subtree(const gm_trie *v, uint32_t i, uint32_t *bits) {
    uint32_t end = gm_subtree_tokens_end(v, i);
    for (uint32_t k = v->first[i]; k < end; k++)
        bits[v->sorted[k] >> 5] |= 1u << (v->sorted[k] & 31);
    return (int32_t)(end - v->first[i]);
}

/* The walk over the whole trie. The frame alone on a state that calls
 * nothing (most of any walk) steps inline, on arrays a field, and takes a
 * subtree of plain text whole where the state has the room for it (a
 * string's body: most of the vocabulary, without a step a node); anything
 * else goes through advance. */
static int walk_trie(walk *w) {
    int32_t state = w->state;
    const gm_trie *v = w->trie;
    const gm_dfa *rule = w->rule;
    const uint16_t *key = v->key;
    const int32_t *next = rule->next;
    const uint8_t *cls = rule->cls, *flags = rule->flags, *room = rule->room;
    const size_t classes = (size_t)rule->classes;
    int32_t *fast = w->fast, *pops = w->pops, *pool_end = w->pool_end, accepted = 0;
    fast[0] = state, pops[0] = 0, pool_end[0] = 0;
    for (uint32_t i = 0; i < v->nnodes;) {
        int d = key[i] >> 8;
        if (fast[d - 1] >= 0 && v->plain[i] && room[fast[d - 1]] >= v->plain[i]) {
            accepted += accept_subtree(v, i, w->bits);
            i = v->end[i];
            continue;
        }
        int32_t t = fast[d - 1] >= 0 ? next[(size_t)fast[d - 1] * classes + cls[key[i] & 255]] : -1;
        if (t >= 0 && !(flags[t] & GM_HAS_CALLS)) {
            fast[d] = t;
            pops[d] = pops[d - 1] + (flags[t] & GM_FINAL);
            pool_end[d] = pool_end[d - 1];
            accepted += accept_node(v, i, w->bits);
            i++;
            continue;
        }
        w->pool.n = pool_end[d - 1]; /* the sets of deeper points are done with */
        walk_point *out = &w->points[d];
        int ok = fast[d - 1] >= 0 ? t >= 0 && settle(w, t, out) : advance(w, &w->points[d - 1], (uint8_t)key[i], out);
        if (!ok) {
            if (w->failure || (pops[d - 1] && add_suffixes(w, i, d)))
                return -1;
            i = v->end[i];
            continue;
        }
        fast[d] = out->fast ? out->state : -1;
        pops[d] = pops[d - 1] + out->ends;
        pool_end[d] = w->pool.n;
        accepted += accept_node(v, i, w->bits);
        i++;
    }
    w->naccepted = accepted;
    return 0;
}

static void entry_free(gm_entry *e) {
    if (e) {
        free(e->bits), free(e->ids), free(e->suffixes), free(e->suffix_tokens);
        free(e);
    }
}

/* The walk's findings as an entry: accepted tokens listed when they are
 * fewer than the bitset's words, suffixes sorted and told apart. A state
 * that takes every content token (a free string's body) keeps them among
 * its own, so that its masks take one pass over the words as before. */
static gm_entry *entry_of_walk(walk *w) {
    gm_entry *e = calloc(1, sizeof *e);
    const gptoss_vocab *v = w->c->v;
    int words = v->words, chars = w->rule->content_left[w->state];
    if (!e)
        return NULL;
    if (chars >= v->content_most) {
        const uint32_t *all = v->content_masks + (size_t)v->content_most * (size_t)words;
        w->naccepted = 0;
        for (int k = 0; k < words; k++)
            w->naccepted += __builtin_popcount(w->bits[k] |= all[k]);
    } else {
        e->content_chars = chars > 0 ? chars : 0;
    }
    e->naccepted = w->naccepted;
    if (w->naccepted <= words) {
        e->ids = malloc(((size_t)w->naccepted + 1) * sizeof *e->ids);
        for (int32_t k = 0, word = 0; e->ids && word < words; word++)
            for (uint32_t b = w->bits[word]; b; b &= b - 1) /* each set bit, lowest first */
                e->ids[k++] = word * 32 + __builtin_ctz(b);
    } else {
        e->bits = w->bits;
        w->bits = NULL;
    }
    if (order_keys(w)) {
        entry_free(e);
        return NULL;
    }
    e->suffixes = malloc((w->nkeys + 1) * sizeof *e->suffixes);
    e->suffix_tokens = malloc((w->nkeys + 1) * sizeof *e->suffix_tokens);
    if ((!e->ids && !e->bits) || !e->suffixes || !e->suffix_tokens) {
        entry_free(e);
        return NULL;
    }
    const gm_token_key *prev = NULL;
    for (size_t k = 0; k < w->nkeys; k++) {
        const gm_token_key *key = &w->keys[k];
        e->suffix_tokens[k] = key->id;
        if (prev && prev->len == key->len && !memcmp(prev->p, key->p, key->len)) {
            e->suffixes[e->nsuffixes - 1].count++;
            continue;
        }
        uint32_t lcp = 0;
        while (prev && lcp < prev->len && lcp < key->len && prev->p[lcp] == key->p[lcp])
            lcp++;
        uint32_t len;
        e->suffixes[e->nsuffixes++] = (gm_suffix){key->id, (uint32_t)(key->p - gm_token(w->c->v, key->id, &len)), lcp,
                                                  (int32_t)k, 1};
        prev = key;
    }
    return e;
}

static gm_entry *compute(gptoss_constraint *c, int32_t rule, int32_t state, int *failure) {
    const gptoss_vocab *v = c->v;
    walk w = {.c = c, .rule = &c->g->rules[rule], .r = rule, .state = state};
    int counted = w.rule->content_left[state] >= 0;
    w.trie = counted ? &v->others : &v->trie;
    size_t depths = (size_t)v->longest + 1;
    w.points = malloc(depths * sizeof *w.points);
    w.fast = malloc(depths * sizeof *w.fast);
    w.pool_end = malloc(depths * sizeof *w.pool_end);
    w.pops = malloc(depths * sizeof *w.pops);
    w.bits = calloc((size_t)v->words, sizeof *w.bits);
    w.ranked = counted ? calloc((size_t)v->nsuffixes / 64 + 1, sizeof *w.ranked) : NULL;
    gm_entry *e = NULL;
    if (!w.points || !w.fast || !w.pool_end || !w.pops || !w.bits || (counted && !w.ranked) ||
        gm_stacks_init(&w.st, c->g))
        w.failure = GM_NOMEM;
    else if (!walk_trie(&w) && !(e = entry_of_walk(&w)))
        w.failure = GM_NOMEM;
    *failure = w.failure;
    gm_stacks_free(&w.st);
    free(w.pool.v), free(w.scratch.v), free(w.points), free(w.fast), free(w.pool_end), free(w.pops), free(w.bits), free(w.keys);
    free(w.ranked);
    return e;
}

const gm_entry *gm_entry_of(gptoss_constraint *c, int32_t rule, int32_t state, gptoss_status *st, char *err) {
    _Atomic(gm_entry *) *slot = &c->entries[c->g->state_base[rule] + state];
    gm_entry *e = atomic_load(slot);
    if (e)
        return e;
    int failure = 0;
    e = compute(c, rule, state, &failure);
    if (!e) {
        *st = gm_stack_failure(failure ? failure : GM_NOMEM, err);
        return NULL;
    }
    gm_entry *none = NULL;
    if (!atomic_compare_exchange_strong(slot, &none, e)) { /* another thread's came first: the same */
        entry_free(e);
        e = none;
    }
    return e;
}

gptoss_status gptoss_constraint_new(gptoss_grammar *g, gptoss_vocab *v, gptoss_constraint **out, char *err) {
    gptoss_constraint *c = calloc(1, sizeof *c);
    _Atomic(gm_entry *) *entries = calloc((size_t)g->states + 1, sizeof *entries);
    if (!c || !entries) {
        free(c), free((void *)entries);
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for the constraint's cache");
    }
    atomic_init(&c->refs, 1);
    c->g = gptoss_grammar_retain(g);
    c->v = gptoss_vocab_retain(v);
    c->entries = entries;
    *out = c;
    return GPTOSS_OK;
}

gptoss_constraint *gptoss_constraint_retain(gptoss_constraint *c) {
    atomic_fetch_add(&c->refs, 1);
    return c;
}

void gptoss_constraint_release(gptoss_constraint *c) {
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    for (int32_t s = 0; s < c->g->states; s++)
        entry_free(atomic_load(&c->entries[s]));
    free((void *)c->entries);
    gptoss_grammar_release(c->g);
    gptoss_vocab_release(c->v);
    free(c);
}
