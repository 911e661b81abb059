/* Opening a tokenizer from a path: the loader above the two readers, which
 * picks the one the path needs (tokenizer.bin, tokenizer.c; tokenizer.json,
 * tokenizer_json.c), so that neither reader calls the other. */
#ifndef GPTOSS_TOKENIZER_LOAD_H
#define GPTOSS_TOKENIZER_LOAD_H

#include "tokenizer.h"

/* path: a checkpoint directory (its tokenizer.json), a .json file, or a tokenizer.bin */
gptoss_status gptoss_tokenizer_open(const char *path, int vocab_size, gptoss_tokenizer **out, char *err);

#endif
