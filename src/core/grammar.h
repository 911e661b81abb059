/* Structured output: grammars that constrain which tokens may come next
 * (docs/structured.md).
 *
 * A grammar is compiled from a JSON schema, a regular expression or an EBNF
 * text into rules, each a DFA over bytes whose edges may also call another
 * rule; a matcher runs them as a pushdown automaton over the bytes of the
 * tokens it accepts. Bound to a tokenizer's vocabulary (a constraint), a
 * matcher computes the mask of the tokens allowed next by walking a trie of
 * the vocabulary, with the tokens whose fate does not depend on the stack
 * cached per rule state and shared by every matcher of the constraint.
 *
 * Threads: grammars, vocabularies and constraints are shared read-only
 * (their reference counts and the constraint's cache are safe to use from
 * several threads at once); a matcher is used by one thread at a time. */
#ifndef GPTOSS_GRAMMAR_H
#define GPTOSS_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "tokenizer.h"

typedef struct gptoss_grammar gptoss_grammar;
typedef struct gptoss_vocab gptoss_vocab;
typedef struct gptoss_constraint gptoss_constraint;
typedef struct gptoss_matcher gptoss_matcher;

/* the most whitespace bytes a JSON schema's grammar allows at one place */
#define GPTOSS_JSON_MAX_WHITESPACE 64

/* Compilers. Each returns a grammar with one reference, or GPTOSS_E_INVALID
 * with a message naming the schema path ($.properties.age.minimum), the
 * regex's offset or the EBNF line; GPTOSS_E_HOST_MEMORY. */
/* A JSON schema's text; whitespace: the most bytes of [ \t\n\r] allowed
 * wherever JSON allows them (0: none). */
gptoss_status gptoss_grammar_json_schema(const char *text, size_t len, int whitespace, gptoss_grammar **out,
                                         char *err);
/* A regular expression (a PCRE2 subset) that the whole output must match. */
gptoss_status gptoss_grammar_regex(const char *text, size_t len, gptoss_grammar **out, char *err);
/* An EBNF grammar whose start rule is root. */
gptoss_status gptoss_grammar_ebnf(const char *text, size_t len, gptoss_grammar **out, char *err);

gptoss_grammar *gptoss_grammar_retain(gptoss_grammar *g);
void gptoss_grammar_release(gptoss_grammar *g);
/* "json_schema", "regex" or "ebnf" */
const char *gptoss_grammar_kind(const gptoss_grammar *g);
int gptoss_grammar_rules(const gptoss_grammar *g);
int gptoss_grammar_states(const gptoss_grammar *g);
/* its states that count a JSON string's characters (a bounded string's body):
 * their masks' content tokens come by length from the vocabulary's shared masks */
int gptoss_grammar_counted_states(const gptoss_grammar *g);

/* The vocabulary of a tokenizer as the matchers see it: each token's bytes
 * (its decoded piece) in a trie. Special tokens are left out: they are only
 * ever allowed as a matcher's end tokens. The tokenizer may be freed after. */
gptoss_status gptoss_vocab_new(const gptoss_tokenizer *t, gptoss_vocab **out, char *err);
gptoss_vocab *gptoss_vocab_retain(gptoss_vocab *v);
void gptoss_vocab_release(gptoss_vocab *v);
int gptoss_vocab_size(const gptoss_vocab *v);
/* uint32 words of a mask over the vocabulary: ceil(vocab_size / 32) */
int gptoss_vocab_mask_words(const gptoss_vocab *v);

/* A grammar bound to a vocabulary, holding both; its cache fills as its
 * matchers compute masks. */
gptoss_status gptoss_constraint_new(gptoss_grammar *g, gptoss_vocab *v, gptoss_constraint **out, char *err);
gptoss_constraint *gptoss_constraint_retain(gptoss_constraint *c);
void gptoss_constraint_release(gptoss_constraint *c);

/* A matcher at the start of the output. end_ids (n_end of them, each in
 * 0..vocab_size-1) are the tokens that end it, allowed only where the output
 * is complete; after one nothing more is. */
gptoss_status gptoss_matcher_new(gptoss_constraint *c, const int32_t *end_ids, int n_end, gptoss_matcher **out,
                                 char *err);
void gptoss_matcher_free(gptoss_matcher *m);
/* A copy that goes on independently. */
gptoss_status gptoss_matcher_fork(const gptoss_matcher *m, gptoss_matcher **out, char *err);
/* Advances by one token: GPTOSS_OK, or GPTOSS_E_INVALID with the reason and
 * the matcher unchanged (GPTOSS_E_HOST_MEMORY, GPTOSS_E_STATE for a grammar
 * too ambiguous at this point, also unchanged). */
gptoss_status gptoss_matcher_accept(gptoss_matcher *m, int32_t token, char *err);
/* 1 when accept(token) would succeed, 0 when not, -1 with err on failure.
 * Checked directly on the token's bytes, without the mask's cache. */
int gptoss_matcher_allows(gptoss_matcher *m, int32_t token, char *err);
/* The allowed tokens: bit (id % 32) of words[id / 32] is set for each
 * (gptoss_vocab_mask_words words, bits past the vocabulary clear). */
gptoss_status gptoss_matcher_mask(gptoss_matcher *m, uint32_t *words, char *err);
/* Undoes the last n accepted tokens (0 <= n <= gptoss_matcher_tokens). */
gptoss_status gptoss_matcher_rollback(gptoss_matcher *m, int n, char *err);
/* the matcher's vocabulary: its size, and the words of its masks */
int gptoss_matcher_vocab_size(const gptoss_matcher *m);
int gptoss_matcher_mask_words(const gptoss_matcher *m);
/* tokens accepted so far (an end token included) */
int gptoss_matcher_tokens(const gptoss_matcher *m);
/* 1 when the output so far is complete (an end token may come, or has
 * come), 0 when not, -1 with err on failure */
int gptoss_matcher_done(gptoss_matcher *m, char *err);
/* 1 once an end token was accepted */
int gptoss_matcher_ended(const gptoss_matcher *m);
/* The bytes every continuation starts with (up to cap of them, *n set),
 * stopping where the output could also end. */
gptoss_status gptoss_matcher_forced_bytes(gptoss_matcher *m, uint8_t *buf, size_t cap, size_t *n, char *err);
/* Tokens to fast-forward: the forced bytes cut greedily into the longest
 * vocabulary tokens, less the last one unless the output must end after it
 * (a longer token could have merged it with what the model writes next); up
 * to cap ids, *n set. Each is allowed in turn. */
gptoss_status gptoss_matcher_forced(gptoss_matcher *m, int32_t *ids, int cap, int *n, char *err);

#endif
