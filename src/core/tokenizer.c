/* A tokenizer's vocabulary (tokenizer.h): the tokenizer.bin reader, which
 * checks the records before anything is sized by them, the entries and the
 * hash table that finds an entry by its bytes; encode is
 * tokenizer_encode.c's, decode tokenizer_decode.c's. */
#include "tokenizer_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "regular_file.h"

/* The files are little-endian, as is every host we build for. */
static int32_t read_i32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 29);
}

int gptoss_tokenizer_find(const gptoss_tokenizer *t, const uint8_t *s, size_t n) {
    if (n > (size_t)t->max_token_length)
        return -1;
    uint64_t h = hash_bytes(s, n);
    uint64_t tag = h >> 32;
    for (uint64_t i = h & t->mask;; i = (i + 1) & t->mask) {
        uint64_t slot = t->table[i];
        if (slot == 0)
            return -1;
        if (slot >> 32 != tag)
            continue;
        int id = (int)(uint32_t)slot - 1;
        if ((size_t)t->length[id] == n && memcmp(t->file + t->offset[id], s, n) == 0)
            return id;
    }
}

/* keeps the first (lowest) id of entries with equal bytes */
static void table_insert(gptoss_tokenizer *t, int id) {
    const uint8_t *s = t->file + t->offset[id];
    size_t n = (size_t)t->length[id];
    if (gptoss_tokenizer_find(t, s, n) >= 0)
        return;
    uint64_t h = hash_bytes(s, n);
    uint64_t i = h & t->mask;
    while (t->table[i] != 0)
        i = (i + 1) & t->mask;
    t->table[i] = (h >> 32) << 32 | (uint64_t)(uint32_t)(id + 1);
}

/* Reads the file once its size is plausible: vocab_size records of at most
 * max_token_length bytes bound it, so a wrong file (a model .bin, say) is
 * refused from its first four bytes instead of being read into memory. */
static gptoss_status read_whole_file(const char *path, int vocab_size, uint8_t **data, size_t *size,
                                     char *err) {
    int fd;
    uint64_t bytes;
    gptoss_status s = gptoss_open_regular(path, "tokenizer file", &fd, &bytes, err);
    if (s)
        return s;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "tokenizer file '%s': out of host memory for its stream",
                           path);
    }
    *size = (size_t)bytes;
    uint8_t head[4];
    if (*size < 4 || fread(head, 1, 4, f) != 4) {
        fclose(f);
        /* too short is the file's content; a failed read of 4 bytes it has, the file system's */
        return gptoss_fail(err, *size < 4 ? GPTOSS_E_INVALID : GPTOSS_E_IO,
                           "tokenizer file '%s' has %zu bytes, too few for the max_token_length "
                           "field",
                           path, *size);
    }
    int32_t max_len = read_i32(head);
    uint64_t most = 4 + (uint64_t)vocab_size * (8 + (uint64_t)(max_len > 0 ? max_len : 0));
    if (max_len > 0 && *size > most) {
        fclose(f);
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "tokenizer file '%s' has %zu bytes, more than %d entries of at most %d "
                           "bytes (max_token_length) can fill (%llu): not a tokenizer.bin for "
                           "vocab_size=%d?",
                           path, *size, vocab_size, max_len, (unsigned long long)most, vocab_size);
    }
    *data = malloc(*size);
    if (!*data)
        s = gptoss_fail(err, GPTOSS_E_HOST_MEMORY,
                        "tokenizer file '%s': out of host memory for %zu bytes", path, *size);
    else if (memcpy(*data, head, 4), fread(*data + 4, 1, *size - 4, f) != *size - 4) {
        s = gptoss_fail(err, GPTOSS_E_IO, "cannot read tokenizer file '%s': %s", path,
                        ferror(f) ? strerror(errno) : "short read");
        free(*data);
        *data = NULL;
    }
    fclose(f);
    return s;
}

/* Walks the records without allocating; every length is checked against the
 * bytes that remain before it is used (GPTOSS_E_INVALID). */
static gptoss_status validate(const uint8_t *file, size_t size, int vocab_size, const char *path,
                              char *err) {
    int32_t max_len = read_i32(file); /* read_whole_file saw at least these 4 bytes */
    if (max_len <= 0)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "tokenizer file '%s': max_token_length is %d, must be positive", path,
                           max_len);
    size_t pos = 4;
    int count = 0;
    for (; pos < size; count++) {
        if (count == vocab_size)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "tokenizer file '%s' holds more than vocab_size=%d entries (%zu "
                               "bytes follow entry %d)",
                               path, vocab_size, size - pos, vocab_size - 1);
        if (size - pos < 8)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "tokenizer file '%s' is truncated: entry %d at byte %zu needs 8 "
                               "bytes of score and length, %zu remain",
                               path, count, pos, size - pos);
        int32_t len = read_i32(file + pos + 4);
        if (len < 0 || len > max_len)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "tokenizer file '%s': entry %d at byte %zu has length %d, outside "
                               "0..%d (max_token_length)",
                               path, count, pos, len, max_len);
        if ((size_t)len > size - pos - 8)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "tokenizer file '%s' is truncated: entry %d at byte %zu has length "
                               "%d, %zu bytes remain",
                               path, count, pos, len, size - pos - 8);
        pos += 8 + (size_t)len;
    }
    if (count != vocab_size)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "tokenizer file '%s' holds %d entries, expected vocab_size=%d (give "
                           "{vocab_size=%d} if that is the model's vocabulary)",
                           path, count, vocab_size, count);
    return GPTOSS_OK;
}

gptoss_status gptoss_tokenizer_load(const char *path, int vocab_size, gptoss_tokenizer **out,
                                    char *err) {
    if (vocab_size <= 0)
        return gptoss_fail(err, GPTOSS_E_INVALID, "tokenizer: vocab_size must be positive (got %d)",
                           vocab_size);
    size_t size = 0;
    uint8_t *file = NULL;
    gptoss_status s = read_whole_file(path, vocab_size, &file, &size, err);
    return s ? s : gptoss_tokenizer_from_records(file, size, vocab_size, path, out, err);
}

gptoss_status gptoss_tokenizer_from_records(uint8_t *file, size_t size, int vocab_size, const char *path,
                                            gptoss_tokenizer **out, char *err) {
    gptoss_status s = size < 4 ? gptoss_fail(err, GPTOSS_E_INVALID, "tokenizer '%s' has %zu bytes, too few for the "
                                             "max_token_length field", path, size)
                               : validate(file, size, vocab_size, path, err);
    if (s) {
        free(file);
        return s;
    }
    gptoss_tokenizer *t = calloc(1, sizeof *t);
    uint64_t slots = 1;
    while (slots < 2 * (uint64_t)vocab_size)
        slots <<= 1;
    if (t) {
        t->file = file;
        t->offset = malloc(sizeof *t->offset * (size_t)vocab_size);
        t->length = malloc(sizeof *t->length * (size_t)vocab_size);
        t->score = malloc(sizeof *t->score * (size_t)vocab_size);
        t->special = malloc((size_t)vocab_size);
        t->special_length = calloc((size_t)read_i32(file) + 1, 1); /* validate saw a positive max_token_length */
        t->table = calloc(slots, sizeof *t->table);
    }
    if (!t || !t->offset || !t->length || !t->score || !t->special || !t->special_length || !t->table) {
        if (t)
            gptoss_tokenizer_free(t);
        else
            free(file);
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY,
                           "tokenizer file '%s': out of host memory for the tables of its %d entries", path,
                           vocab_size);
    }
    t->vocab_size = vocab_size;
    t->max_token_length = read_i32(file);
    t->mask = slots - 1;
    size_t pos = 4;
    for (int id = 0; id < vocab_size; id++) {
        memcpy(&t->score[id], file + pos, 4);
        t->length[id] = read_i32(file + pos + 4);
        t->offset[id] = pos + 8;
        t->special[id] = t->score[id] <= GPTOSS_SPECIAL_SCORE;
        t->special_length[t->length[id]] |= t->special[id];
        pos += 8 + (size_t)t->length[id];
    }
    for (int id = 0; id < vocab_size; id++)
        table_insert(t, id);
    /* A byte on its own: its raw entry, else "<0xHH>" (how the exporter stores
     * 0x00), else 0 as the course does for an unknown byte. */
    for (int b = 0; b < 256; b++) {
        uint8_t raw = (uint8_t)b;
        char hex[7];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        int id = gptoss_tokenizer_find(t, &raw, 1);
        if (id < 0)
            id = gptoss_tokenizer_find(t, (const uint8_t *)hex, 6);
        t->byte_id[b] = id < 0 ? 0 : id;
        t->byte_value[b] = raw;
    }
    *out = t;
    return GPTOSS_OK;
}

void gptoss_tokenizer_free(gptoss_tokenizer *t) {
    if (!t)
        return;
    free(t->file);
    free(t->offset);
    free(t->length);
    free(t->score);
    free(t->special);
    free(t->special_length);
    free(t->table);
    free(t);
}

int gptoss_tokenizer_vocab_size(const gptoss_tokenizer *t) { return t->vocab_size; }
int gptoss_tokenizer_max_token_length(const gptoss_tokenizer *t) { return t->max_token_length; }
int gptoss_tokenizer_is_special(const gptoss_tokenizer *t, int id) { return t->special[id]; }

const uint8_t *gptoss_tokenizer_entry(const gptoss_tokenizer *t, int id, size_t *len, float *score) {
    *len = (size_t)t->length[id];
    if (score)
        *score = t->score[id];
    return t->file + t->offset[id];
}
