#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "checked.h"

_Static_assert(sizeof(gptoss_config) == GPTOSS_HEADER_BYTES, "the header is 60 bytes");

#define FIELD(n, t) {#n, t, offsetof(gptoss_config, n)}
const gptoss_field gptoss_fields[GPTOSS_N_FIELDS] = {
    FIELD(vocab_size, GPTOSS_FIELD_INT),
    FIELD(hidden_dim, GPTOSS_FIELD_INT),
    FIELD(n_experts, GPTOSS_FIELD_INT),
    FIELD(experts_per_token, GPTOSS_FIELD_INT),
    FIELD(intermediate_dim, GPTOSS_FIELD_INT),
    FIELD(n_layers, GPTOSS_FIELD_INT),
    FIELD(head_dim, GPTOSS_FIELD_INT),
    FIELD(n_attn_heads, GPTOSS_FIELD_INT),
    FIELD(n_kv_heads, GPTOSS_FIELD_INT),
    FIELD(seq_len, GPTOSS_FIELD_INT),
    FIELD(initial_context_length, GPTOSS_FIELD_INT),
    FIELD(rope_theta, GPTOSS_FIELD_FLOAT),
    FIELD(rope_scaling_factor, GPTOSS_FIELD_FLOAT),
    FIELD(sliding_window, GPTOSS_FIELD_INT),
    FIELD(swiglu_limit, GPTOSS_FIELD_FLOAT),
};
#undef FIELD

static const char *const tensor_names[GPTOSS_N_TENSORS] = {
    "token_embedding_table", "out", "rms_attn_w", "rms_ffn_w", "rms_out_w", "w_qkv",
    "b_qkv", "w_o", "b_o", "attn_sinks", "w_router", "b_router", "w_mlp1",
    "b_mlp1", "w_mlp2", "b_mlp2",
};

int gptoss_tensor_by_name(const char *name) {
    for (int i = 0; i < GPTOSS_N_TENSORS; i++)
        if (strcmp(tensor_names[i], name) == 0)
            return i;
    return -1;
}

int gptoss_tensor_is_matrix(int tensor) {
    switch (tensor) {
    case GPTOSS_T_EMBEDDING: case GPTOSS_T_OUT: case GPTOSS_T_W_QKV: case GPTOSS_T_W_O:
    case GPTOSS_T_W_ROUTER: case GPTOSS_T_W_MLP1: case GPTOSS_T_W_MLP2:
        return 1;
    default:
        return 0;
    }
}

const char *gptoss_field_name(const char *const *names, size_t offset) {
    for (int f = 0; f < GPTOSS_N_FIELDS; f++)
        if (gptoss_fields[f].offset == offset)
            return names ? names[f] : gptoss_fields[f].name;
    return "?";
}

gptoss_status gptoss_config_validate(const gptoss_config *c, char *err) {
    return gptoss_config_validate_named(c, NULL, err);
}

gptoss_status gptoss_config_validate_named(const gptoss_config *c, const char *const *names,
                                           char *err) {
#define NAME(field) gptoss_field_name(names, offsetof(gptoss_config, field))
    /* sizes that must be >= 1 */
    static const size_t positive[] = {
        offsetof(gptoss_config, vocab_size), offsetof(gptoss_config, hidden_dim),
        offsetof(gptoss_config, n_experts), offsetof(gptoss_config, experts_per_token),
        offsetof(gptoss_config, intermediate_dim), offsetof(gptoss_config, n_layers),
        offsetof(gptoss_config, head_dim), offsetof(gptoss_config, n_attn_heads),
        offsetof(gptoss_config, n_kv_heads), offsetof(gptoss_config, seq_len),
        offsetof(gptoss_config, initial_context_length),
    };
    for (size_t i = 0; i < sizeof positive / sizeof positive[0]; i++) {
        int32_t v;
        memcpy(&v, (const char *)c + positive[i], sizeof v);
        if (v <= 0)
            return gptoss_fail(err, GPTOSS_E_INVALID, "config: %s = %d must be positive",
                               gptoss_field_name(names, positive[i]), v);
    }
    if (c->n_attn_heads % c->n_kv_heads != 0)
        return gptoss_fail(err, GPTOSS_E_INVALID, "config: %s = %d is not a multiple of %s = %d",
                           NAME(n_attn_heads), c->n_attn_heads, NAME(n_kv_heads), c->n_kv_heads);
    if (c->head_dim % 2 != 0)
        return gptoss_fail(err, GPTOSS_E_INVALID, "config: %s = %d must be even (half-split RoPE)",
                           NAME(head_dim), c->head_dim);
    if (c->experts_per_token > c->n_experts)
        return gptoss_fail(err, GPTOSS_E_INVALID, "config: %s = %d exceeds %s = %d",
                           NAME(experts_per_token), c->experts_per_token, NAME(n_experts),
                           c->n_experts);
    if (c->sliding_window < 0)
        return gptoss_fail(err, GPTOSS_E_INVALID, "config: %s = %d must be >= 0 (0: no window)",
                           NAME(sliding_window), c->sliding_window);
    if (!(isfinite(c->rope_theta) && c->rope_theta > 1.0f))
        return gptoss_fail(err, GPTOSS_E_INVALID, "config: %s = %g must be a finite number > 1",
                           NAME(rope_theta), c->rope_theta);
    if (!(isfinite(c->rope_scaling_factor) && c->rope_scaling_factor > 0.0f))
        return gptoss_fail(err, GPTOSS_E_INVALID, "config: %s = %g must be finite and > 0",
                           NAME(rope_scaling_factor), c->rope_scaling_factor);
    if (!(isfinite(c->swiglu_limit) && c->swiglu_limit > 0.0f))
        return gptoss_fail(err, GPTOSS_E_INVALID, "config: %s = %g must be finite and > 0",
                           NAME(swiglu_limit), c->swiglu_limit);
    /* qkv rows are computed in int by every engine; the sizes are positive here, and the
     * product can pass 2^63 (so not in int64) */
    int overflow = 0;
    uint64_t qkv = gptoss_checked_mul((uint64_t)c->head_dim,
                                      (uint64_t)c->n_attn_heads + 2 * (uint64_t)c->n_kv_heads, &overflow);
    if (overflow || qkv > INT32_MAX || 2 * (uint64_t)c->intermediate_dim > INT32_MAX)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "config: %s*(%s+2*%s) = %d*(%d+2*%d) or 2*%s = 2*%d exceeds 2^31-1", NAME(head_dim),
                           NAME(n_attn_heads), NAME(n_kv_heads), c->head_dim, c->n_attn_heads, c->n_kv_heads,
                           NAME(intermediate_dim), c->intermediate_dim);
    return gptoss_config_check_rope(c, names, err);
#undef NAME
}

/* ntk_beta and ntk_alpha are hard-coded in run.cpp's forward, not in the
 * header. The float/double mix below is deliberate: (beta * 2.0f) is float,
 * times M_PI promotes to double, and logf takes the quotient back to float. */
static const float NTK_BETA = 32.0f;
static const float NTK_ALPHA = 1.0f;
static const double PI = 3.14159265358979323846; /* M_PI, which strict C11 lacks */

void gptoss_config_rope_bounds(const gptoss_config *c, float *low, float *high) {
    int half = c->head_dim / 2;
    float ctx = (float)c->initial_context_length;
    float base = c->rope_theta;
    *low = half * logf((float)(ctx / (NTK_BETA * 2.0f * PI))) / logf(base);
    *high = half * logf((float)(ctx / (NTK_ALPHA * 2.0f * PI))) / logf(base);
}

#define NAME(field) gptoss_field_name(names, offsetof(gptoss_config, field))
gptoss_status gptoss_config_check_rope(const gptoss_config *c, const char *const *names, char *err) {
    if (!(c->rope_scaling_factor > 1.0f))
        return GPTOSS_OK;
    float low, high;
    gptoss_config_rope_bounds(c, &low, &high);
    int half = c->head_dim / 2;
    if (!(0 < low && low < high && high < half - 1))
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "rope: YaRN bounds low=%g high=%g must satisfy 0 < low < high < "
                           "%s/2-1 = %d (%s=%d, %s=%d, %s=%g)",
                           low, high, NAME(head_dim), half - 1, NAME(head_dim), c->head_dim,
                           NAME(initial_context_length), c->initial_context_length, NAME(rope_theta),
                           c->rope_theta);
    return GPTOSS_OK;
}
#undef NAME

/* dims multiplied with overflow detection; then *4 bytes */
static gptoss_status tensor_count(gptoss_tensor_desc *d, char *err) {
    int overflow = 0;
    uint64_t n = 1;
    for (int i = 0; i < d->ndim; i++)
        n = gptoss_checked_mul(n, (uint64_t)d->dims[i], &overflow);
    gptoss_checked_mul(n, 4, &overflow);
    if (overflow)
        return gptoss_fail(err, GPTOSS_E_INVALID, "config: the byte size of tensor %s overflows 64 bits",
                           d->name);
    d->count = n;
    return GPTOSS_OK;
}

gptoss_status gptoss_layout_compute(const gptoss_config *c, gptoss_layout *out, char *err) {
    int64_t V = c->vocab_size, H = c->hidden_dim, L = c->n_layers, E = c->n_experts;
    int64_t I = c->intermediate_dim, Q = gptoss_qkv_dim(c);
    int64_t HqD = (int64_t)c->n_attn_heads * c->head_dim;
    /* name, ndim, dims, per_layer, per_expert */
    const struct { int nd; int64_t d[4]; int pl, pe; } shapes[GPTOSS_N_TENSORS] = {
        [GPTOSS_T_EMBEDDING] = {2, {V, H}, 0, 0},
        [GPTOSS_T_OUT] = {2, {V, H}, 0, 0},
        [GPTOSS_T_RMS_ATTN] = {2, {L, H}, 1, 0},
        [GPTOSS_T_RMS_FFN] = {2, {L, H}, 1, 0},
        [GPTOSS_T_RMS_OUT] = {1, {H}, 0, 0},
        [GPTOSS_T_W_QKV] = {3, {L, Q, H}, 1, 0},
        [GPTOSS_T_B_QKV] = {2, {L, Q}, 1, 0},
        [GPTOSS_T_W_O] = {3, {L, H, HqD}, 1, 0},
        [GPTOSS_T_B_O] = {2, {L, H}, 1, 0},
        [GPTOSS_T_SINKS] = {2, {L, c->n_attn_heads}, 1, 0},
        [GPTOSS_T_W_ROUTER] = {3, {L, E, H}, 1, 0},
        [GPTOSS_T_B_ROUTER] = {2, {L, E}, 1, 0},
        [GPTOSS_T_W_MLP1] = {4, {L, E, 2 * I, H}, 1, 1},
        [GPTOSS_T_B_MLP1] = {3, {L, E, 2 * I}, 1, 1},
        [GPTOSS_T_W_MLP2] = {4, {L, E, H, I}, 1, 1},
        [GPTOSS_T_B_MLP2] = {3, {L, E, H}, 1, 1},
    };
    uint64_t offset = GPTOSS_HEADER_BYTES;
    for (int i = 0; i < GPTOSS_N_TENSORS; i++) {
        gptoss_tensor_desc *d = &out->t[i];
        d->name = tensor_names[i];
        d->ndim = shapes[i].nd;
        memcpy(d->dims, shapes[i].d, sizeof d->dims);
        d->per_layer = shapes[i].pl;
        d->per_expert = shapes[i].pe;
        gptoss_status s = tensor_count(d, err);
        if (s)
            return s;
        d->offset = offset;
        int overflow = 0;
        offset = gptoss_checked_add(offset, d->count * 4, &overflow);
        if (overflow)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "config: the file size overflows 64 bits at tensor %s", d->name);
        if (offset > (uint64_t)INT64_MAX) /* no file (off_t) can be that large */
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "config: the file size overflows 64 bits at tensor %s (file offsets "
                               "are signed: 2^63-1 bytes at most)",
                               d->name);
    }
    out->total_bytes = offset;
    return GPTOSS_OK;
}

int gptoss_config_named(const char *name, gptoss_config *out) {
    /* docs/course.md#named-configurations-and-constants; "20b-2l" keeps the 20b widths with two
     * layers */
    static const gptoss_config m7 = {201088, 32, 32, 4, 64, 2, 32, 2, 1, 2048, 4096,
                                     150000.0f, 32.0f, 128, 7.0f};
    static const gptoss_config b20 = {201088, 2880, 32, 4, 2880, 24, 64, 64, 8, 2048, 4096,
                                      150000.0f, 32.0f, 128, 7.0f};
    if (strcmp(name, "7m") == 0) {
        *out = m7;
    } else if (strcmp(name, "20b") == 0) {
        *out = b20;
    } else if (strcmp(name, "20b-2l") == 0) {
        *out = b20;
        out->n_layers = 2;
    } else if (strcmp(name, "120b") == 0) {
        *out = b20;
        out->n_experts = 128;
        out->n_layers = 36;
    } else {
        return -1;
    }
    return 0;
}
