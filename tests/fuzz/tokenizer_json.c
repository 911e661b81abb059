/* libFuzzer target: a Hugging Face tokenizer.json (src/core/tokenizer_json.c),
 * then what it feeds (fuzz_use_tokenizer). Input: one byte choosing
 * vocab_size (1..256), then the file's bytes (written by fuzz_file). */
#include "fuzz.h"
#include "tokenizer_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    gptoss_tokenizer *t;
    char err[GPTOSS_ERR_LEN];
    if (gptoss_tokenizer_load_json(fuzz_file(data + 1, size - 1, ".json"), 1 + data[0], &t, err))
        return 0;
    fuzz_use_tokenizer(t);
    gptoss_tokenizer_free(t);
    return 0;
}
