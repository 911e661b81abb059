/* A model: a validated config plus its 16 tensors, either mapped read-only
 * from a course .bin file or generated from the synthetic recipe. */
#ifndef GPTOSS_MODEL_H
#define GPTOSS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

#ifdef __cplusplus
extern "C" { /* the HIP engine is C++ */
#endif

typedef struct gptoss_model {
    gptoss_config config;
    gptoss_layout layout;
    int synthetic;             /* 1: weights come from the recipe (seed) */
    uint64_t seed;
    char *path;                /* file models: the path given to open */
    const unsigned char *map;  /* file models: the whole file, read-only */
    size_t map_bytes;
    uint64_t trailing_bytes;   /* bytes after the last known tensor */
    float *owned;              /* synthetic models: materialised tensors */
    const float *tensor[GPTOSS_N_TENSORS]; /* NULL until gptoss_model_weights */
} gptoss_model;

/* Maps a course .bin read-only. GPTOSS_E_IO when the file cannot be
 * opened, read or mapped (or is not a regular file); GPTOSS_E_INVALID when
 * its header fails validation or the file is shorter than the header or
 * the tensors it describes; GPTOSS_E_HOST_MEMORY. */
gptoss_status gptoss_model_open(const char *path, gptoss_model **out, char *err);
/* A model of config c whose weights come from the recipe (seed):
 * GPTOSS_E_INVALID when c fails validation, GPTOSS_E_HOST_MEMORY. */
gptoss_status gptoss_model_synthetic(const gptoss_config *c, uint64_t seed, gptoss_model **out,
                                     char *err);

/* Makes m->tensor[] valid. For a synthetic model this allocates and fills
 * every tensor (refusing when host memory is short); a no-op afterwards and
 * for file models. */
gptoss_status gptoss_model_weights(gptoss_model *m, char *err);

/* Copies elements [first, first+count) of a tensor into out, without
 * materialising a synthetic model. The range must lie in the tensor. */
void gptoss_model_read(const gptoss_model *m, int tensor, uint64_t first, uint64_t count, float *out);

/* Writes a course .bin (header, 16 tensors, then any trailing bytes of a
 * file model) atomically: to path.tmp, then renamed. GPTOSS_E_IO when
 * path.tmp cannot be created or written or the rename fails (path.tmp is
 * removed then), GPTOSS_E_HOST_MEMORY. */
gptoss_status gptoss_model_save(const gptoss_model *m, const char *path, char *err);

void gptoss_model_free(gptoss_model *m);

/* Bytes of physical memory the kernel reports available (MemAvailable). */
uint64_t gptoss_host_memory_available(void);

#ifdef __cplusplus
}
#endif

#endif
