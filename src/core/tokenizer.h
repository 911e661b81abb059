/* The course's tokenizer.bin: loader, encode (the text cut into pieces, the
 * course's way or tiktoken's o200k way, then in each piece repeated merge of
 * the adjacent pair whose concatenation has the lowest token id) and decode.
 *
 * The course rescans a whole piece after every merge; here each part keeps
 * one candidate (its pair with the right neighbour) in an indexed min-heap
 * keyed by (rank, start offset), and the vocabulary is a hash table, so a
 * piece of n bytes costs O(n log n). The heap pops the same pair the course's
 * left-to-right scan picks: lowest rank, leftmost on ties. */
#ifndef GPTOSS_TOKENIZER_H
#define GPTOSS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define GPTOSS_VOCAB_SIZE 201088
/* entries scoring at or below this are special tokens (the course's rule) */
#define GPTOSS_SPECIAL_SCORE (-1e29f)
/* the score the exporter gives them */
#define GPTOSS_SPECIAL_SCORE_STORED (-1e30f)

typedef struct gptoss_tokenizer gptoss_tokenizer;

/* Reads and validates the whole file before allocating anything sized by
 * it. GPTOSS_E_IO when the file cannot be opened or read (or is not a
 * regular file); GPTOSS_E_INVALID for a vocab_size below 1 or a file that
 * is not a tokenizer.bin of vocab_size entries; GPTOSS_E_HOST_MEMORY. */
gptoss_status gptoss_tokenizer_load(const char *path, int vocab_size, gptoss_tokenizer **out,
                                    char *err);
/* The same from records laid out as in the file (the whole file's bytes),
 * which it takes over (freed on failure too); name is for messages. */
gptoss_status gptoss_tokenizer_from_records(uint8_t *records, size_t size, int vocab_size, const char *name,
                                            gptoss_tokenizer **out, char *err);
void gptoss_tokenizer_free(gptoss_tokenizer *t);

int gptoss_tokenizer_vocab_size(const gptoss_tokenizer *t);
int gptoss_tokenizer_max_token_length(const gptoss_tokenizer *t);
/* the stored entry of id (0 <= id < vocab_size) */
const uint8_t *gptoss_tokenizer_entry(const gptoss_tokenizer *t, int id, size_t *len, float *score);
int gptoss_tokenizer_is_special(const gptoss_tokenizer *t, int id);
/* the id whose stored bytes are exactly s[0..n) (the lowest such id), or -1 */
int gptoss_tokenizer_find(const gptoss_tokenizer *t, const uint8_t *s, size_t n);
/* decode_piece: "<0xHH>" is byte HH, anything else its stored bytes */
const uint8_t *gptoss_tokenizer_piece(const gptoss_tokenizer *t, int id, size_t *len);

typedef struct {
    int32_t *ids;
    size_t n, cap;
} gptoss_ids;

/* How text is cut into the pieces BPE merges one by one. */
typedef enum {
    GPTOSS_SPLIT_COURSE, /* the course's: digit runs in threes, every other run one piece */
    GPTOSS_SPLIT_O200K   /* tiktoken's o200k pattern (o200k.h), as OpenAI's own stack encodes */
} gptoss_split;

/* Appends the ids of text to out. With special != 0, special-token names
 * found in the text become their ids and the text between them is encoded
 * as usual. GPTOSS_E_HOST_MEMORY when memory is short, GPTOSS_E_INVALID
 * for a piece of 2^32-1 bytes or more. */
gptoss_status gptoss_tokenizer_encode(const gptoss_tokenizer *t, const uint8_t *text, size_t len,
                                      int special, gptoss_split split, gptoss_ids *out, char *err);
void gptoss_ids_free(gptoss_ids *ids);

/* The length of the longest prefix of s that does not end inside a UTF-8
 * sequence that later bytes could still complete. */
size_t gptoss_utf8_complete_prefix(const uint8_t *s, size_t n);

#endif
