/* libFuzzer target: tokenizer.bin records (src/core/tokenizer.c), then what
 * a loaded tokenizer feeds: encode in both modes, with and without special
 * names, and decode of the ids. Input: one byte choosing vocab_size
 * (1..256), then the file's bytes. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

static const char *const TEXTS[] = {"hello world 12345", "  <|start|>x<|end|> \xff\xfe", "don't\r\n\n 2"};

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
    for (size_t i = 0; i < sizeof TEXTS / sizeof TEXTS[0]; i++)
        for (int mode = 0; mode < 4; mode++) {
            gptoss_ids ids = {0};
            if (!gptoss_tokenizer_encode(t, (const uint8_t *)TEXTS[i], strlen(TEXTS[i]), mode & 1,
                                         (gptoss_split)(mode >> 1), &ids, err))
                for (size_t k = 0; k < ids.n; k++) {
                    size_t len;
                    (void)gptoss_tokenizer_piece(t, ids.ids[k], &len);
                }
            gptoss_ids_free(&ids);
        }
    gptoss_tokenizer_free(t);
    return 0;
}
