/* libFuzzer target: the grammar readers (src/core/grammar_*.c) on any text,
 * then, for what compiles, a walk of a matcher over a small vocabulary (the
 * 256 bytes, some merges, an end token) that checks the matcher against
 * itself: the mask agrees with the direct check of every token, an allowed
 * token is accepted and a refused one leaves the mask as it was, a fork
 * and a rollback give the masks of the same tokens, and forced tokens are
 * accepted. Any disagreement aborts. Input: one byte choosing the reader
 * (and the JSON whitespace), then the text; later bytes of the text also
 * choose the walk's tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"

#define STEPS 12

static const char *const MERGES[] = {"ab", "abc", "{\"", "\":", "\",\"", "\"}", "12", "true", "null", "-1", "é", "aa"};
static gptoss_vocab *vocab;
static int end_id;

/* a tokenizer.bin in memory: the 256 bytes, the merges, then <|end|> at the special score */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    int n = 256 + (int)(sizeof MERGES / sizeof *MERGES) + 1;
    uint8_t *records = malloc(4 + (size_t)n * 32), *at = records + 4;
    int32_t longest = 8;
    memcpy(records, &longest, 4);
    for (int id = 0; id < n; id++) {
        char one[2] = {(char)id, 0};
        const char *s = id < 256 ? one : id < n - 1 ? MERGES[id - 256] : "<|end|>";
        int32_t len = id < 256 ? 1 : (int32_t)strlen(s);
        float score = id == n - 1 ? GPTOSS_SPECIAL_SCORE_STORED : (float)id;
        memcpy(at, &score, 4), memcpy(at + 4, &len, 4), memcpy(at + 8, s, (size_t)len);
        at += 8 + len;
    }
    gptoss_tokenizer *t;
    char err[GPTOSS_ERR_LEN];
    if (gptoss_tokenizer_from_records(records, (size_t)(at - records), n, "fuzz vocabulary", &t, err) ||
        gptoss_vocab_new(t, &vocab, err)) {
        fprintf(stderr, "grammar fuzzer: %s\n", err);
        exit(1);
    }
    gptoss_tokenizer_free(t);
    end_id = n - 1;
    return 0;
}

static void mask_of(gptoss_matcher *m, uint32_t *words) {
    char err[GPTOSS_ERR_LEN];
    if (gptoss_matcher_mask(m, words, err))
        abort(); /* a small vocabulary's masks cannot fail */
}

/* The walk's checks at one step; returns the token to take, -1 when none. */
static int check_step(gptoss_matcher *m, uint32_t *words, uint32_t *again, uint8_t choice) {
    char err[GPTOSS_ERR_LEN];
    int words_n = gptoss_vocab_mask_words(vocab), allowed = 0, pick = -1;
    mask_of(m, words);
    for (int id = 0; id < gptoss_vocab_size(vocab); id++) {
        int bit = words[id >> 5] >> (id & 31) & 1;
        if (gptoss_matcher_allows(m, id, err) != bit)
            abort(); /* the mask and the direct check disagree */
        if (bit && allowed++ == choice % 64)
            pick = id;
        if (!bit && id % 41 == choice % 41) {
            if (gptoss_matcher_accept(m, id, err) == GPTOSS_OK)
                abort(); /* accepted what it refuses */
            mask_of(m, again);
            if (memcmp(words, again, (size_t)words_n * 4))
                abort(); /* a refusal changed the state */
        }
    }
    return allowed ? (pick >= 0 ? pick : (int)(choice % 2 ? end_id : -1)) : -1;
}

static void walk(gptoss_constraint *c, const uint8_t *data, size_t size) {
    char err[GPTOSS_ERR_LEN];
    gptoss_matcher *m;
    if (gptoss_matcher_new(c, &end_id, 1, &m, err))
        abort();
    int words_n = gptoss_vocab_mask_words(vocab);
    uint32_t *words = malloc((size_t)words_n * 4), *again = malloc((size_t)words_n * 4);
    int32_t forced[64];
    int n;
    if (gptoss_matcher_forced(m, forced, 64, &n, err) == GPTOSS_OK)
        for (int i = 0; i < n; i++)
            if (gptoss_matcher_accept(m, forced[i], err))
                abort(); /* a forced token refused */
    for (int step = 0; step < STEPS; step++) {
        int id = check_step(m, words, again, size ? data[(size_t)step % size] : 0);
        if (id < 0 || gptoss_matcher_accept(m, id, err) == GPTOSS_E_INVALID)
            break;
        gptoss_matcher *f;
        if (gptoss_matcher_fork(m, &f, err) || gptoss_matcher_rollback(f, 1, err))
            abort();
        mask_of(f, again);
        if (memcmp(words, again, (size_t)words_n * 4))
            abort(); /* a rollback is not where the token was taken */
        gptoss_matcher_free(f);
    }
    free(words), free(again);
    gptoss_matcher_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    const char *text = (const char *)data + 1;
    char err[GPTOSS_ERR_LEN];
    gptoss_grammar *g;
    gptoss_status st = data[0] % 3 == 0   ? gptoss_grammar_json_schema(text, size - 1, data[0] / 3 % 4, &g, err)
                       : data[0] % 3 == 1 ? gptoss_grammar_regex(text, size - 1, &g, err)
                                          : gptoss_grammar_ebnf(text, size - 1, &g, err);
    if (st == GPTOSS_E_HOST_MEMORY)
        abort(); /* the readers' limits keep memory small */
    if (st)
        return 0;
    gptoss_constraint *c;
    if (gptoss_constraint_new(g, vocab, &c, err))
        abort();
    walk(c, data + 1, size - 1);
    gptoss_constraint_release(c);
    gptoss_grammar_release(g);
    return 0;
}
