#include "o200k.h"

#include <pthread.h>
#include <stdio.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* o200k's pattern as tiktoken spells it (its seven alternatives: words with
 * their leading mark and an optional contraction, in either case pattern;
 * up to three digits; punctuation runs; newline runs; spaces not before a
 * non-space; other spaces) */
static const char PATTERN[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*"
    "|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)"
    "|\\s+";

/* compiled once per process, shared by every thread (PCRE2 code is read-only) */
static pthread_once_t compile_once = PTHREAD_ONCE_INIT;
static pcre2_code *pattern;
static char compile_error[256];

static void compile_pattern(void) {
    int code;
    PCRE2_SIZE at;
    /* UCP: \s and the classes by Unicode properties, as tiktoken's regex
     * engine; MATCH_INVALID_UTF: invalid bytes match nothing instead of
     * failing the whole match */
    pattern = pcre2_compile((PCRE2_SPTR)PATTERN, PCRE2_ZERO_TERMINATED,
                            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &at, NULL);
    if (!pattern) {
        PCRE2_UCHAR why[120];
        pcre2_get_error_message(code, why, sizeof why);
        snprintf(compile_error, sizeof compile_error, "PCRE2 cannot compile the o200k pattern at %zu: %s",
                 (size_t)at, (const char *)why);
        return;
    }
    (void)pcre2_jit_compile(pattern, PCRE2_JIT_COMPLETE); /* without JIT pcre2_match interprets */
}

/* Lua unloads core.so when its state closes: the pattern goes with it (its
 * pointer would, and the memory would stay allocated) */
__attribute__((destructor)) static void free_pattern(void) { pcre2_code_free(pattern); }

gptoss_status gptoss_o200k_split(const uint8_t *text, size_t len, gptoss_piece_fn fn, void *ctx, char *err) {
    pthread_once(&compile_once, compile_pattern);
    if (!pattern)
        return gptoss_fail(err, GPTOSS_E_UNSUPPORTED, "%s", compile_error);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(pattern, NULL);
    if (!md)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for the o200k matcher");
    gptoss_status st = GPTOSS_OK;
    size_t at = 0;
    while (!st && at < len) {
        int rc = pcre2_match(pattern, text, len, at, 0, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* the interpreter keeps its backtracking on the heap */
            rc = pcre2_match(pattern, text, len, at, PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) { /* only bytes that are no character are left */
            st = fn(ctx, text + at, len - at, err);
            break;
        }
        if (rc < 0) {
            PCRE2_UCHAR why[120];
            pcre2_get_error_message(rc, why, sizeof why);
            st = gptoss_fail(err, GPTOSS_E_INVALID, "o200k split at byte %zu: %s", at, (const char *)why);
            break;
        }
        const PCRE2_SIZE *span = pcre2_get_ovector_pointer(md);
        if (span[0] > at) /* invalid bytes before the match */
            st = fn(ctx, text + at, span[0] - at, err);
        if (!st)
            st = fn(ctx, text + span[0], span[1] - span[0], err);
        at = span[1]; /* every alternative takes at least one character */
    }
    pcre2_match_data_free(md);
    return st;
}
