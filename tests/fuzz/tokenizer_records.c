/* libFuzzer target: tokenizer.bin records (src/core/tokenizer.c), then what
 * a loaded tokenizer feeds (fuzz_use_tokenizer). Input: one byte choosing
 * vocab_size (1..256), then the file's bytes. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    int vocab = 1 + data[0];
    uint8_t *records = malloc(size - 1 ? size - 1 : 1);
    memcpy(records, data + 1, size - 1);
    gptoss_tokenizer *t;
    char err[GPTOSS_ERR_LEN];
    if (gptoss_tokenizer_from_records(records, size - 1, vocab, "fuzz", &t, err))
        return 0; /* records are freed on failure too */
    fuzz_use_tokenizer(t);
    gptoss_tokenizer_free(t);
    return 0;
}
