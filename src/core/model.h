/* A model: a validated config plus its 16 course tensors, each read from
 * where it lives: a course .bin mapped read-only, a checkpoint's safetensors
 * files mapped read-only (bf16, f32 or MXFP4 pieces), or the synthetic
 * recipe; decoded to fp32 range by range, or held for a CPU replica in the
 * form its weight format computes with (gptoss_held, model_held.c). */
#ifndef GPTOSS_MODEL_H
#define GPTOSS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "pool.h"
#include "safetensors.h"
#include "weight_format.h"

#ifdef __cplusplus
extern "C" { /* the HIP engine is C++ */
#endif

/* Where a model comes from (docs/checkpoints.md). */
typedef enum {
    GPTOSS_FORMAT_COURSE,    /* a course .bin */
    GPTOSS_FORMAT_HF,        /* a Hugging Face checkpoint directory */
    GPTOSS_FORMAT_ORIGINAL,  /* OpenAI's original/ checkpoint directory */
    GPTOSS_FORMAT_SYNTHETIC, /* the seeded recipe */
    GPTOSS_N_FORMATS
} gptoss_format;

/* A format's name ("course", "hf", "original", "synthetic"), and the format of a name (-1: none). */
const char *gptoss_format_name(gptoss_format f);
int gptoss_format_by_name(const char *name);

typedef enum { GPTOSS_PIECE_BF16, GPTOSS_PIECE_F32, GPTOSS_PIECE_MXFP4 } gptoss_piece_kind;

/* A run of a course tensor's elements that one checkpoint tensor holds (for
 * MXFP4, a blocks and scales pair): the pieces of a tensor follow one
 * another in the course's element order. */
typedef struct {
    gptoss_piece_kind kind;
    uint64_t first, count;       /* the course tensor's elements it holds */
    const unsigned char *data;   /* little-endian values, or MXFP4 codes [rows][blocks * 16] */
    const unsigned char *scales; /* MXFP4: [rows][blocks] */
    int64_t row;                 /* MXFP4: inputs per row */
} gptoss_piece;

typedef struct {
    int n;
    gptoss_piece *piece;
} gptoss_source;

/* What a CPU replica of one weight format reads (gptoss_model_hold): each
 * matrix as a source, where the model keeps it (a course file's or a
 * checkpoint's mapping) or made once in host memory in the format's narrow
 * form (a synthetic model's: fp32, bf16, or the experts as MXFP4 blocks),
 * which the golden widens to fp32 a few rows at a time; and each vector
 * (norm scales, biases, sinks) as fp32. */
typedef struct {
    gptoss_source matrix[GPTOSS_N_TENSORS];  /* matrices only */
    const float *vector[GPTOSS_N_TENSORS];   /* vectors only */
    gptoss_piece piece[GPTOSS_N_TENSORS];    /* a matrix's one piece, where it is not a checkpoint's */
    void *owned[GPTOSS_N_TENSORS];           /* what was made */
} gptoss_held;

/* an answer computed once and kept (the model is otherwise read-only) */
typedef struct {
    int checked;
    gptoss_status status;
    char message[GPTOSS_ERR_LEN];
} gptoss_model_answer;

typedef struct gptoss_model {
    gptoss_config config;
    gptoss_layout layout;
    gptoss_format format;
    uint64_t seed;             /* synthetic models: the recipe's */
    char *path;                /* the file or checkpoint directory given to open */
    const unsigned char *map;  /* course files: the whole file, read-only */
    size_t map_bytes;
    uint64_t trailing_bytes;   /* course files: bytes after the last known tensor */
    gptoss_st_file **shards;   /* checkpoints: their safetensors files */
    int n_shards;
    gptoss_source source[GPTOSS_N_TENSORS]; /* checkpoints: each tensor's pieces */
    const float *tensor[GPTOSS_N_TENSORS]; /* a course file's fp32 arrays, else NULL */
    gptoss_held *held[GPTOSS_N_WEIGHT_FORMATS]; /* made by gptoss_model_hold, or NULL */
    gptoss_model_answer experts_exact[GPTOSS_N_WEIGHT_FORMATS]; /* per weight format:
                                                                  gptoss_model_experts_in's */
    int refs;                  /* references besides its maker's (gptoss_model_retain) */
} gptoss_model;

/* Whether m's weights come from the synthetic recipe. */
static inline int gptoss_model_is_synthetic(const gptoss_model *m) { return m->format == GPTOSS_FORMAT_SYNTHETIC; }

/* Opens the course .bin path (docs/course.md#the-model-file), whose open
 * descriptor is fd and whose size is size bytes (gptoss_model_open's
 * contract, model_load.h), mapped read-only; fd may be closed afterwards. */
gptoss_status gptoss_model_open_course(const char *path, int fd, uint64_t size, gptoss_model **out,
                                       char *err);
/* The most layers a synthetic model has (2^24): a file's layers are bounded
 * by its size, these by this, so that work planned per layer (a replica's
 * plan) takes well under a second for any config. */
#define GPTOSS_SYNTHETIC_MAX_LAYERS (1 << 24)
/* A model of config c whose weights come from the recipe (seed):
 * GPTOSS_E_INVALID when c fails validation or has more layers than
 * GPTOSS_SYNTHETIC_MAX_LAYERS, GPTOSS_E_HOST_MEMORY. */
gptoss_status gptoss_model_synthetic(const gptoss_config *c, uint64_t seed, gptoss_model **out,
                                     char *err);
/* A model of config c with its layout and no tensors, for the loaders:
 * names gives the config's fields as the source calls them
 * (gptoss_config_validate_named). GPTOSS_E_INVALID, GPTOSS_E_HOST_MEMORY. */
gptoss_status gptoss_model_new(const gptoss_config *c, const char *const *names, gptoss_format f,
                               gptoss_model **out, char *err);

/* Copies elements [first, first+count) of a tensor into out as fp32,
 * without materialising the rest. The range must lie in the tensor. */
void gptoss_model_read(const gptoss_model *m, int tensor, uint64_t first, uint64_t count, float *out);
/* The same of a source's pieces: each widened exactly (bf16, MXFP4) or copied. */
void gptoss_source_read(const gptoss_source *src, uint64_t first, uint64_t count, float *out);
/* The same, each value rounded to bf16: what a bf16 replica multiplies by. */
void gptoss_source_read_bf16(const gptoss_source *src, uint64_t first, uint64_t count, float *out);

/* ---- weights held for a CPU replica (model_held.c) ---- */

/* Makes what a CPU replica of weight format `format` (resolved, its
 * experts checked) reads, once per model and format: a course file's and a
 * checkpoint's matrices stay in their mappings (a checkpoint's vectors are
 * widened), a synthetic model's are made in the format's form, split over
 * pool's threads and reported to progress (NULL: not reported) in weight
 * values made. GPTOSS_E_HOST_MEMORY with the sizes when host memory is
 * short, GPTOSS_E_STOPPED when progress stopped it (nothing kept). */
gptoss_status gptoss_model_hold(gptoss_model *m, int format, gptoss_pool *pool,
                                const gptoss_progress *progress, char *err);
/* The weights gptoss_model_hold made for format. */
const gptoss_held *gptoss_model_held(const gptoss_model *m, int format);
/* Bytes of host memory a CPU replica of format reads its weights from:
 * what gptoss_model_hold makes plus the mapped bytes it reads in place. */
uint64_t gptoss_model_held_bytes(const gptoss_model *m, int format);
/* Frees what gptoss_model_hold made (the model's last reference does). */
void gptoss_model_free_held(gptoss_model *m);

/* GPTOSS_OK when every expert weight (w_mlp1, w_mlp2) is exactly
 * representable in the block format `format` (a weight format with an
 * experts codec) with blocks the kernels take; else GPTOSS_E_UNSUPPORTED with
 * a message naming the first weight that is not (tensor, layer, expert, row,
 * input, value, why). A checkpoint holding the format's bytes checks them;
 * synthetic models answer from the recipe where the codec says so; any
 * other model is scanned once and the answer cached (the model is otherwise
 * read-only, so cache in the struct). */
gptoss_status gptoss_model_experts_in(gptoss_model *m, int format, char *err);
/* Rows [first, first + rows) of w_mlp1 or w_mlp2 counted over (layer, expert, row),
 * as the format's codes [rows][blocks * block_bytes] and scales [rows][blocks]: a
 * checkpoint's bytes copied where they are the format's, other models encoded
 * (call after gptoss_model_experts_in passed). */
void gptoss_model_read_blocks(const gptoss_model *m, int format, int tensor, uint64_t first, uint64_t rows,
                              uint8_t *codes, uint8_t *scales);

/* The piece holding element i of a checkpoint tensor: the last whose first <= i. */
const gptoss_piece *gptoss_model_piece_at(const gptoss_source *src, uint64_t i);

/* Writes a course .bin (header, 16 tensors, then any trailing bytes of a
 * course file) atomically: to path.tmp, then renamed. GPTOSS_E_IO when
 * path.tmp cannot be created or written or the rename fails (path.tmp is
 * removed then), GPTOSS_E_HOST_MEMORY. */
gptoss_status gptoss_model_save(const gptoss_model *m, const char *path, char *err);

/* A model is reference counted, so that whatever computes with it keeps
 * it: whoever made it (gptoss_model_open, _synthetic, _new) holds the first
 * reference, and each engine made of it another (gptoss_engine_new). A
 * count in the model rather than an owner reference above it, because the
 * holders' own lives are not ordered: the Lua binding's model object may be
 * finalised, even by hand, before or while a replica of it computes, and
 * only the C object's count says when the weights may go. Not atomic: the
 * holders live on one thread (the Lua state's). */
void gptoss_model_retain(gptoss_model *m);
/* Lets go of one reference; the last frees the model. NULL is a no-op. */
void gptoss_model_free(gptoss_model *m);

/* Bytes of physical memory the kernel reports available (MemAvailable). */
uint64_t gptoss_host_memory_available(void);

#ifdef __cplusplus
}
#endif

#endif
