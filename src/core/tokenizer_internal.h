/* Inside a tokenizer: the vocabulary the tokenizer.bin reader builds
 * (tokenizer.c) and encode (tokenizer_encode.c) and decode
 * (tokenizer_decode.c) read. Not part of the tokenizer's interface
 * (tokenizer.h). */
#ifndef GPTOSS_TOKENIZER_INTERNAL_H
#define GPTOSS_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

struct gptoss_tokenizer {
    uint8_t *file; /* the whole file; entries point into it */
    int vocab_size, max_token_length;
    size_t *offset;
    int32_t *length;
    float *score;
    uint8_t *special;
    uint8_t *special_length; /* [max_token_length + 1]: 1 where a special token has that many bytes */
    /* open addressing: (hash tag << 32) | (id + 1); 0 is an empty slot */
    uint64_t *table;
    uint64_t mask;
    int32_t byte_id[256];
    uint8_t byte_value[256];
};

#endif
