/* Expressions to NFAs over bytes, Thompson's way: each expression is
 * written between two states, touching no edge into the first or out of the
 * second, so that alternatives and loops can share them. Characters become
 * their UTF-8 byte ranges; inside a JSON string the ones JSON must escape
 * become their escapes. */
#include <stdlib.h>
#include <string.h>

#include "grammar_internal.h"

static int new_state(gm_builder *b, gm_nfa *nfa) {
    if (b->failed)
        return -1;
    if (nfa->states >= GM_MAX_NFA_STATES) {
        gm_fail(b, "the grammar is too large: a rule needs more than %d automaton states", GM_MAX_NFA_STATES);
        return -1;
    }
    return nfa->states++;
}

static int add_edge(gm_builder *b, gm_nfa *nfa, int from, int to, int lo, int hi, int rule) {
    if (b->failed)
        return -1;
    if (nfa->n == nfa->cap) {
        size_t cap = nfa->cap ? 2 * nfa->cap : 64;
        gm_edge *e = realloc(nfa->edges, cap * sizeof *e);
        if (!e) {
            gm_fail_memory(b);
            return -1;
        }
        nfa->edges = e;
        nfa->cap = cap;
    }
    nfa->edges[nfa->n++] = (gm_edge){from, to, (int16_t)lo, (int16_t)hi, rule};
    return 0;
}

static int epsilon(gm_builder *b, gm_nfa *nfa, int from, int to) { return add_edge(b, nfa, from, to, -1, -1, -1); }

/* a chain of n byte ranges from `from` to `to` */
static int chain(gm_builder *b, gm_nfa *nfa, const uint8_t *lo, const uint8_t *hi, int n, int from, int to) {
    if (n == 0)
        return epsilon(b, nfa, from, to);
    int at = from;
    for (int i = 0; i < n; i++) {
        int next = i == n - 1 ? to : new_state(b, nfa);
        if (next < 0 || add_edge(b, nfa, at, next, lo[i], hi[i], -1))
            return -1;
        at = next;
    }
    return 0;
}

/* The code points lo..hi as UTF-8: split until each piece is one chain of
 * byte ranges (the first bytes of lo and hi differ only where every
 * continuation is allowed). */
static int utf8_range(gm_builder *b, gm_nfa *nfa, uint32_t lo, uint32_t hi, int from, int to) {
    static const uint32_t LAST_OF_LENGTH[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= LAST_OF_LENGTH[i] && hi > LAST_OF_LENGTH[i])
            return utf8_range(b, nfa, lo, LAST_OF_LENGTH[i], from, to) ||
                   utf8_range(b, nfa, LAST_OF_LENGTH[i] + 1, hi, from, to);
    for (int i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) == (hi & ~m))
            continue;
        if (lo & m)
            return utf8_range(b, nfa, lo, lo | m, from, to) || utf8_range(b, nfa, (lo | m) + 1, hi, from, to);
        if ((hi & m) != m)
            return utf8_range(b, nfa, lo, (hi & ~m) - 1, from, to) || utf8_range(b, nfa, hi & ~m, hi, from, to);
    }
    uint8_t a[4], z[4];
    int n = gm_utf8_encode(lo, a);
    gm_utf8_encode(hi, z);
    return chain(b, nfa, a, z, n, from, to);
}

/* How JSON writes a character it must escape. */
static int json_escape(uint32_t cp, uint8_t *out) {
    static const char HEX[] = "0123456789abcdef";
    const char *named = cp == '"' ? "\\\"" : cp == '\\' ? "\\\\" : cp == '\b' ? "\\b" : cp == '\f' ? "\\f"
                      : cp == '\n' ? "\\n" : cp == '\r' ? "\\r" : cp == '\t' ? "\\t" : NULL;
    if (named) {
        memcpy(out, named, 2);
        return 2;
    }
    memcpy(out, "\\u00", 4);
    out[4] = (uint8_t)HEX[cp >> 4];
    out[5] = (uint8_t)HEX[cp & 15];
    return 6;
}

static int json_special(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

static int chars(gm_builder *b, gm_nfa *nfa, const gm_ast *x, int from, int to) {
    for (int i = 0; i < x->n; i++) {
        uint32_t lo = x->ranges[i].lo, hi = x->ranges[i].hi;
        while (x->json && lo <= hi && lo < 0x5D) { /* the escaped ones are all below ']' */
            uint32_t run = lo;
            while (run <= hi && run < 0x5D && !json_special(run))
                run++;
            if (run > lo && utf8_range(b, nfa, lo, run - 1, from, to))
                return -1;
            if (run <= hi && run < 0x5D) {
                uint8_t esc[6];
                int n = json_escape(run, esc);
                if (chain(b, nfa, esc, esc, n, from, to))
                    return -1;
                run++;
            }
            lo = run;
        }
        if (lo <= hi && utf8_range(b, nfa, lo, hi, from, to))
            return -1;
    }
    return 0;
}

static int emit(gm_builder *b, gm_nfa *nfa, const gm_ast *x, int from, int to);

static int repeat(gm_builder *b, gm_nfa *nfa, const gm_ast *x, int from, int to) {
    int at = from;
    for (int i = 0; i < x->min; i++) {
        int next = new_state(b, nfa);
        if (next < 0 || emit(b, nfa, x->kids[0], at, next))
            return -1;
        at = next;
    }
    if (x->max == GM_UNBOUNDED) {
        int loop = new_state(b, nfa);
        return loop < 0 || epsilon(b, nfa, at, loop) || emit(b, nfa, x->kids[0], loop, loop) ||
               epsilon(b, nfa, loop, to);
    }
    for (int i = x->min; i < x->max; i++) {
        int next = new_state(b, nfa);
        if (next < 0 || epsilon(b, nfa, at, to) || emit(b, nfa, x->kids[0], at, next))
            return -1;
        at = next;
    }
    return epsilon(b, nfa, at, to);
}

/* JSON members: from "first" states (nothing written yet) and "rest" states
 * (a member written, so the next needs the separator), one pair a member,
 * which the member's presence moves along: 2n states for any mix of
 * required and optional members. */
static int object(gm_builder *b, gm_nfa *nfa, const gm_ast *x, int from, int to) {
    if (x->n == 0)
        return epsilon(b, nfa, from, to);
    int first = from, rest = -1;
    for (int i = 0; i < x->n; i++) {
        int last = i == x->n - 1;
        int next_first = last ? to : new_state(b, nfa), next_rest = last ? to : new_state(b, nfa);
        if (next_first < 0 || next_rest < 0 || emit(b, nfa, x->kids[i], first, next_rest))
            return -1;
        if (rest >= 0) {
            int mid = new_state(b, nfa);
            if (mid < 0 || emit(b, nfa, x->sep, rest, mid) || emit(b, nfa, x->kids[i], mid, next_rest))
                return -1;
        }
        if (!x->required[i] && (epsilon(b, nfa, first, next_first) || (rest >= 0 && epsilon(b, nfa, rest, next_rest))))
            return -1;
        first = next_first;
        rest = next_rest;
    }
    return 0;
}

/* a call-free expression's DFA */
static int dfa_of(gm_builder *b, const gm_ast *x, gm_dfa *out) {
    gm_nfa sub = {0};
    int rc = gm_nfa_build(b, x, &sub) || gm_dfa_build(b, &sub, out);
    gm_nfa_free(&sub);
    return rc;
}

/* Both languages: the product of the kids' DFAs, written in as it is. */
static int intersection(gm_builder *b, gm_nfa *nfa, const gm_ast *x, int from, int to) {
    gm_dfa l = {0}, r = {0}, both = {0};
    int rc = dfa_of(b, x->kids[0], &l) || dfa_of(b, x->kids[1], &r) || gm_dfa_intersect(b, &l, &r, &both);
    if (!rc && !gm_dfa_matches_something(&both)) {
        gm_fail(b, "%s", x->what);
        rc = -1;
    }
    int base = nfa->states;
    for (int s = 0; !rc && s < both.states; s++)
        rc = new_state(b, nfa) < 0;
    rc = rc || epsilon(b, nfa, from, base);
    for (int s = 0; !rc && s < both.states; s++) {
        for (int lo = 0, hi; !rc && lo < 256; lo = hi + 1) {
            int32_t t = gm_next(&both, s, (uint8_t)lo);
            for (hi = lo; hi < 255 && gm_next(&both, s, (uint8_t)(hi + 1)) == t; hi++) {}
            if (t >= 0)
                rc = add_edge(b, nfa, base + s, base + t, lo, hi, -1);
        }
        if (!rc && (both.flags[s] & GM_FINAL))
            rc = epsilon(b, nfa, base + s, to);
    }
    gm_dfa_free(&l);
    gm_dfa_free(&r);
    gm_dfa_free(&both);
    return rc ? -1 : 0;
}

static int emit(gm_builder *b, gm_nfa *nfa, const gm_ast *x, int from, int to) {
    if (!x || b->failed)
        return -1;
    switch (x->kind) {
    case GM_EMPTY: return epsilon(b, nfa, from, to);
    case GM_CHARS: return chars(b, nfa, x, from, to);
    case GM_BYTES: return chain(b, nfa, x->bytes, x->bytes, x->n, from, to);
    case GM_REF: return add_edge(b, nfa, from, to, -1, -1, x->rule);
    case GM_REPEAT: return repeat(b, nfa, x, from, to);
    case GM_OBJECT: return object(b, nfa, x, from, to);
    case GM_AND: return intersection(b, nfa, x, from, to);
    case GM_ALT:
        for (int i = 0; i < x->n; i++)
            if (emit(b, nfa, x->kids[i], from, to))
                return -1;
        return 0;
    case GM_SEQ: {
        int at = from;
        for (int i = 0; i < x->n; i++) {
            int next = i == x->n - 1 ? to : new_state(b, nfa);
            if (next < 0 || emit(b, nfa, x->kids[i], at, next))
                return -1;
            at = next;
        }
        return x->n ? 0 : epsilon(b, nfa, from, to);
    }
    }
    return -1;
}

int gm_nfa_build(gm_builder *b, const gm_ast *x, gm_nfa *nfa) {
    memset(nfa, 0, sizeof *nfa);
    nfa->states = 2;
    return emit(b, nfa, x, 0, 1) ? -1 : 0;
}

void gm_nfa_free(gm_nfa *nfa) {
    free(nfa->edges);
    nfa->edges = NULL;
}
