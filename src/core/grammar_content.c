/* A JSON string's content, counted in characters: the code points JSON
 * writes as themselves inside a string, as UTF-8 (the tokens that are
 * nothing but content: gm_content_chars), and how many characters of it
 * each rule state takes (a bounded string's body: exactly what is left of
 * its maxLength; gm_content_left). A state that takes exactly n characters
 * of content allows the content tokens of at most n characters, one of the
 * vocabulary's shared masks, and its cache walk needs only the trie of the
 * other tokens (grammar_vocab.c, grammar_cache.c). */
#include <stdlib.h>
#include <string.h>

#include "grammar_match.h"

/* a character of content: not a control, '"' or '\' */
static int content_char(int32_t cp) { return cp >= 0x20 && cp != '"' && cp != '\\'; }

int gm_content_chars(const uint8_t *p, uint32_t len) {
    int chars = 0;
    for (uint32_t at = 0; at < len; chars++) {
        int n;
        if (!content_char(gm_utf8_decode(p + at, len - at, &n)))
            return -1;
        at += (uint32_t)n;
    }
    return chars;
}

/* ---- rule states ---- */

/* The UTF-8 forms of the characters of content: a lead byte in [lo, hi], the
 * first continuation byte in [lo1, hi1] and any more in 80..BF (one-byte
 * characters less '"' and '\'). */
static const struct {
    uint8_t lo, hi, lo1, hi1, more;
} FORMS[] = {{0x20, 0x7F, 0, 0, 0},       {0xC2, 0xDF, 0x80, 0xBF, 0}, {0xE0, 0xE0, 0xA0, 0xBF, 1},
             {0xE1, 0xEC, 0x80, 0xBF, 1}, {0xED, 0xED, 0x80, 0x9F, 1}, {0xEE, 0xEF, 0x80, 0xBF, 1},
             {0xF0, 0xF0, 0x90, 0xBF, 2}, {0xF1, 0xF3, 0x80, 0xBF, 2}, {0xF4, 0xF4, 0x80, 0x8F, 2}};
#define NFORMS (sizeof FORMS / sizeof *FORMS)

/* a byte of each of a rule's classes within a range: a DFA treats a class's bytes alike */
typedef struct {
    int n;
    uint8_t bytes[256];
} class_bytes;

static void classes_in(const gm_dfa *r, int lo, int hi, class_bytes *out) {
    uint8_t seen[256] = {0};
    out->n = 0;
    for (int byte = lo; byte <= hi; byte++)
        if (byte != '"' && byte != '\\' && !seen[r->cls[byte]])
            seen[r->cls[byte]] = 1, out->bytes[out->n++] = (uint8_t)byte;
}

/* per form: its lead bytes' classes and its first continuation's; then any continuation's */
typedef struct {
    class_bytes lead[NFORMS], first[NFORMS], any;
} content_classes;

static void content_classes_of(const gm_dfa *r, content_classes *tc) {
    for (size_t f = 0; f < NFORMS; f++) {
        classes_in(r, FORMS[f].lo, FORMS[f].hi, &tc->lead[f]);
        classes_in(r, FORMS[f].lo1, FORMS[f].lo1 ? FORMS[f].hi1 : -1, &tc->first[f]);
    }
    classes_in(r, 0x80, 0xBF, &tc->any);
}

/* the most distinct states one character of content may lead to from a state */
#define CONTENT_FANOUT 8

/* where one character of content leads from a state: nowhere for every one
 * (refused), states[0..n) (taken), or no count (mixed: some refused and
 * some taken, or through a state that may end or call) */
typedef struct {
    int refused, taken, mixed, n;
    int32_t states[CONTENT_FANOUT];
} content_step;

static void add_state(content_step *out, int32_t t) {
    for (int k = 0; k < out->n; k++)
        if (out->states[k] == t)
            return;
    if (out->n == CONTENT_FANOUT)
        out->mixed = 1;
    else
        out->states[out->n++] = t;
}

/* Moves the states of `from` by each of the bytes into `to`, or, for a
 * character's last byte, into the step's states. */
static void move(const gm_dfa *r, const content_step *from, const class_bytes *bytes, int last, content_step *to,
                 content_step *out) {
    for (int k = 0; k < from->n; k++)
        for (int i = 0; i < bytes->n; i++) {
            int32_t t = gm_next(r, from->states[k], bytes->bytes[i]);
            if (t < 0) {
                out->refused = 1;
                continue;
            }
            out->taken = 1;
            if (r->flags[t] & (GM_FINAL | GM_HAS_CALLS)) /* the frame could end or call inside a token */
                out->mixed = 1;
            add_state(last ? out : to, t);
        }
}

static content_step step_content(const gm_dfa *r, const content_classes *tc, int32_t s) {
    content_step out = {0};
    for (size_t f = 0; f < NFORMS && !out.mixed; f++) {
        content_step at = {.n = 1, .states = {s}}, next = {0};
        int bytes = FORMS[f].lo1 ? 2 + FORMS[f].more : 1;
        move(r, &at, &tc->lead[f], bytes == 1, &next, &out);
        for (int b = 1; b < bytes && next.n; b++) {
            at = next, next = (content_step){0};
            move(r, &at, b == 1 ? &tc->first[f] : &tc->any, b == bytes - 1, &next, &out);
        }
        out.mixed |= next.mixed;
    }
    out.mixed |= out.refused && out.taken;
    return out;
}

#define UNSEEN (-3)
#define OPEN (-2)

/* GM_CONTENT_ANY for the states from which content never ends: the most
 * states that take every character of content into one another (a free
 * string's body), found by dropping, from the states that take every
 * character, those that lead to a dropped state (or out of them), each in
 * turn through the steps reversed. */
static int endless_content(gm_dfa *r, const content_step *steps, int32_t *queue) {
    int32_t states = r->states, n = 0;
    int32_t *first = calloc((size_t)states + 2, sizeof *first), *from = NULL;
    if (!first)
        return -1;
    for (int32_t s = 0; s < states; s++)
        for (int k = 0; k < steps[s].n; k++)
            first[steps[s].states[k] + 2]++;
    for (int32_t s = 0; s < states; s++)
        first[s + 2] += first[s + 1];
    if (!(from = malloc(((size_t)first[states + 1] + 1) * sizeof *from)))
        return free(first), -1;
    for (int32_t s = 0; s < states; s++) /* first[t + 1] counts up to first[t + 2]: then first[t] .. first[t + 1] are t's */
        for (int k = 0; k < steps[s].n; k++)
            from[first[steps[s].states[k] + 1]++] = s;
    for (int32_t s = 0; s < states; s++) {
        int endless = steps[s].taken && !steps[s].mixed;
        r->content_left[s] = endless ? GM_CONTENT_ANY : UNSEEN;
        if (!endless)
            queue[n++] = s;
    }
    for (int32_t i = 0; i < n; i++)
        for (int32_t k = first[queue[i]]; k < first[queue[i] + 1]; k++)
            if (r->content_left[from[k]] == GM_CONTENT_ANY)
                r->content_left[from[k]] = UNSEEN, queue[n++] = from[k];
    free(first), free(from);
    return 0;
}

/* Each state's content_left: GM_CONTENT_ANY where content never ends, 0
 * where every character of content is refused, n + 1 where every one
 * leads to states whose content_left is n (saturating at GM_CONTENT_ANY),
 * -1 otherwise (a loop among them included): a depth-first walk over the
 * steps, with a stack of its own. */
int gm_content_left(gm_builder *b, gm_dfa *r) {
    int32_t states = r->states;
    content_classes tc;
    content_classes_of(r, &tc);
    content_step *steps = malloc(((size_t)states + 1) * sizeof *steps);
    int32_t *stack = malloc(((size_t)states + 1) * sizeof *stack);
    r->content_left = malloc(((size_t)states + 1) * sizeof *r->content_left);
    if (!steps || !stack || !r->content_left) {
        free(steps), free(stack);
        return gm_fail_memory(b), -1;
    }
    for (int32_t s = 0; s < states; s++)
        steps[s] = step_content(r, &tc, s);
    if (endless_content(r, steps, stack)) {
        free(steps), free(stack);
        return gm_fail_memory(b), -1;
    }
    for (int32_t root = 0; root < states; root++) {
        if (r->content_left[root] != UNSEEN)
            continue;
        int32_t depth = 0;
        stack[depth++] = root;
        r->content_left[root] = OPEN;
        while (depth) {
            int32_t s = stack[depth - 1];
            const content_step *st = &steps[s];
            int32_t pending = -1, left = st->mixed ? -1 : st->taken ? GM_CONTENT_ANY + 1 : 0;
            for (int k = 0; k < st->n && left > 0 && pending < 0; k++) {
                int16_t after = r->content_left[st->states[k]];
                if (after == UNSEEN)
                    pending = st->states[k];
                else if (after < 0 || (k && after != r->content_left[st->states[0]])) /* a loop, or counts that differ */
                    left = -1;
                else
                    left = after < GM_CONTENT_ANY ? after + 1 : GM_CONTENT_ANY;
            }
            if (pending >= 0) {
                stack[depth++] = pending;
                r->content_left[pending] = OPEN;
                continue;
            }
            r->content_left[s] = (int16_t)left;
            depth--;
        }
    }
    free(steps), free(stack);
    return 0;
}

int gptoss_grammar_counted_states(const gptoss_grammar *g) {
    int counted = 0;
    for (int r = 0; r < g->nrules; r++)
        for (int32_t s = 0; s < g->rules[r].states; s++)
            counted += g->rules[r].content_left[s] > 0;
    return counted;
}
