/* What the grammar compiler's files share (grammar.h says what it is for).
 *
 * The three readers (grammar_schema*.c, grammar_regex.c, grammar_ebnf.c)
 * build rules whose bodies are expressions (gm_ast) over characters, byte
 * strings and calls of rules. grammar_nfa.c turns a body into an NFA over
 * bytes (UTF-8) whose edges may call rules, grammar_dfa.c determinises it,
 * grammar_check.c refuses rules that can never finish or call themselves
 * before reading a byte, and grammar_compile.c puts the rules together. */
#ifndef GPTOSS_GRAMMAR_INTERNAL_H
#define GPTOSS_GRAMMAR_INTERNAL_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar.h"

/* Limits that keep compiling bounded in time and memory (the fuzz target
 * holds every input to milliseconds): a quantifier's count, the states of
 * one rule's NFA and of the whole grammar's DFAs, the rules, the nesting of
 * expressions, and a budget of work for determinising. */
#define GM_MAX_REPEAT 4000
#define GM_MAX_NFA_STATES 500000
#define GM_MAX_DFA_STATES 50000
#define GM_MAX_TABLE (1 << 23) /* a rule's transitions: states x byte classes */
#define GM_MAX_RULES 20000
#define GM_MAX_NESTING 200
#define GM_WORK_BUDGET 8000000L
#define GM_UNBOUNDED (-1)
#define GM_MAX_CODE_POINT 0x10FFFF

typedef struct {
    uint32_t lo, hi;
} gm_range;

typedef enum {
    GM_EMPTY,  /* "" */
    GM_CHARS,  /* one character of a set of code points */
    GM_BYTES,  /* a byte string */
    GM_SEQ,    /* kids one after another */
    GM_ALT,    /* any one of the kids */
    GM_REPEAT, /* kids[0], min..max times */
    GM_REF,    /* a call of rule `rule` */
    GM_AND,    /* strings in both kids' languages (neither may call a rule) */
    GM_OBJECT  /* JSON members: kids in order, each present or (unless required) not, sep between two */
} gm_kind;

typedef struct gm_ast gm_ast;
struct gm_ast {
    gm_kind kind;
    int n, cap;        /* kids, ranges or bytes */
    int min, max;      /* GM_REPEAT */
    int rule;          /* GM_REF */
    int json;          /* GM_CHARS: as written inside a JSON string (", \ and controls escaped) */
    gm_ast **kids;
    gm_range *ranges;  /* GM_CHARS: sorted, disjoint, without surrogates */
    uint8_t *bytes;    /* GM_BYTES */
    uint8_t *required; /* GM_OBJECT */
    gm_ast *sep;       /* GM_OBJECT */
    const char *what;  /* GM_AND: the bounds, for the error when nothing meets them */
};

typedef struct {
    const char *name; /* for messages: an EBNF rule's name, a schema's path */
    int line;         /* the EBNF line that defines it (0: none) */
    gm_ast *body;     /* NULL while only referred to */
} gm_rule_def;

typedef struct gm_block gm_block;

/* A compilation: its arena, rules and first error. Once an error is set,
 * builders return NULL and the readers unwind. */
typedef struct {
    gm_block *blocks;
    gm_rule_def *rules;
    int nrules, cap;
    long budget; /* determinising work left */
    int failed;
    char *err;   /* GPTOSS_ERR_LEN bytes */
    gptoss_status status;
} gm_builder;

/* ---- grammar_ast.c: the arena, expressions and character sets ---- */

void gm_builder_init(gm_builder *b, char *err);
void gm_builder_free(gm_builder *b);
/* zeroed arena memory; NULL with the error set when memory is short */
void *gm_alloc(gm_builder *b, size_t bytes);
char *gm_strdup(gm_builder *b, const char *s);
/* Room for one more element (of size bytes) in the arena array *array
 * holding n of *cap; 0, or -1 with the error set. */
int gm_grow(gm_builder *b, void *array, int n, int *cap, size_t size);
char *gm_printf(gm_builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Records the first error (GPTOSS_E_INVALID); returns NULL for `return gm_fail(...)`. */
void *gm_fail(gm_builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void *gm_fail_memory(gm_builder *b);
/* A new rule (body NULL); -1 on failure. */
int gm_rule_add(gm_builder *b, const char *name, int line);

gm_ast *gm_node(gm_builder *b, gm_kind kind);
gm_ast *gm_bytes(gm_builder *b, const void *s, size_t n);
gm_ast *gm_literal(gm_builder *b, const char *s);
/* one character of the ranges (normalised: sorted, merged, surrogates removed) */
gm_ast *gm_chars(gm_builder *b, const gm_range *ranges, int n);
gm_ast *gm_char_range(gm_builder *b, uint32_t lo, uint32_t hi);
/* appends kid to a GM_SEQ, GM_ALT or GM_OBJECT; returns node (NULL on failure) */
gm_ast *gm_add(gm_builder *b, gm_ast *node, gm_ast *kid);
gm_ast *gm_seq2(gm_builder *b, gm_ast *x, gm_ast *y);
gm_ast *gm_repeat(gm_builder *b, gm_ast *x, int min, int max);
gm_ast *gm_ref(gm_builder *b, int rule);
gm_ast *gm_and(gm_builder *b, gm_ast *x, gm_ast *y, const char *what);
/* [0, 0x10FFFF] less the ranges (surrogates never included) */
int gm_ranges_negate(gm_builder *b, const gm_range *in, int n, gm_range **out);
/* sorts and merges in place; returns the new count */
int gm_ranges_normalize(gm_range *r, int n);
/* UTF-8 of a code point into out (4 bytes); returns its length */
int gm_utf8_encode(uint32_t cp, uint8_t *out);
/* the code point at s (n bytes left) and its length in *len, or -1 (*len 1) */
int32_t gm_utf8_decode(const uint8_t *s, size_t n, int *len);

/* ---- grammar_regex.c ---- */

/* How a pattern meets the ends of the text: wholly (a regex grammar, a regex
 * inside EBNF), or as JSON Schema's pattern, anchored only where ^ and $ say. */
typedef enum { GM_REGEX_FULL, GM_REGEX_SEARCH } gm_regex_mode;
/* The expression of a pattern; where names it in errors ("pattern at $.x"). */
gm_ast *gm_regex(gm_builder *b, const char *text, size_t len, gm_regex_mode mode, const char *where);
/* A [...] class at text[*pos] (just after the '['), as code point ranges:
 * shared with the EBNF reader. */
gm_ast *gm_regex_class(gm_builder *b, const char *text, size_t len, size_t *pos, const char *where);
/* Marks every character set of x as written inside a JSON string. */
void gm_mark_json(gm_ast *x);

/* ---- grammar_ebnf.c ---- */

/* Reads an EBNF text's rules; returns its root rule, or -1. */
int gm_ebnf_root(gm_builder *b, const char *text, size_t len);

/* ---- grammar_schema.c / grammar_schema_scalar.c ---- */

/* The rule of a JSON schema's text (its start rule's id), or -1. name
 * prefixes its paths ("$" alone, or "%json at line 4: $"). */
int gm_schema_rule(gm_builder *b, const char *text, size_t len, int whitespace, const char *name);

/* ---- grammar_nfa.c: expressions to NFAs over bytes ---- */

typedef struct {
    int32_t from, to;
    int16_t lo, hi; /* a byte range; lo < 0: no byte (an epsilon, or a call) */
    int32_t rule;   /* >= 0: a call of this rule, returning to `to` */
} gm_edge;

typedef struct {
    gm_edge *edges;
    size_t n, cap;
    int32_t states; /* state 0 is the start, state 1 the end */
} gm_nfa;

/* The NFA of x from state 0 to state 1. */
int gm_nfa_build(gm_builder *b, const gm_ast *x, gm_nfa *nfa);
void gm_nfa_free(gm_nfa *nfa);

/* ---- grammar_dfa.c ---- */

typedef struct {
    int32_t rule, next;
} gm_call;

#define GM_FINAL 1     /* the rule may end here */
#define GM_HAS_BYTES 2 /* some byte leads on */
#define GM_HAS_CALLS 4 /* it calls a rule */

/* One rule: states over bytes, state 0 the start; bytes fall into classes
 * that every state treats alike (next is states x classes); calls[
 * call_first[s] .. call_first[s+1]) are the rules state s may call, each
 * returning to next. */
typedef struct {
    int32_t states;
    int classes;
    uint8_t cls[256];
    int32_t *next; /* the state after a byte's class, -1 none */
    uint8_t *flags;
    uint8_t *room; /* bytes of plain text (GM_PLAIN) each state surely takes, 255 for any number */
    int16_t *content_left; /* characters of a JSON string's content each state takes exactly (grammar_content.c), -1 for no count */
    int32_t *call_first;
    gm_call *calls;
    const char *name;
    int line;
} gm_dfa;

static inline int32_t gm_next(const gm_dfa *d, int32_t s, uint8_t byte) {
    return d->next[(size_t)s * (size_t)d->classes + d->cls[byte]];
}

/* Determinises nfa (calls are edges labelled by their rule). */
int gm_dfa_build(gm_builder *b, const gm_nfa *nfa, gm_dfa *out);
/* the DFA of call-free strings in both a's and b's languages */
int gm_dfa_intersect(gm_builder *b, const gm_dfa *x, const gm_dfa *y, gm_dfa *out);
/* whether any state reachable from the start is final (call-free DFAs) */
int gm_dfa_matches_something(const gm_dfa *d);
/* recomputes GM_HAS_BYTES and GM_HAS_CALLS */
void gm_dfa_flag(gm_dfa *d);
void gm_dfa_free(gm_dfa *d);

/* ---- grammar_check.c ---- */

/* Refuses rules that can never finish and rules that call themselves before
 * reading a byte; drops the states that cannot reach an end; computes each
 * state's room. */
int gm_check_rules(gm_builder *b, gm_dfa *rules, int nrules, int root);

/* Plain text: printable ASCII other than '"' and '\', the bytes most tokens
 * are made of. A state whose room is n takes any n of them in a row, so a
 * trie walk can accept a subtree of plain tokens no longer than that whole. */
static inline int gm_plain(uint8_t byte) { return byte >= 0x20 && byte < 0x7F && byte != '"' && byte != '\\'; }

/* ---- grammar_content.c: a JSON string's content, counted in characters ---- */

/* a content_left of at least this many characters: more than any token holds (GM_MAX_TOKEN_BYTES) */
#define GM_CONTENT_ANY 256
/* Each state's content_left: n when the frame alone takes any n characters
 * of content (code points other than controls, '"' and '\', as UTF-8) and
 * refuses any n + 1, never able to end or call on the way (a bounded
 * string's body: what is left of its maxLength); -1 for any other state. */
int gm_content_left(gm_builder *b, gm_dfa *r);

/* ---- grammar_compile.c: the compiled grammar ---- */

struct gptoss_grammar {
    atomic_int refs;
    const char *kind;
    int nrules, root;
    gm_dfa *rules;
    int32_t *state_base; /* rules[r]'s state s is state_base[r] + s of the whole grammar */
    int32_t states;
    gm_builder names;    /* owns the rules' names */
};

/* Compiles b's rules (every one defined) with root as the start: out gets a
 * grammar with one reference. Frees b either way. */
gptoss_status gm_finish(gm_builder *b, int root, const char *kind, gptoss_grammar **out);

#endif
