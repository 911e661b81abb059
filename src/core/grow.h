/* Growing scratch arrays: realloc that keeps the old block on failure. */
#ifndef GPTOSS_GROW_H
#define GPTOSS_GROW_H

#include <stdlib.h>

/* *array becomes a block of bytes (contents kept); 0, or -1 with *array
 * untouched when memory is short. array is the address of any pointer. */
static inline int gptoss_grow(void *array, size_t bytes) {
    void **p = (void **)array;
    void *q = realloc(*p, bytes);
    if (!q)
        return -1;
    *p = q;
    return 0;
}

#endif
