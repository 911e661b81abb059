/* What the checkpoint reader and writer share (checkpoint_tensors.c): which
 * checkpoint tensors make up each course tensor in either layout, their
 * shapes, and the names of a checkpoint directory's files. */
#ifndef GPTOSS_CHECKPOINT_TENSORS_H
#define GPTOSS_CHECKPOINT_TENSORS_H

#include <stdint.h>

#include "model.h"

#define GPTOSS_CHECKPOINT_INDEX_FILE "model.safetensors.index.json"
#define GPTOSS_CHECKPOINT_SINGLE_FILE "model.safetensors"

/* Each course tensor's checkpoint tensors, its "parts" (%d: the layer of a
 * per-layer tensor): q, k and v one after another make w_qkv and b_qkv, and
 * every other course tensor is one part. An expert weight is MXFP4: its
 * name takes the layout's suffixes for the codes (blocks) and the scales. */
typedef struct {
    const char *blocks, *scales;
    const char *parts[GPTOSS_N_TENSORS][3];
} gptoss_checkpoint_names;

/* The names of layout f (hf or original). */
const gptoss_checkpoint_names *gptoss_checkpoint_names_of(gptoss_format f);

/* Whether course tensor t is stored as MXFP4 (an expert weight). */
static inline int gptoss_checkpoint_is_mxfp4(int t) { return t == GPTOSS_T_W_MLP1 || t == GPTOSS_T_W_MLP2; }

enum { GPTOSS_CHECKPOINT_MAX_DIMS = 4, GPTOSS_CHECKPOINT_NAME_LEN = 160 };

typedef struct {
    int ndim;
    int64_t dims[GPTOSS_CHECKPOINT_MAX_DIMS];
} gptoss_checkpoint_shape;

/* One part: a checkpoint tensor (an MXFP4 pair) and the course elements it holds. */
typedef struct {
    int tensor;
    int order; /* where a writer puts it: the embedding, layer by layer, the rest */
    int index; /* its place in course order */
    char name[GPTOSS_CHECKPOINT_NAME_LEN]; /* an MXFP4 pair's name before its suffixes */
    uint64_t first, count;
    /* the checkpoint tensor's shape: the course slice's with the part's rows */
    gptoss_checkpoint_shape dense;
    gptoss_checkpoint_shape blocks, scales; /* MXFP4 */
} gptoss_checkpoint_part;

/* How many parts the model's config makes in layout ln, and *tensors: the
 * checkpoint tensors they take (an MXFP4 part two), counted without
 * allocating, so that a reader can compare them with the tensors its files
 * hold before it allocates anything for the parts. */
uint64_t gptoss_checkpoint_count(const gptoss_model *m, const gptoss_checkpoint_names *ln, uint64_t *tensors);

/* Every part of a model in course order (each tensor's parts in its element
 * order), malloc'd; NULL when memory is short. */
gptoss_checkpoint_part *gptoss_checkpoint_parts(const gptoss_model *m, const gptoss_checkpoint_names *ln,
                                                int *n_out);

#endif
