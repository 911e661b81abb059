#include "regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *gptoss_file_kind(mode_t mode) {
    return S_ISREG(mode) ? "a regular file" : S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a named pipe"
         : S_ISCHR(mode) ? "a character device" : S_ISBLK(mode) ? "a block device" : S_ISSOCK(mode) ? "a socket"
         : "something else";
}

static gptoss_status not_regular(const char *path, const char *what, mode_t mode, char *err) {
    return gptoss_fail(err, GPTOSS_E_IO, "%s%s'%s' is %s, not a regular file", what ? what : "", what ? " " : "",
                       path, gptoss_file_kind(mode));
}

static gptoss_status cannot_open(const char *path, const char *what, char *err) {
    return gptoss_fail(err, GPTOSS_E_IO, "cannot open %s%s'%s': %s", what ? what : "", what ? " " : "", path,
                       strerror(errno));
}

gptoss_status gptoss_open_regular(const char *path, const char *what, int *fd, uint64_t *size, char *err) {
    struct stat st;
    if (stat(path, &st) != 0)
        return cannot_open(path, what, err);
    if (!S_ISREG(st.st_mode))
        return not_regular(path, what, st.st_mode, err);
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (f < 0)
        return cannot_open(path, what, err);
    gptoss_status s = GPTOSS_OK;
    int flags;
    if (fstat(f, &st) != 0 || (flags = fcntl(f, F_GETFL)) < 0 || fcntl(f, F_SETFL, flags & ~O_NONBLOCK) != 0)
        s = cannot_open(path, what, err);
    else if (!S_ISREG(st.st_mode))
        s = not_regular(path, what, st.st_mode, err);
    if (s) {
        close(f);
        return s;
    }
    *fd = f;
    *size = (uint64_t)st.st_size;
    return GPTOSS_OK;
}

gptoss_status gptoss_json_load_regular(const char *path, const char *what, size_t flags, json_t **root,
                                       json_error_t *jerr, char *err) {
    int fd;
    uint64_t size;
    gptoss_status s = gptoss_open_regular(path, what, &fd, &size, err);
    if (s)
        return s;
    *root = json_loadfd(fd, flags, jerr);
    close(fd);
    return *root ? GPTOSS_OK : GPTOSS_E_INVALID;
}

int gptoss_regular_file(const char *path, char *why) {
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(why, GPTOSS_ERR_LEN, "%s", strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        not_regular(path, NULL, st.st_mode, why);
        return 0;
    }
    return 1;
}

size_t gptoss_path_length(const char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    return n;
}

char *gptoss_path_join(const char *dir, const char *name) {
    size_t a = gptoss_path_length(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p)
        snprintf(p, a + b + 2, "%.*s%s%s", (int)a, dir, a == 0 || dir[a - 1] == '/' ? "" : "/", name);
    return p;
}
