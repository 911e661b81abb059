/* The matcher's state, shared by grammar_matcher.c (accepting, rolling
 * back, forking) and grammar_mask.c (masks and forced tokens). */
#ifndef GPTOSS_GRAMMAR_MATCHER_H
#define GPTOSS_GRAMMAR_MATCHER_H

#include "grammar_match.h"

struct gptoss_matcher {
    gptoss_constraint *c;
    const gptoss_grammar *g;
    const gptoss_vocab *v;
    gm_stacks st;
    gm_ints configs;   /* every configuration's stacks, one after another (not closed) */
    gm_ints starts;    /* where configuration i starts: one more than the tokens accepted */
    int32_t ended;     /* the configuration an end token made, or -1 */
    uint32_t *end_bits;
    int32_t end_lo, end_hi; /* end_bits' words [end_lo, end_hi) hold every end token: a mask's pass is theirs alone */
    gm_ints closed;    /* the current configuration closed, when closed_valid */
    int closed_valid, closed_ends;
    gm_ints a, b, pool; /* scratch */
    uint32_t *seen, stamp; /* per grammar state: its tokens ORed into this mask already */
    int32_t *depth_at, *depth_n; /* a suffix walk's closed sets in pool, per depth */
};

/* Closes the current configuration into m->closed; -1 with err and *st set on failure. */
int gm_current(gptoss_matcher *m, char *err, gptoss_status *st);
/* Walks bytes from the closed set closed[0..n): 0 when all are taken (the
 * stacks after the last byte, not closed, in m->a), i + 1 when byte i is
 * refused, GM_NOMEM or GM_AMBIGUOUS. */
int gm_walk(gptoss_matcher *m, const int32_t *closed, int32_t n, const uint8_t *bytes, uint32_t len);

#endif
