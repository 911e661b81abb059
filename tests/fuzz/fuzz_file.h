/* For the targets whose reader takes a path: the input written to a file of
 * this process's own (rewritten for each input). */
#ifndef GPTOSS_FUZZ_FILE_H
#define GPTOSS_FUZZ_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *fuzz_file(const uint8_t *data, size_t size, const char *suffix) {
    static char path[96];
    snprintf(path, sizeof path, "/tmp/gptoss-fuzz-%d%s", (int)getpid(), suffix);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        abort(); /* the machine's fault, not the reader's */
    return path;
}

#endif
