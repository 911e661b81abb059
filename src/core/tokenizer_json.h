/* A Hugging Face tokenizer.json of byte-level BPE, as gpt-oss checkpoints
 * ship it, read into the same tokenizer as the tokenizer.bin exported from
 * its ranks (tokenizer_json.c). */
#ifndef GPTOSS_TOKENIZER_JSON_H
#define GPTOSS_TOKENIZER_JSON_H

#include "tokenizer.h"

gptoss_status gptoss_tokenizer_load_json(const char *path, int vocab_size, gptoss_tokenizer **out, char *err);

#endif
