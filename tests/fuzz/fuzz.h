/* What the fuzz targets share. */
#ifndef GPTOSS_FUZZ_H
#define GPTOSS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizer.h"

/* For the targets whose reader takes a path: the input written to a file of
 * this process's own (rewritten for each input, removed when the run exits),
 * in memory (/dev/shm) where there is one: rewriting a file on a disk can
 * wait for the device. A target passes the same suffix every time. */
static char fuzz_path[96];
static void fuzz_file_remove(void) { unlink(fuzz_path); }
static const char *fuzz_file(const uint8_t *data, size_t size, const char *suffix) {
    if (!fuzz_path[0]) {
        snprintf(fuzz_path, sizeof fuzz_path, "%s/gptoss-fuzz-%d%s",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid(), suffix);
        atexit(fuzz_file_remove);
    }
    const char *path = fuzz_path;
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        abort(); /* the machine's fault, not the reader's */
    return path;
}

/* What a loaded tokenizer feeds: some texts encoded in both modes, with and
 * without special names, and each id decoded. */
static void fuzz_use_tokenizer(const gptoss_tokenizer *t) {
    static const char *const texts[] = {"hello  world 12345", " <|start|>x<|end|> \xff\xfe", "don't\r\n\n 2 \xc3"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        for (int mode = 0; mode < 4; mode++) {
            gptoss_ids ids = {0};
            char err[GPTOSS_ERR_LEN];
            if (!gptoss_tokenizer_encode(t, (const uint8_t *)texts[i], strlen(texts[i]), mode & 1,
                                         (gptoss_split)(mode >> 1), &ids, err))
                for (size_t k = 0; k < ids.n; k++) {
                    size_t len;
                    (void)gptoss_tokenizer_piece(t, ids.ids[k], &len);
                }
            gptoss_ids_free(&ids);
        }
}

#endif
