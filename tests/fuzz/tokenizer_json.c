/* libFuzzer target: a Hugging Face tokenizer.json (src/core/tokenizer_json.c),
 * then what it feeds (fuzz_use_tokenizer), then the tokenizer written as a
 * tokenizer.json and read back, which must give every entry again. Input:
 * one byte choosing vocab_size (1..256), then the file's bytes (written by
 * fuzz_file). */
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
    char *text;
    if (!gptoss_tokenizer_json_text(t, &text, err)) {
        gptoss_tokenizer *back;
        if (gptoss_tokenizer_load_json(fuzz_file((const uint8_t *)text, strlen(text), ".json"), 1 + data[0], &back,
                                       err))
            abort(); /* what the writer wrote, the reader refused */
        for (int id = 0; id < 1 + data[0]; id++) {
            size_t n1, n2;
            float s1, s2;
            const uint8_t *b1 = gptoss_tokenizer_entry(t, id, &n1, &s1), *b2 = gptoss_tokenizer_entry(back, id, &n2, &s2);
            if (n1 != n2 || memcmp(b1, b2, n1) != 0 || s1 != s2)
                abort(); /* an entry that did not come back */
        }
        gptoss_tokenizer_free(back);
        free(text);
    }
    gptoss_tokenizer_free(t);
    return 0;
}
