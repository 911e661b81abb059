/* A Hugging Face tokenizer.json (byte-level BPE, as gpt-oss checkpoints ship
 * it) read into the records of a tokenizer.bin, so that both files make the
 * same tokenizer: model.vocab's ids are the ranks, each key spelled in the
 * byte-level alphabet (below); added_tokens gives the special tokens; ids
 * that neither names (o200k_harmony's unnamed range) get the names
 * o200k_harmony gives them, <|reserved_N|>; and the lone 0x00 byte is
 * stored as "<0x00>", as the course's exporter stores it. */
#include "tokenizer_json.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "json_kind.h"
#include "regular_file.h"

/* The byte-level alphabet: bytes that are printable and not a space stand
 * for themselves (as code points), the other 68 for 256, 257, .. in byte
 * order. */
static int printable(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); }

static pthread_once_t alphabet_once = PTHREAD_ONCE_INIT;
static int16_t byte_of[256 + 68]; /* code point -> byte, -1: none */
static uint16_t code_of[256];     /* byte -> code point */

static void make_alphabet(void) {
    int next = 256;
    for (int b = 0; b < 256; b++) {
        byte_of[b] = printable(b) ? (int16_t)b : -1;
        code_of[b] = printable(b) ? (uint16_t)b : (uint16_t)next;
        if (!printable(b))
            byte_of[next++] = (int16_t)b;
    }
}

static int alphabet_byte(uint32_t cp) { return cp < 256 + 68 ? byte_of[cp] : -1; }

/* The course's entry for the lone 0x00 byte, which tokenizer.json spells as that byte. */
static const char LONE_ZERO[] = "<0x00>";

/* One code point of valid UTF-8 at s (n > 0 bytes left); 0 bytes used when invalid. */
static size_t utf8_code_point(const uint8_t *s, size_t n, uint32_t *cp) {
    size_t len = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || len > n)
        return 0;
    uint32_t v = len == 1 ? s[0] : s[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    *cp = v;
    return len;
}

/* key spelled in the byte-level alphabet -> its bytes in out (at most its length); -1 if not */
static long alphabet_decode(const char *key, uint8_t *out) {
    const uint8_t *s = (const uint8_t *)key;
    size_t n = strlen(key), at = 0, len = 0;
    while (at < n) {
        uint32_t cp;
        size_t used = utf8_code_point(s + at, n - at, &cp);
        int b = used ? alphabet_byte(cp) : -1;
        if (b < 0)
            return -1;
        out[len++] = (uint8_t)b;
        at += used;
    }
    return (long)len;
}

/* n bytes spelled in the byte-level alphabet into out (room for 2n + 1), NUL-terminated:
 * code points below 324 take one or two bytes of UTF-8, and none is 0 */
static void alphabet_encode(const uint8_t *b, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned cp = code_of[b[i]];
        if (cp < 0x80) {
            out[k++] = (char)cp;
        } else {
            out[k++] = (char)(0xC0 | cp >> 6);
            out[k++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    out[k] = 0;
}

typedef struct {
    uint8_t *bytes; /* every entry's bytes, back to back */
    size_t used, cap;
    size_t *at;     /* [vocab] where entry id starts, SIZE_MAX: no entry yet */
    int32_t *len;
    float *score;
} entries;

static gptoss_status add_bytes(entries *e, int id, const uint8_t *b, size_t n, float score, char *err) {
    if (!e->bytes || e->used + n > e->cap) { /* the first entry may be empty: allocate anyway */
        size_t cap = e->cap ? e->cap : 1 << 20;
        while (cap < e->used + n)
            cap *= 2;
        if (gptoss_grow(&e->bytes, cap))
            return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for the vocabulary");
        e->cap = cap;
    }
    memcpy(e->bytes + e->used, b, n);
    e->at[id] = e->used;
    e->len[id] = (int32_t)n;
    e->score[id] = score;
    e->used += n;
    return GPTOSS_OK;
}

/* id from a JSON integer within 0..vocab-1 not taken yet, or a failure naming what */
static gptoss_status entry_id(const entries *e, const json_t *v, int vocab, const char *path, const char *what,
                              int *id, char *err) {
    char buf[80];
    if (!json_is_integer(v))
        return gptoss_fail(err, GPTOSS_E_INVALID, "tokenizer.json '%s': %s: the id must be an integer (got %s)", path,
                           what, gptoss_json_describe(v, buf, sizeof buf));
    json_int_t i = json_integer_value(v);
    if (i < 0 || i >= vocab)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "tokenizer.json '%s': %s has id %lld, outside 0..%d (vocab_size=%d)", path, what,
                           (long long)i, vocab - 1, vocab);
    if (e->at[i] != SIZE_MAX)
        return gptoss_fail(err, GPTOSS_E_INVALID, "tokenizer.json '%s': %s has id %lld, which another entry has",
                           path, what, (long long)i);
    *id = (int)i;
    return GPTOSS_OK;
}

static gptoss_status read_vocab(entries *e, const json_t *vocab_obj, int vocab, const char *path, char *err) {
    const char *key;
    json_t *v;
    uint8_t bytes[1024];
    json_object_foreach((json_t *)vocab_obj, key, v) {
        char what[128];
        snprintf(what, sizeof what, "model.vocab entry \"%.60s\"", key);
        if (strlen(key) > sizeof bytes)
            return gptoss_fail(err, GPTOSS_E_INVALID, "tokenizer.json '%s': %s is longer than %zu bytes", path,
                               what, sizeof bytes);
        long n = alphabet_decode(key, bytes);
        if (n < 0)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "tokenizer.json '%s': %s is not spelled in the byte-level alphabet", path, what);
        int id;
        gptoss_status s = entry_id(e, v, vocab, path, what, &id, err);
        if (!s && n == 1 && bytes[0] == 0)
            s = add_bytes(e, id, (const uint8_t *)LONE_ZERO, sizeof LONE_ZERO - 1, (float)id, err);
        else if (!s)
            s = add_bytes(e, id, bytes, (size_t)n, (float)id, err);
        if (s)
            return s;
    }
    return GPTOSS_OK;
}

static gptoss_status read_added(entries *e, const json_t *added, int vocab, const char *path, char *err) {
    size_t i;
    json_t *t;
    json_array_foreach(added, i, t) {
        char what[80];
        snprintf(what, sizeof what, "added_tokens[%zu]", i);
        const json_t *content = json_object_get(t, "content");
        if (!json_is_object(t) || !json_is_string(content))
            return gptoss_fail(err, GPTOSS_E_INVALID, "tokenizer.json '%s': %s must be an object with a string content",
                               path, what);
        int id;
        gptoss_status s = entry_id(e, json_object_get(t, "id"), vocab, path, what, &id, err);
        if (!s)
            s = add_bytes(e, id, (const uint8_t *)json_string_value(content), json_string_length(content),
                          json_is_true(json_object_get(t, "special")) ? GPTOSS_SPECIAL_SCORE_STORED : (float)id, err);
        if (s)
            return s;
    }
    return GPTOSS_OK;
}

/* ids no entry named: past the vocabulary's ranks they are o200k_harmony's
 * reserved specials; among the ranks, a hole is an error */
static gptoss_status fill_reserved(entries *e, int vocab, int ranks, const char *path, char *err) {
    for (int id = 0; id < vocab; id++) {
        if (e->at[id] != SIZE_MAX)
            continue;
        if (id < ranks)
            return gptoss_fail(err, GPTOSS_E_INVALID, "tokenizer.json '%s': model.vocab has no entry for id %d", path,
                               id);
        char name[32];
        int n = snprintf(name, sizeof name, "<|reserved_%d|>", id);
        gptoss_status s = add_bytes(e, id, (const uint8_t *)name, (size_t)n, GPTOSS_SPECIAL_SCORE_STORED, err);
        if (s)
            return s;
    }
    return GPTOSS_OK;
}

/* o200k_harmony's tokenizer.json leaves about a thousand ids unnamed; far more
 * is a vocab_size meant for another vocabulary (2^31-1 from a tiny file), refused
 * before the entries are allocated and the reserved names made for them. */
enum { MAX_UNNAMED = 1 << 16 };

static gptoss_status check_unnamed(const json_t *vocab_obj, const json_t *added, int vocab, const char *path,
                                   char *err) {
    uint64_t named = (uint64_t)json_object_size(vocab_obj) + (uint64_t)json_array_size(added);
    if ((uint64_t)vocab <= named + MAX_UNNAMED)
        return GPTOSS_OK;
    return gptoss_fail(err, GPTOSS_E_INVALID,
                       "tokenizer.json '%s' names %llu ids; vocab_size=%d would leave %llu unnamed, more than "
                       "the %d reserved ones a vocabulary may leave out (is vocab_size the model's?)",
                       path, (unsigned long long)named, vocab, (unsigned long long)vocab - named, MAX_UNNAMED);
}

/* the entries as tokenizer.bin's records */
static gptoss_status serialize(const entries *e, int vocab, uint8_t **out, size_t *size, char *err) {
    int32_t longest = 1;
    for (int id = 0; id < vocab; id++)
        longest = e->len[id] > longest ? e->len[id] : longest;
    *size = 4 + (size_t)vocab * 8 + e->used;
    uint8_t *p = *out = malloc(*size);
    if (!p)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for %zu bytes of vocabulary", *size);
    memcpy(p, &longest, 4);
    p += 4;
    for (int id = 0; id < vocab; id++) {
        memcpy(p, &e->score[id], 4);
        memcpy(p + 4, &e->len[id], 4);
        memcpy(p + 8, e->bytes + e->at[id], (size_t)e->len[id]);
        p += 8 + e->len[id];
    }
    return GPTOSS_OK;
}

gptoss_status gptoss_tokenizer_load_json(const char *path, int vocab_size, gptoss_tokenizer **out, char *err) {
    if (vocab_size <= 0)
        return gptoss_fail(err, GPTOSS_E_INVALID, "tokenizer: vocab_size must be positive (got %d)", vocab_size);
    pthread_once(&alphabet_once, make_alphabet);
    json_error_t jerr;
    json_t *root;
    gptoss_status s = gptoss_json_load_regular(path, "tokenizer.json", JSON_REJECT_DUPLICATES, &root, &jerr, err);
    if (s == GPTOSS_E_INVALID)
        return gptoss_fail(err, GPTOSS_E_INVALID, "tokenizer.json '%s' is not JSON: %s (line %d, column %d)", path,
                           jerr.text, jerr.line, jerr.column);
    if (s)
        return s;
    entries e = {0};
    const json_t *model = json_object_get(root, "model");
    const json_t *type = json_object_get(model, "type"), *vocab_obj = json_object_get(model, "vocab");
    const json_t *added = json_object_get(root, "added_tokens");
    char buf[80];
    if (!json_is_object(model) || !json_is_string(type) || strcmp(json_string_value(type), "BPE") != 0)
        s = gptoss_fail(err, GPTOSS_E_INVALID, "tokenizer.json '%s': model.type must be \"BPE\" (got %s)", path,
                        gptoss_json_describe(type, buf, sizeof buf));
    else if (!json_is_object(vocab_obj))
        s = gptoss_fail(err, GPTOSS_E_INVALID, "tokenizer.json '%s': model.vocab must be an object (got %s)", path,
                        gptoss_json_kind(vocab_obj));
    else if (added && !json_is_array(added))
        s = gptoss_fail(err, GPTOSS_E_INVALID, "tokenizer.json '%s': added_tokens must be an array (got %s)", path,
                        gptoss_json_kind(added));
    if (!s)
        s = check_unnamed(vocab_obj, added, vocab_size, path, err);
    if (!s) {
        e.at = malloc(sizeof *e.at * (size_t)vocab_size);
        e.len = malloc(sizeof *e.len * (size_t)vocab_size);
        e.score = malloc(sizeof *e.score * (size_t)vocab_size);
        if (!e.at || !e.len || !e.score)
            s = gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for %d entries", vocab_size);
        else
            memset(e.at, 0xFF, sizeof *e.at * (size_t)vocab_size); /* SIZE_MAX: no entry */
    }
    if (!s)
        s = read_vocab(&e, vocab_obj, vocab_size, path, err);
    if (!s && added)
        s = read_added(&e, added, vocab_size, path, err);
    if (!s)
        s = fill_reserved(&e, vocab_size, (int)json_object_size(vocab_obj), path, err);
    uint8_t *records = NULL;
    size_t size = 0;
    if (!s)
        s = serialize(&e, vocab_size, &records, &size, err);
    json_decref(root);
    free(e.bytes);
    free(e.at);
    free(e.len);
    free(e.score);
    return s ? s : gptoss_tokenizer_from_records(records, size, vocab_size, path, out, err);
}

/* One entry of added_tokens, with the fields Hugging Face's tokenizers write. */
static int add_special(json_t *added, int id, const uint8_t *b, size_t len) {
    json_t *content = json_stringn((const char *)b, len); /* NULL when the bytes are not UTF-8 */
    return !content || json_array_append_new(added, json_pack("{s:i, s:o, s:b, s:b, s:b, s:b, s:b}", "id", id,
                                                              "content", content, "single_word", 0, "lstrip", 0,
                                                              "rstrip", 0, "normalized", 0, "special", 1));
}

/* One rank in model.vocab, keyed by its bytes in the byte-level alphabet (room in key). */
static gptoss_status add_rank(json_t *ranks, int id, const uint8_t *b, size_t len, char *key, char *err) {
    if (len == sizeof LONE_ZERO - 1 && memcmp(b, LONE_ZERO, len) == 0)
        b = (const uint8_t *)"", len = 1;
    alphabet_encode(b, len, key);
    const json_t *other = json_object_get(ranks, key);
    if (other)
        return gptoss_fail(err, GPTOSS_E_INVALID, "tokenizer.json: tokens %lld and %d have the same bytes",
                           (long long)json_integer_value(other), id);
    if (json_object_set_new(ranks, key, json_integer(id)))
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for the entries of tokenizer.json");
    return GPTOSS_OK;
}

/* The vocabulary as gptoss_tokenizer_load_json reads it: ranks (scored by
 * their ids) in model.vocab, specials in added_tokens. */
static gptoss_status tokenizer_json(const gptoss_tokenizer *t, json_t *ranks, json_t *added, char *err) {
    int vocab = gptoss_tokenizer_vocab_size(t);
    char *key = malloc(2 * (size_t)gptoss_tokenizer_max_token_length(t) + 1);
    gptoss_status s = key ? GPTOSS_OK
                          : gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for tokenizer.json's keys");
    for (int id = 0; id < vocab && !s; id++) {
        size_t len;
        float score;
        const uint8_t *b = gptoss_tokenizer_entry(t, id, &len, &score);
        if (gptoss_tokenizer_is_special(t, id)) {
            if (add_special(added, id, b, len))
                s = gptoss_fail(err, GPTOSS_E_INVALID, "tokenizer.json: special token %d is not UTF-8 text", id);
        } else if (score != (float)id) {
            s = gptoss_fail(err, GPTOSS_E_INVALID,
                            "tokenizer.json keeps a token's rank as its id, but token %d has score %g", id,
                            (double)score);
        } else {
            s = add_rank(ranks, id, b, len, key, err);
        }
    }
    free(key);
    return s;
}

gptoss_status gptoss_tokenizer_json_text(const gptoss_tokenizer *t, char **text, char *err) {
    pthread_once(&alphabet_once, make_alphabet);
    json_t *ranks = json_object(), *added = json_array();
    gptoss_status s = ranks && added ? tokenizer_json(t, ranks, added, err)
                                     : gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for tokenizer.json");
    json_t *root = s ? NULL
                     : json_pack("{s:s, s:O, s:{s:s, s:O, s:[]}}", "version", "1.0", "added_tokens", added, "model",
                                 "type", "BPE", "vocab", ranks, "merges");
    *text = root ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    json_decref(ranks);
    json_decref(added);
    if (!s && !*text)
        s = gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for tokenizer.json");
    return s;
}
