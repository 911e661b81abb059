#include "model_load.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "regular_file.h"

/* Whether buf (n bytes from the start of a file) reads as a tokenizer.bin: max_token_length,
 * then records (float score, int32 length, that many bytes), every one that buf holds whole
 * with a length in 1..max_token_length and a score of 0 or a finite normal float (an
 * exporter's rank or -1e30; a model header's small integers read as denormals). */
static int tokenizer_like(const unsigned char *buf, size_t n) {
    int32_t max_len;
    memcpy(&max_len, buf, 4);
    if (n < 12 || max_len < 1 || max_len > 4096)
        return 0;
    size_t at = 4;
    int records = 0;
    while (at + 8 <= n) {
        float score;
        int32_t len;
        memcpy(&score, buf + at, 4);
        memcpy(&len, buf + at + 4, 4);
        if (len < 1 || len > max_len || (score != 0 && !isnormal(score)))
            return 0;
        at += 8 + (size_t)len;
        records += at <= n;
    }
    return records > 0;
}

/* A file the course reader refused, named in err for what it is when its first bytes say
 * it is one of a checkpoint's files or a tokenizer.bin, whose header read as a model's
 * would only give nonsense values; err is left as it is otherwise. */
static void name_misplaced_file(const char *path, int fd, uint64_t size, char *err) {
    unsigned char head[512];
    ssize_t got = pread(fd, head, sizeof head, 0);
    size_t n = got > 0 ? (size_t)got : 0, i = 0;
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path, *dir = slash ? path : ".";
    int dir_len = slash ? (int)(slash - path) : 1;
    while (i < n && strchr(" \t\r\n", head[i]))
        i++;
    uint64_t json_bytes = 0; /* a safetensors file: that many bytes of JSON, then the data */
    if (n >= 8)
        memcpy(&json_bytes, head, 8);
    if (i < n && head[i] == '{' && strcmp(name, "config.json") == 0)
        gptoss_fail(err, GPTOSS_E_INVALID,
                    "'%s' is a checkpoint's config.json: pass the checkpoint's directory, '%.*s'", path,
                    dir_len, dir);
    else if (i < n && head[i] == '{')
        gptoss_fail(err, GPTOSS_E_INVALID,
                    "'%s' is a JSON file, not a model: pass a course .bin or a checkpoint's directory",
                    path);
    else if (n > 8 && head[8] == '{' && json_bytes <= size - 8)
        gptoss_fail(err, GPTOSS_E_INVALID,
                    "'%s' is a safetensors file, part of a checkpoint: pass the checkpoint's "
                    "directory, '%.*s'",
                    path, dir_len, dir);
    else if (tokenizer_like(head, n))
        gptoss_fail(err, GPTOSS_E_INVALID,
                    "'%s' is a tokenizer.bin, not a model: pass it as the tokenizer", path);
}

gptoss_status gptoss_model_open(const char *path, gptoss_model **out, char *err) {
    struct stat st;
    int seen = stat(path, &st) == 0; /* when not, gptoss_open_regular says why */
    if (seen && S_ISDIR(st.st_mode)) /* its config.json says which layout */
        return gptoss_checkpoint_open(path, out, err);
    if (seen && !S_ISREG(st.st_mode))
        return gptoss_fail(err, GPTOSS_E_IO, "model file '%s' is %s, neither a regular file nor a directory", path,
                           gptoss_file_kind(st.st_mode));
    int fd;
    uint64_t size;
    gptoss_status s = gptoss_open_regular(path, "model file", &fd, &size, err);
    if (s)
        return s;
    if ((s = gptoss_model_open_course(path, fd, size, out, err)) == GPTOSS_E_INVALID)
        name_misplaced_file(path, fd, size, err);
    close(fd);
    return s;
}
