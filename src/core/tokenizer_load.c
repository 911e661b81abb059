#include "tokenizer_load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "regular_file.h"
#include "tokenizer_json.h"

gptoss_status gptoss_tokenizer_open(const char *path, int vocab_size, gptoss_tokenizer **out, char *err) {
    struct stat st;
    size_t n = strlen(path);
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        char *json = gptoss_path_join(path, "tokenizer.json");
        if (!json)
            return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for the path of '%s'/tokenizer.json",
                               path);
        gptoss_status s = gptoss_tokenizer_load_json(json, vocab_size, out, err);
        free(json);
        return s;
    }
    if (n >= 5 && strcmp(path + n - 5, ".json") == 0)
        return gptoss_tokenizer_load_json(path, vocab_size, out, err);
    return gptoss_tokenizer_load(path, vocab_size, out, err);
}
