/* How every fallible function below the Lua binding reports failure: a
 * status code saying what kind of failure it is, plus a message in a
 * caller-provided buffer of GPTOSS_ERR_LEN bytes. Messages say what was
 * wrong in the engine's terms; they never name a Lua function (the binding
 * puts the name of the function the user called in front). */
#ifndef GPTOSS_STATUS_H
#define GPTOSS_STATUS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" { /* the HIP engine is C++ */
#endif

#define GPTOSS_ERR_LEN 512

typedef enum {
    GPTOSS_OK = 0,
    GPTOSS_E_INVALID,       /* the caller's input: a batch, slot, option or shape out of range */
    GPTOSS_E_STATE,         /* not possible in this state (closed, logits replaced, ...) */
    GPTOSS_E_HOST_MEMORY,   /* host memory is short */
    GPTOSS_E_DEVICE_MEMORY, /* the device is short of memory for what was asked */
    GPTOSS_E_DEVICE,        /* the device or its runtime failed */
    GPTOSS_E_UNSUPPORTED,   /* this build or engine cannot do it */
    GPTOSS_E_DRAW,          /* a row's logits allow no token to be drawn */
    GPTOSS_E_IO,            /* a file could not be opened, read, mapped or written */
    GPTOSS_E_STOPPED        /* the caller's progress callback asked to stop */
} gptoss_status;

/* Long work reported as it goes: fn(arg, done, total) now and then, done rising to
 * total (the units are the work's own). A nonzero return stops the work, which undoes
 * what it did and fails with GPTOSS_E_STOPPED. */
typedef struct {
    int (*fn)(void *arg, uint64_t done, uint64_t total);
    void *arg;
} gptoss_progress;

/* Writes the formatted message into err (GPTOSS_ERR_LEN bytes) and returns
 * status, so that a failure is one statement: return gptoss_fail(...). */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
gptoss_status gptoss_fail(char *err, gptoss_status status, const char *fmt, ...);

#ifdef __cplusplus
}
#endif

#endif
