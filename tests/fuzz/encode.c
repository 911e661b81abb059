/* libFuzzer target: encode of any bytes with the exported vocabulary
 * ($GPTOSS_TOKENIZER, else build/tokenizer.bin), the course's way and the
 * o200k way, with and without special names; decoding the ids must give the
 * bytes back (docs/api.md#tokenizer), or the target aborts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

static gptoss_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *path = getenv("GPTOSS_TOKENIZER");
    char err[GPTOSS_ERR_LEN];
    if (gptoss_tokenizer_load(path ? path : "build/tokenizer.bin", GPTOSS_VOCAB_SIZE, &tok, err)) {
        fprintf(stderr, "encode fuzzer: %s\n", err);
        exit(1);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int mode = 0; mode < 4; mode++) {
        gptoss_ids ids = {0};
        char err[GPTOSS_ERR_LEN];
        if (gptoss_tokenizer_encode(tok, data, size, mode & 1, (gptoss_split)(mode >> 1), &ids, err))
            abort(); /* only memory can fail */
        /* specials decode to their names: the text comes back either way */
        size_t at = 0;
        for (size_t k = 0; k < ids.n; k++) {
            size_t len;
            const uint8_t *p = gptoss_tokenizer_piece(tok, ids.ids[k], &len);
            if (at + len > size || memcmp(data + at, p, len) != 0)
                abort();
            at += len;
        }
        if (at != size)
            abort();
        gptoss_ids_free(&ids);
    }
    return 0;
}
