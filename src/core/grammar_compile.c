/* The compilers' entry points and the compiled grammar: each rule's body to
 * an NFA and a DFA, the rules checked together (grammar_check.c), the
 * names kept for messages. */
#include <stdlib.h>
#include <string.h>

#include "grammar_internal.h"

static void grammar_free(gptoss_grammar *g) {
    for (int r = 0; r < g->nrules; r++)
        gm_dfa_free(&g->rules[r]);
    free(g->rules);
    free(g->state_base);
    gm_builder_free(&g->names);
    free(g);
}

gptoss_status gm_finish(gm_builder *b, int root, const char *kind, gptoss_grammar **out) {
    gptoss_grammar *g = b->failed ? NULL : calloc(1, sizeof *g);
    if (g) {
        atomic_init(&g->refs, 1);
        g->kind = kind;
        g->root = root;
        g->rules = calloc((size_t)b->nrules, sizeof *g->rules);
        g->state_base = malloc(((size_t)b->nrules + 1) * sizeof *g->state_base);
        gm_builder_init(&g->names, b->err);
        if (!g->rules || !g->state_base)
            gm_fail_memory(b);
    } else {
        gm_fail_memory(b);
    }
    int64_t states = 0;
    for (int r = 0; !b->failed && r < b->nrules; r++) {
        gm_nfa nfa;
        gm_dfa *d = &g->rules[r];
        if (!b->rules[r].body) { /* the readers define every rule they name; this guards a slip */
            gm_fail(b, "rule '%s' is not defined", b->rules[r].name);
            break;
        }
        int rc = gm_nfa_build(b, b->rules[r].body, &nfa) || gm_dfa_build(b, &nfa, d);
        gm_nfa_free(&nfa);
        g->nrules = r + 1; /* what grammar_free frees */
        if (rc)
            break;
        d->line = b->rules[r].line;
        d->name = gm_strdup(&g->names, b->rules[r].name);
        if (!d->name)
            gm_fail_memory(b);
        g->state_base[r] = (int32_t)states;
        states += d->states;
        if (states > GM_MAX_DFA_STATES)
            gm_fail(b, "the grammar is too large: its rules need more than %d automaton states", GM_MAX_DFA_STATES);
    }
    if (!b->failed)
        gm_check_rules(b, g->rules, g->nrules, root);
    gptoss_status st = b->failed ? b->status : GPTOSS_OK;
    gm_builder_free(b);
    if (st) {
        if (g)
            grammar_free(g);
        return st;
    }
    g->states = (int32_t)states;
    g->state_base[g->nrules] = g->states;
    *out = g;
    return GPTOSS_OK;
}

gptoss_status gptoss_grammar_json_schema(const char *text, size_t len, int whitespace, gptoss_grammar **out,
                                         char *err) {
    if (whitespace < 0 || whitespace > GPTOSS_JSON_MAX_WHITESPACE)
        return gptoss_fail(err, GPTOSS_E_INVALID, "whitespace must be within 0..%d (got %d)",
                           GPTOSS_JSON_MAX_WHITESPACE, whitespace);
    gm_builder b;
    gm_builder_init(&b, err);
    int root = gm_schema_rule(&b, text, len, whitespace, "$");
    return gm_finish(&b, root, "json_schema", out);
}

gptoss_status gptoss_grammar_regex(const char *text, size_t len, gptoss_grammar **out, char *err) {
    gm_builder b;
    gm_builder_init(&b, err);
    int root = gm_rule_add(&b, "the pattern", 0);
    if (root >= 0)
        b.rules[root].body = gm_regex(&b, text, len, GM_REGEX_FULL, "");
    return gm_finish(&b, root, "regex", out);
}

gptoss_status gptoss_grammar_ebnf(const char *text, size_t len, gptoss_grammar **out, char *err) {
    gm_builder b;
    gm_builder_init(&b, err);
    int root = gm_ebnf_root(&b, text, len);
    return gm_finish(&b, root, "ebnf", out);
}

gptoss_grammar *gptoss_grammar_retain(gptoss_grammar *g) {
    atomic_fetch_add(&g->refs, 1);
    return g;
}

void gptoss_grammar_release(gptoss_grammar *g) {
    if (g && atomic_fetch_sub(&g->refs, 1) == 1)
        grammar_free(g);
}

const char *gptoss_grammar_kind(const gptoss_grammar *g) { return g->kind; }
int gptoss_grammar_rules(const gptoss_grammar *g) { return g->nrules; }
int gptoss_grammar_states(const gptoss_grammar *g) { return g->states; }
