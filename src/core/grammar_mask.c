/* Masks and forced tokens of a matcher (grammar.h says what each means). */
#include <string.h>

#include "grammar_matcher.h"

static void set_bit(uint32_t *words, int32_t id) { words[id >> 5] |= 1u << (id & 31); }

/* The entry's suffixes that the stack `below` takes, their tokens set in
 * words. Suffixes come sorted: a walk keeps the closed sets of the bytes
 * it shares with the one before, and a refused prefix refuses every suffix
 * that starts with it. */
static int walk_suffixes(gptoss_matcher *m, const gm_entry *e, int32_t below, uint32_t *words) {
    m->pool.n = 0;
    int rc = gm_closure(&m->st, &below, 1, &m->pool);
    if (rc < 0)
        return rc;
    m->depth_at[0] = 0;
    m->depth_n[0] = m->pool.n;
    uint32_t known = 0, refused = 0; /* depths with sets for the last suffix walked; where it was refused */
    for (int32_t j = 0; j < e->nsuffixes; j++) {
        const gm_suffix *s = &e->suffixes[j];
        if (refused && s->lcp >= refused)
            continue;
        refused = 0;
        uint32_t len;
        const uint8_t *bytes = gm_token(m->v, s->token, &len) + s->from;
        len -= s->from;
        uint32_t d = s->lcp < known ? s->lcp : known;
        for (; d < len; d++) {
            m->pool.n = m->depth_at[d] + m->depth_n[d];
            m->a.n = 0;
            if ((rc = gm_step(&m->st, m->pool.v + m->depth_at[d], m->depth_n[d], bytes[d], &m->a)) < 0)
                return rc;
            if (m->a.n == 0) {
                refused = d + 1;
                break;
            }
            m->depth_at[d + 1] = m->pool.n;
            if ((rc = gm_closure(&m->st, m->a.v, m->a.n, &m->pool)) < 0)
                return rc;
            m->depth_n[d + 1] = m->pool.n - m->depth_at[d + 1];
        }
        known = d;
        for (int32_t k = 0; !refused && k < s->count; k++)
            set_bit(words, e->suffix_tokens[s->first + k]);
    }
    return 0;
}

/* ORs the tokens an entry accepts for good */
static void add_accepted(const gptoss_vocab *v, const gm_entry *e, uint32_t *words) {
    int nwords = v->words;
    if (e->content_chars) {
        const uint32_t *content = v->content_masks + (size_t)e->content_chars * (size_t)nwords;
        for (int w = 0; w < nwords; w++)
            words[w] |= content[w];
    }
    if (e->bits)
        for (int w = 0; w < nwords; w++)
            words[w] |= e->bits[w];
    else
        for (int32_t k = 0; k < e->naccepted; k++)
            set_bit(words, e->ids[k]);
}

gptoss_status gptoss_matcher_mask(gptoss_matcher *m, uint32_t *words, char *err) {
    memset(words, 0, (size_t)m->v->words * sizeof *words);
    gptoss_status st = GPTOSS_OK;
    if (m->ended >= 0)
        return GPTOSS_OK;
    if (gm_current(m, err, &st))
        return st;
    if (++m->stamp == 0) {
        memset(m->seen, 0, (size_t)m->g->states * sizeof *m->seen);
        m->stamp = 1;
    }
    for (int32_t i = 0; i < m->closed.n; i++) {
        if (m->closed.v[i] == 0)
            continue;
        gm_frame f = m->st.frames[m->closed.v[i]];
        if (!(m->g->rules[f.rule].flags[f.state] & GM_HAS_BYTES))
            continue; /* what it calls or returns to is in the set too */
        const gm_entry *e = gm_entry_of(m->c, f.rule, f.state, &st, err);
        if (!e)
            return st;
        int32_t state = m->g->state_base[f.rule] + f.state;
        if (m->seen[state] != m->stamp) {
            m->seen[state] = m->stamp;
            add_accepted(m->v, e, words);
        }
        int rc = f.parent && e->nsuffixes ? walk_suffixes(m, e, f.parent, words) : 0;
        if (rc < 0)
            return gm_stack_failure(rc, err);
    }
    for (int w = m->end_lo; w < m->end_hi; w++) { /* end tokens: only at the end */
        words[w] &= ~m->end_bits[w];
        words[w] |= m->closed_ends ? m->end_bits[w] : 0;
    }
    return GPTOSS_OK;
}

/* The forced bytes into buf (*n of them): while the output cannot end and
 * exactly one byte can come next. *must_end: nothing at all can follow them
 * but the end. */
static gptoss_status forced_walk(gptoss_matcher *m, uint8_t *buf, size_t cap, size_t *n, int *must_end, char *err) {
    gptoss_status st = GPTOSS_OK;
    *n = 0;
    *must_end = m->ended >= 0;
    if (*must_end || gm_current(m, err, &st))
        return st;
    const int32_t *set = m->closed.v;
    int32_t count = m->closed.n;
    for (int ends = m->closed_ends;;) {
        int next = -1, choices = 0;
        for (int byte = 0; byte < 256 && choices < 2; byte++)
            for (int32_t i = 0; i < count; i++) {
                gm_frame f = m->st.frames[set[i]];
                if (set[i] && gm_next(&m->g->rules[f.rule], f.state, (uint8_t)byte) >= 0) {
                    next = byte, choices++;
                    break;
                }
            }
        *must_end = ends && choices == 0;
        if (ends || choices != 1 || *n == cap)
            return GPTOSS_OK;
        buf[(*n)++] = (uint8_t)next;
        m->a.n = m->b.n = 0;
        int rc = gm_step(&m->st, set, count, (uint8_t)next, &m->a);
        ends = rc < 0 ? rc : gm_closure(&m->st, m->a.v, m->a.n, &m->b);
        if (ends < 0)
            return gm_stack_failure(ends, err);
        set = m->b.v, count = m->b.n;
    }
}

gptoss_status gptoss_matcher_forced_bytes(gptoss_matcher *m, uint8_t *buf, size_t cap, size_t *n, char *err) {
    int must_end;
    return forced_walk(m, buf, cap, n, &must_end, err);
}

/* the longest token that buf[0..n) starts with, and its length; -1 when none */
static int32_t longest_token(const gptoss_vocab *vocab, const uint8_t *buf, size_t n, uint32_t *len) {
    const gm_trie *v = &vocab->trie;
    int32_t best = -1;
    uint32_t i = 0, end = v->nnodes; /* the children of the node reached are nodes[i .. end) */
    for (size_t d = 0; d < n; d++) {
        while (i < end && (v->key[i] & 255) != buf[d])
            i = v->end[i];
        if (i >= end)
            break;
        if (v->here[i]) {
            best = v->sorted[v->first[i]]; /* the lowest id of those bytes */
            *len = (uint32_t)d + 1;
        }
        end = v->end[i];
        i++;
    }
    return best;
}

gptoss_status gptoss_matcher_forced(gptoss_matcher *m, int32_t *ids, int cap, int *n, char *err) {
    uint8_t buf[4096];
    size_t len;
    int must_end;
    gptoss_status st = forced_walk(m, buf, sizeof buf, &len, &must_end, err);
    *n = 0;
    if (st)
        return st;
    size_t at = 0;
    while (at < len && *n < cap) {
        uint32_t k = 0;
        int32_t id = longest_token(m->v, buf + at, len - at, &k);
        if (id < 0)
            break;
        at += k;
        if (at == len && !must_end) /* the model may join the last one with what it writes next */
            break;
        ids[(*n)++] = id;
    }
    return GPTOSS_OK;
}
