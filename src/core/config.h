/* Model configuration: the course .bin header, its validation, and the tensor
 * layout it implies (docs/course.md#the-model-file). Plain C11, no Lua, no HIP. */
#ifndef GPTOSS_CONFIG_H
#define GPTOSS_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" { /* the HIP engine is C++ */
#endif

#define GPTOSS_HEADER_BYTES 60

/* Field order and types are the file's: 15 little-endian 4-byte fields. */
typedef struct {
    int32_t vocab_size;
    int32_t hidden_dim;
    int32_t n_experts;
    int32_t experts_per_token;
    int32_t intermediate_dim;
    int32_t n_layers;
    int32_t head_dim;
    int32_t n_attn_heads;
    int32_t n_kv_heads;
    int32_t seq_len;
    int32_t initial_context_length;
    float rope_theta;
    float rope_scaling_factor;
    int32_t sliding_window;
    float swiglu_limit;
} gptoss_config;

typedef enum { GPTOSS_FIELD_INT, GPTOSS_FIELD_FLOAT } gptoss_field_type;

typedef struct {
    const char *name; /* the course's C name */
    gptoss_field_type type;
    size_t offset;    /* byte offset in the header and in gptoss_config */
} gptoss_field;

enum { GPTOSS_N_FIELDS = 15 };
extern const gptoss_field gptoss_fields[GPTOSS_N_FIELDS];

/* The 16 tensors the course loader knows, in file order. */
typedef enum {
    GPTOSS_T_EMBEDDING,
    GPTOSS_T_OUT,
    GPTOSS_T_RMS_ATTN,
    GPTOSS_T_RMS_FFN,
    GPTOSS_T_RMS_OUT,
    GPTOSS_T_W_QKV,
    GPTOSS_T_B_QKV,
    GPTOSS_T_W_O,
    GPTOSS_T_B_O,
    GPTOSS_T_SINKS,
    GPTOSS_T_W_ROUTER,
    GPTOSS_T_B_ROUTER,
    GPTOSS_T_W_MLP1,
    GPTOSS_T_B_MLP1,
    GPTOSS_T_W_MLP2,
    GPTOSS_T_B_MLP2,
    GPTOSS_N_TENSORS
} gptoss_tensor_id;

/* Leading dimensions are "per layer" and "per expert" where present, so a
 * (layer, expert) slice is the trailing matrix or vector. */
typedef struct {
    const char *name;
    int ndim;
    int64_t dims[4];
    int per_layer;  /* dims[0] is n_layers */
    int per_expert; /* dims[1] is n_experts */
    uint64_t count; /* elements */
    uint64_t offset; /* byte offset in the file, header included */
} gptoss_tensor_desc;

typedef struct {
    gptoss_tensor_desc t[GPTOSS_N_TENSORS];
    uint64_t total_bytes; /* header + all 16 tensors */
} gptoss_layout;

/* Checks every field (and the YaRN bounds, gptoss_config_check_rope);
 * GPTOSS_E_INVALID with a message naming the field and the values. */
gptoss_status gptoss_config_validate(const gptoss_config *c, char *err);
/* The same, the fields called in messages by names[i] (gptoss_fields order)
 * instead of their course names: a checkpoint's config.json keys. NULL:
 * the course names. */
gptoss_status gptoss_config_validate_named(const gptoss_config *c, const char *const *names,
                                           char *err);

/* The NTK-by-parts bounds (low, high) run.cpp's YaRN RoPE derives from the
 * config; only meaningful when rope_scaling_factor > 1. */
void gptoss_config_rope_bounds(const gptoss_config *c, float *low, float *high);
/* Validates the bounds run.cpp asserts (0 < low < high < half - 1); the
 * message calls the fields by names (gptoss_config_validate_named). */
gptoss_status gptoss_config_check_rope(const gptoss_config *c, const char *const *names, char *err);
/* Field i's name in names, or its course name when names is NULL. */
const char *gptoss_field_name(const char *const *names, size_t offset);

/* Computes shapes, counts and offsets; GPTOSS_E_INVALID when a byte count
 * does not fit in 64 bits (or the file size in a signed one). Call after
 * validation. */
gptoss_status gptoss_layout_compute(const gptoss_config *c, gptoss_layout *out, char *err);

/* Named shapes: "7m", "20b", "120b", "20b-2l". Returns -1 if unknown. */
int gptoss_config_named(const char *name, gptoss_config *out);

/* Derived sizes used by engines. */
static inline int gptoss_qkv_dim(const gptoss_config *c) {
    return c->head_dim * (c->n_attn_heads + 2 * c->n_kv_heads);
}
static inline int gptoss_kv_dim(const gptoss_config *c) { return c->head_dim * c->n_kv_heads; }

/* Whether a layer's attention sees only the last sliding_window keys: the
 * even layers (0-based), when the model has a window. */
static inline int gptoss_layer_windowed(const gptoss_config *c, int layer) {
    return c->sliding_window > 0 && layer % 2 == 0;
}

/* Positions a layer's KV cache must hold per slot for a context of ctx
 * when one step adds at most chunk positions to a slot: ctx, or for a
 * windowed layer a ring of the window plus what one step adds beyond the
 * key it attends last (when that is shorter). */
static inline int gptoss_kv_positions(const gptoss_config *c, int layer, int ctx, int chunk) {
    int64_t ring = (int64_t)c->sliding_window + chunk - 1;
    return gptoss_layer_windowed(c, layer) && ring < ctx ? (int)ring : ctx;
}

/* Looks a tensor up by its course name; -1 if unknown. */
int gptoss_tensor_by_name(const char *name);

/* Whether a tensor is a weight matrix (embedding, unembedding, qkv, o,
 * router, mlp1, mlp2): what a bf16 engine stores in bf16, where norm
 * scales, biases and sinks stay fp32. */
int gptoss_tensor_is_matrix(int tensor);

#ifdef __cplusplus
}
#endif

#endif
