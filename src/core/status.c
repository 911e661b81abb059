#include "status.h"

#include <stdarg.h>
#include <stdio.h>

gptoss_status gptoss_fail(char *err, gptoss_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, GPTOSS_ERR_LEN, fmt, ap);
    va_end(ap);
    return status;
}
