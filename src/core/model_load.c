#include "model_load.h"

#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "regular_file.h"

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
    s = gptoss_model_open_course(path, fd, size, out, err);
    close(fd);
    return s;
}
