/* A Hugging Face tokenizer.json of byte-level BPE, as gpt-oss checkpoints
 * ship it, read into the same tokenizer as the tokenizer.bin exported from
 * its ranks, and written from one (tokenizer_json.c). */
#ifndef GPTOSS_TOKENIZER_JSON_H
#define GPTOSS_TOKENIZER_JSON_H

#include "tokenizer.h"

gptoss_status gptoss_tokenizer_load_json(const char *path, int vocab_size, gptoss_tokenizer **out, char *err);

/* t as the text of a tokenizer.json that gptoss_tokenizer_load_json reads
 * back into the same entries: model.vocab holds the ranks (merges stays empty,
 * as ranks are what the encoder uses), added_tokens the specials. *text is
 * malloc'd. GPTOSS_E_INVALID when t cannot be written so (a rank whose score
 * is not its id, two ranks of the same bytes, a special that is not UTF-8);
 * GPTOSS_E_HOST_MEMORY. */
gptoss_status gptoss_tokenizer_json_text(const gptoss_tokenizer *t, char **text, char *err);

#endif
