#include "model_load.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"

gptoss_status gptoss_model_open(const char *path, gptoss_model **out, char *err) {
    struct stat st;
    if (stat(path, &st) != 0)
        return gptoss_fail(err, GPTOSS_E_IO, "cannot open model file '%s': %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) /* its config.json says which layout */
        return gptoss_checkpoint_open(path, out, err);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return gptoss_fail(err, GPTOSS_E_IO, "cannot open model file '%s': %s", path, strerror(errno));
    gptoss_status s;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        s = gptoss_fail(err, GPTOSS_E_IO,
                        "cannot read model file '%s': neither a regular file nor a directory", path);
    else
        s = gptoss_model_open_course(path, fd, (uint64_t)st.st_size, out, err);
    close(fd);
    return s;
}
