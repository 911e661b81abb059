/* A matcher: the pushdown automaton over the bytes of the tokens accepted.
 * Its configuration is a set of parse stacks (more than one where the
 * grammar is ambiguous so far), kept after every token so that rolling
 * back is dropping the last ones. A mask ORs the cached tokens of each
 * stack's top state and walks the cached suffixes from the stack below it
 * (grammar_cache.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_matcher.h"

/* configuration i's stacks: configs[starts[i] .. starts[i+1] or the end) */
static const int32_t *config(const gptoss_matcher *m, int32_t *n) {
    int32_t last = m->starts.n - 1;
    *n = m->configs.n - m->starts.v[last];
    return m->configs.v + m->starts.v[last];
}

int gm_current(gptoss_matcher *m, char *err, gptoss_status *st) {
    if (m->closed_valid)
        return 0;
    int32_t n;
    const int32_t *set = config(m, &n);
    m->closed.n = 0;
    int rc = gm_closure(&m->st, set, n, &m->closed);
    if (rc < 0) {
        *st = gm_stack_failure(rc, err);
        return -1;
    }
    m->closed_ends = rc;
    m->closed_valid = 1;
    return 0;
}

int gm_walk(gptoss_matcher *m, const int32_t *closed, int32_t n, const uint8_t *bytes, uint32_t len) {
    for (uint32_t i = 0; i < len; i++) {
        m->a.n = 0;
        int rc = gm_step(&m->st, closed, n, bytes[i], &m->a);
        if (rc < 0 || m->a.n == 0)
            return rc < 0 ? rc : (int)i + 1;
        if (i + 1 == len)
            break;
        m->b.n = 0;
        rc = gm_closure(&m->st, m->a.v, m->a.n, &m->b);
        if (rc < 0)
            return rc;
        closed = m->b.v, n = m->b.n;
    }
    return 0;
}

/* "token 17 ("ab\x0a")" */
static const char *describe(const gptoss_vocab *v, int32_t id, char *buf, size_t cap) {
    uint32_t len;
    const uint8_t *p = gm_token(v, id, &len);
    size_t k = (size_t)snprintf(buf, cap, "token %d (\"", id);
    uint32_t i = 0;
    for (; i < len && k + 11 < cap; i++) /* room left for a "\xhh" and the ending "...\")" */
        k += (size_t)(p[i] >= 0x20 && p[i] < 0x7F && p[i] != '"' && p[i] != '\\'
                          ? snprintf(buf + k, cap - k, "%c", p[i])
                          : snprintf(buf + k, cap - k, "\\x%02x", p[i]));
    snprintf(buf + k, cap - k, i < len ? "...\")" : "\")");
    return buf;
}

/* Whether the token may come now: 1, or 0 with the reason in err, or -1
 * with the failure in err (*st). After a 1 for a text token, m->a holds
 * the stacks it leads to. */
static int check(gptoss_matcher *m, int32_t token, char *err, gptoss_status *st) {
    char what[96];
    if (token < 0 || token >= m->v->size) {
        gptoss_fail(err, GPTOSS_E_INVALID, "token %d is out of range 0..%d", token, m->v->size - 1);
        return 0;
    }
    if (m->ended >= 0) {
        gptoss_fail(err, GPTOSS_E_INVALID, "%s cannot follow: an end token came already", describe(m->v, token, what, sizeof what));
        return 0;
    }
    if (gm_current(m, err, st))
        return -1;
    if (m->end_bits[token >> 5] >> (token & 31) & 1) {
        if (!m->closed_ends)
            gptoss_fail(err, GPTOSS_E_INVALID, "end token %d is not allowed yet: the output is not complete", token);
        return m->closed_ends;
    }
    uint32_t len;
    const uint8_t *bytes = gm_token(m->v, token, &len);
    if (len == 0) {
        gptoss_fail(err, GPTOSS_E_INVALID, "token %d is a special token, allowed only among the end tokens", token);
        return 0;
    }
    int rc = gm_walk(m, m->closed.v, m->closed.n, bytes, len);
    if (rc < 0) {
        *st = gm_stack_failure(rc, err);
        return -1;
    }
    if (rc > 0)
        gptoss_fail(err, GPTOSS_E_INVALID, "%s does not fit the grammar here (at its byte %d)",
                    describe(m->v, token, what, sizeof what), rc);
    return rc == 0;
}

gptoss_status gptoss_matcher_accept(gptoss_matcher *m, int32_t token, char *err) {
    gptoss_status st = GPTOSS_E_INVALID;
    int ok = check(m, token, err, &st);
    if (ok <= 0)
        return st;
    int end = m->end_bits[token >> 5] >> (token & 31) & 1;
    int32_t n;
    config(m, &n);
    if (gm_ints_reserve(&m->configs, m->configs.n + (end ? n : m->a.n)) || gm_ints_push(&m->starts, m->configs.n))
        return gm_stack_failure(GM_NOMEM, err);
    const int32_t *from = end ? m->configs.v + m->starts.v[m->starts.n - 2] : m->a.v; /* an end token keeps the stacks */
    memcpy(m->configs.v + m->configs.n, from, (size_t)(end ? n : m->a.n) * sizeof *from);
    m->configs.n += end ? n : m->a.n;
    if (end)
        m->ended = m->starts.n - 1;
    m->closed_valid = 0;
    return GPTOSS_OK;
}

int gptoss_matcher_allows(gptoss_matcher *m, int32_t token, char *err) {
    gptoss_status st = GPTOSS_OK;
    char why[GPTOSS_ERR_LEN];
    int ok = check(m, token, why, &st);
    if (ok < 0)
        snprintf(err, GPTOSS_ERR_LEN, "%s", why);
    return ok;
}

int gptoss_matcher_tokens(const gptoss_matcher *m) { return m->starts.n - 1; }
int gptoss_matcher_vocab_size(const gptoss_matcher *m) { return m->v->size; }
int gptoss_matcher_mask_words(const gptoss_matcher *m) { return m->v->words; }
int gptoss_matcher_ended(const gptoss_matcher *m) { return m->ended >= 0; }

int gptoss_matcher_done(gptoss_matcher *m, char *err) {
    gptoss_status st;
    if (m->ended >= 0)
        return 1;
    return gm_current(m, err, &st) ? -1 : m->closed_ends;
}

gptoss_status gptoss_matcher_rollback(gptoss_matcher *m, int n, char *err) {
    int tokens = m->starts.n - 1;
    if (n < 0 || n > tokens)
        return gptoss_fail(err, GPTOSS_E_INVALID, "cannot roll back %d tokens: %d were accepted", n, tokens);
    if (n == 0)
        return GPTOSS_OK;
    m->configs.n = m->starts.v[tokens - n + 1];
    m->starts.n -= n;
    if (m->ended > tokens - n)
        m->ended = -1;
    m->closed_valid = 0;
    return GPTOSS_OK;
}

/* the matcher's scratch, sized for its vocabulary and grammar */
static int scratch(gptoss_matcher *m) {
    m->seen = calloc((size_t)m->g->states + 1, sizeof *m->seen);
    m->depth_at = malloc(((size_t)m->v->longest + 1) * sizeof *m->depth_at);
    m->depth_n = malloc(((size_t)m->v->longest + 1) * sizeof *m->depth_n);
    return m->seen && m->depth_at && m->depth_n ? 0 : GM_NOMEM;
}

static gptoss_matcher *blank(gptoss_constraint *c) {
    gptoss_matcher *m = calloc(1, sizeof *m);
    if (m) {
        m->c = gptoss_constraint_retain(c);
        m->g = c->g;
        m->v = c->v;
        m->ended = -1;
        m->end_bits = calloc((size_t)m->v->words, sizeof *m->end_bits);
    }
    return m;
}

gptoss_status gptoss_matcher_new(gptoss_constraint *c, const int32_t *end_ids, int n_end, gptoss_matcher **out,
                                 char *err) {
    for (int i = 0; i < n_end; i++)
        if (end_ids[i] < 0 || end_ids[i] >= c->v->size)
            return gptoss_fail(err, GPTOSS_E_INVALID, "end token %d is out of range 0..%d", end_ids[i], c->v->size - 1);
    gptoss_matcher *m = blank(c);
    int rc = !m || !m->end_bits || scratch(m) || gm_stacks_init(&m->st, c->g);
    int32_t start = rc ? -1 : gm_intern(&m->st, c->g->root, 0, 0);
    if (rc || start < 0 || gm_ints_push(&m->configs, start) || gm_ints_push(&m->starts, 0)) {
        gptoss_matcher_free(m);
        return gm_stack_failure(GM_NOMEM, err);
    }
    m->end_lo = n_end > 0 ? c->v->words : 0;
    for (int i = 0; i < n_end; i++) {
        int32_t w = end_ids[i] >> 5;
        m->end_bits[w] |= 1u << (end_ids[i] & 31);
        m->end_lo = w < m->end_lo ? w : m->end_lo;
        m->end_hi = w + 1 > m->end_hi ? w + 1 : m->end_hi;
    }
    *out = m;
    return GPTOSS_OK;
}

static int copy_ints(gm_ints *to, const gm_ints *from) {
    if (gm_ints_reserve(to, from->n > 0 ? from->n : 1))
        return GM_NOMEM;
    memcpy(to->v, from->v, (size_t)from->n * sizeof *to->v);
    to->n = from->n;
    return 0;
}

gptoss_status gptoss_matcher_fork(const gptoss_matcher *m, gptoss_matcher **out, char *err) {
    gptoss_matcher *f = blank(m->c);
    int rc = !f || !f->end_bits || scratch(f) || gm_stacks_copy(&f->st, &m->st) || copy_ints(&f->configs, &m->configs) ||
             copy_ints(&f->starts, &m->starts);
    if (rc) {
        gptoss_matcher_free(f);
        return gm_stack_failure(GM_NOMEM, err);
    }
    memcpy(f->end_bits, m->end_bits, (size_t)m->v->words * sizeof *f->end_bits);
    f->end_lo = m->end_lo, f->end_hi = m->end_hi;
    f->ended = m->ended;
    *out = f;
    return GPTOSS_OK;
}

void gptoss_matcher_free(gptoss_matcher *m) {
    if (!m)
        return;
    gm_stacks_free(&m->st);
    free(m->configs.v), free(m->starts.v), free(m->closed.v), free(m->a.v), free(m->b.v), free(m->pool.v);
    free(m->end_bits), free(m->seen), free(m->depth_at), free(m->depth_n);
    gptoss_constraint_release(m->c);
    free(m);
}
