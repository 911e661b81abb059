/* Host tensors: reference-counted contiguous storage of f32 or i32, and the
 * element-wise checks parity tests use. Shapes and views live in the Lua
 * binding; every view is a contiguous range of one storage. */
#ifndef GPTOSS_TENSOR_H
#define GPTOSS_TENSOR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" { /* the HIP engine is C++ */
#endif

typedef enum { GPTOSS_F32 = 0, GPTOSS_I32 = 1 } gptoss_dtype;

typedef struct {
    int refs;
    gptoss_dtype dtype;
    size_t count;
    void *data;
} gptoss_storage;

/* zero-filled; NULL when memory is short */
gptoss_storage *gptoss_storage_new(gptoss_dtype dtype, size_t count);
void gptoss_storage_retain(gptoss_storage *s);
void gptoss_storage_release(gptoss_storage *s);

double gptoss_elem(gptoss_dtype dtype, const void *data, size_t i);

/* index of the first maximum (strict >, as the course's argmax); NaNs never win */
size_t gptoss_argmax(gptoss_dtype dtype, const void *data, size_t n);

/* max |a_i - b_i|; NaN if any pair has a NaN, inf if a pair differs by inf */
double gptoss_max_abs_diff(gptoss_dtype da, const void *a, gptoss_dtype db, const void *b, size_t n);

/* every |a_i - b_i| <= atol + rtol * |b_i| (numpy's rule); NaN fails; equal
 * infinities pass. Returns the first failing index, or n when all pass. */
size_t gptoss_allclose(gptoss_dtype da, const void *a, gptoss_dtype db, const void *b, size_t n,
                       double atol, double rtol);

#ifdef __cplusplus
}
#endif

#endif
