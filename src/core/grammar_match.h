/* What the matching files share: the vocabulary's trie (grammar_vocab.c),
 * parse stacks (grammar_stack.c), the constraint's cache of tokens per rule
 * state (grammar_cache.c) and the matcher (grammar_matcher.c). */
#ifndef GPTOSS_GRAMMAR_MATCH_H
#define GPTOSS_GRAMMAR_MATCH_H

#include "grammar_internal.h"

/* ---- grammar_vocab.c ---- */

/* tokens longer than this are left out of the trie (never allowed): o200k's longest is 128 */
#define GM_MAX_TOKEN_BYTES 255

/* Bytes of a token (or of its end from some byte on), ordered by the bytes
 * then the token's id: the vocabulary's order, and the cache's suffixes'. */
typedef struct {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
} gm_token_key;
int gm_token_key_order(const void *a, const void *b);

/* A trie of tokens' bytes, its nodes in preorder, an array a field (a walk
 * reads key alone for most nodes): node i's subtree is the nodes up to
 * end[i]; the tokens through it are sorted[first[i] ..] up to
 * first[end[i]] (its subtree's), and those that end at it
 * sorted[first[i] .. first[i] + here[i]). */
typedef struct {
    int32_t nsorted;
    int32_t *sorted; /* its tokens, in the order of their bytes */
    uint16_t *key;   /* depth << 8 | byte; depth 1 for a root's child */
    uint16_t *here;
    uint8_t *plain;  /* when every token below node i is plain text (gm_plain) from its byte on, the longest such rest, else 0 */
    uint32_t *end, *first;
    uint32_t nnodes;
} gm_trie;

/* The text tokens (all but the special ones) in a trie; and apart, those
 * that are JSON string content (grammar_content.c) by their characters,
 * and a trie of the others. */
struct gptoss_vocab {
    atomic_int refs;
    int size, words, longest;
    uint32_t *offset, *length; /* per id: its bytes (length 0: special, or no text) */
    uint8_t *bytes;
    gm_trie trie;
    gm_trie others;          /* the text tokens that are not content */
    /* every suffix of others' tokens (their bytes from 1 on) in order; the
     * rank in it of others.sorted[k]'s bytes from `from` is
     * suffix_rank[suffix_first[k] + from - 1] (a walk sorts its suffixes by rank) */
    gm_token_key *suffixes;
    int32_t *suffix_rank, *suffix_first, nsuffixes;
    uint32_t *content_masks; /* mask n (words each): the content tokens of at most n characters, n up to content_most */
    int content_most;        /* the most characters of a content token */
};

static inline const uint8_t *gm_token(const gptoss_vocab *v, int32_t id, uint32_t *len) {
    *len = v->length[id];
    return v->bytes + v->offset[id];
}

/* the characters of bytes that are all JSON string content (grammar_content.c), else -1 */
int gm_content_chars(const uint8_t *p, uint32_t len);

/* the end of the tokens through node i */
static inline uint32_t gm_subtree_tokens_end(const gm_trie *t, uint32_t i) {
    return t->end[i] < t->nnodes ? t->first[t->end[i]] : (uint32_t)t->nsorted;
}

/* ---- grammar_stack.c: parse stacks, interned so that a stack is one id ---- */

/* a frame: rule's state, over the stack `parent` (0 is the empty stack) */
typedef struct {
    int32_t rule, state, parent;
} gm_frame;

typedef struct {
    int32_t *v;
    int32_t n, cap;
} gm_ints;

/* the most stacks a configuration may hold (a grammar ambiguous beyond it is refused at that point) */
#define GM_MAX_STACKS 4096
#define GM_NOMEM (-1)
#define GM_AMBIGUOUS (-2)

typedef struct {
    const gptoss_grammar *g;
    gm_frame *frames;
    int32_t n, cap;
    int32_t *slots; /* hash -> frame id, 0 empty */
    uint32_t nslots;
    uint32_t *mark, stamp;
    gm_ints work;
} gm_stacks;

int gm_ints_push(gm_ints *a, int32_t x);
int gm_ints_reserve(gm_ints *a, int32_t n);
int gm_stacks_init(gm_stacks *st, const gptoss_grammar *g);
int gm_stacks_copy(gm_stacks *to, const gm_stacks *from);
void gm_stacks_free(gm_stacks *st);
/* the id of frame (rule, state) over parent; GM_NOMEM */
int32_t gm_intern(gm_stacks *st, int32_t rule, int32_t state, int32_t parent);
/* Appends to out the stacks in[0..n) reach without a byte (calls made,
 * ended rules returned from), each once; 1 when the empty stack is among
 * them, 0 when not, GM_NOMEM or GM_AMBIGUOUS. */
int gm_closure(gm_stacks *st, const int32_t *in, int32_t n, gm_ints *out);
/* Appends to out the stacks of the closed set in[0..n) after byte; GM_NOMEM. */
int gm_step(gm_stacks *st, const int32_t *in, int32_t n, uint8_t byte, gm_ints *out);
/* the message of GM_NOMEM or GM_AMBIGUOUS */
gptoss_status gm_stack_failure(int code, char *err);

/* ---- grammar_cache.c: what a rule state allows, whatever the stack below ---- */

/* Tokens that leave the frame before their last byte: suffix bytes that the
 * stack below must take; the tokens are suffix_tokens[first .. first+count). */
typedef struct {
    int32_t token;        /* a token whose bytes from `from` are the suffix */
    uint32_t from, lcp;   /* lcp: bytes in common with the previous suffix */
    int32_t first, count;
} gm_suffix;

/* A rule state's entry: the tokens it takes whole (a bitset, or a list
 * when few; and the vocabulary's content mask of content_chars characters
 * besides), and the suffixes that depend on the stack. */
typedef struct {
    int content_chars; /* 0: no content mask */
    int32_t naccepted;
    uint32_t *bits;
    int32_t *ids; /* when bits is NULL */
    int32_t nsuffixes;
    gm_suffix *suffixes;
    int32_t *suffix_tokens;
} gm_entry;

struct gptoss_constraint {
    atomic_int refs;
    gptoss_grammar *g;
    gptoss_vocab *v;
    _Atomic(gm_entry *) *entries; /* per state of the grammar, computed when first needed */
};

/* The entry of rule's state, computed and shared on first use; NULL with
 * err set on failure. */
const gm_entry *gm_entry_of(gptoss_constraint *c, int32_t rule, int32_t state, gptoss_status *st, char *err);

#endif
