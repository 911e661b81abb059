/* libFuzzer target: a Hugging Face tokenizer.json (src/core/tokenizer_json.c),
 * then an encode and decode with what it loads. Input: one byte choosing
 * vocab_size (1..256), then the file's bytes (fuzz_file.h). */
#include <string.h>

#include "fuzz_file.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    const char *path = fuzz_file(data + 1, size - 1, ".json");
    gptoss_tokenizer *t;
    char err[GPTOSS_ERR_LEN];
    if (gptoss_tokenizer_load_json(path, 1 + data[0], &t, err) == GPTOSS_OK) {
        gptoss_ids ids = {0};
        static const char text[] = "hello  world<|start|>12 \xc3";
        if (!gptoss_tokenizer_encode(t, (const uint8_t *)text, sizeof text - 1, 1, GPTOSS_SPLIT_O200K, &ids, err))
            for (size_t k = 0; k < ids.n; k++) {
                size_t len;
                (void)gptoss_tokenizer_piece(t, ids.ids[k], &len);
            }
        gptoss_ids_free(&ids);
        gptoss_tokenizer_free(t);
    }
    return 0;
}
