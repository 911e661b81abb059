/* config.json of a checkpoint, read into and written from a gptoss_config
 * (docs/checkpoints.md#configjson). */
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "json_kind.h"
#include "regular_file.h"

/* The key of each config field (gptoss_fields order), dotted into nested
 * objects, with an alternative spelling some configs use. seq_len's key is
 * optional: without it seq_len is initial_context_length x the RoPE factor. */
typedef const char *field_keys[GPTOSS_N_FIELDS][2];
static const field_keys hf_keys = {
    {"vocab_size"},          {"hidden_size"},
    {"num_local_experts"},   {"num_experts_per_tok", "experts_per_token"},
    {"intermediate_size"},   {"num_hidden_layers"},
    {"head_dim"},            {"num_attention_heads"},
    {"num_key_value_heads"}, {"max_position_embeddings"},
    {"rope_scaling.original_max_position_embeddings"},
    {"rope_theta"},          {"rope_scaling.factor"},
    {"sliding_window"},      {"swiglu_limit"},
};
static const field_keys original_keys = {
    {"vocab_size"},          {"hidden_size"},
    {"num_experts"},         {"experts_per_token"},
    {"intermediate_size"},   {"num_hidden_layers"},
    {"head_dim"},            {"num_attention_heads"},
    {"num_key_value_heads"}, {"max_position_embeddings"},
    {"initial_context_length"},
    {"rope_theta"},          {"rope_scaling_factor"},
    {"sliding_window"},      {"swiglu_limit"},
};
enum { SEQ_LEN_FIELD = 9 };
_Static_assert(offsetof(gptoss_config, seq_len) == SEQ_LEN_FIELD * 4, "seq_len is field 9");

/* Constants the forward pass hard-codes (docs/course.md#named-configurations-and-constants):
 * a config may leave them out (the family's defaults are these) but not change them. */
typedef struct {
    const char *key;
    double value;
} fixed_number;
static const fixed_number hf_fixed[] = {
    {"rope_scaling.beta_fast", 32}, {"rope_scaling.beta_slow", 1}, {"rms_norm_eps", 1e-5}, {NULL, 0}};
static const fixed_number original_fixed[] = {
    {"rope_ntk_beta", 32}, {"rope_ntk_alpha", 1}, {NULL, 0}};

static const field_keys *keys_of(gptoss_format f) {
    return f == GPTOSS_FORMAT_HF ? &hf_keys : &original_keys;
}
static const fixed_number *fixed_of(gptoss_format f) {
    return f == GPTOSS_FORMAT_HF ? hf_fixed : original_fixed;
}

/* root's value at a key with at most one dot (rope_scaling.factor), or NULL */
static json_t *lookup(json_t *root, const char *key) {
    const char *dot = strchr(key, '.');
    if (!dot)
        return json_object_get(root, key);
    char head[64];
    snprintf(head, sizeof head, "%.*s", (int)(dot - key), key);
    json_t *sub = json_object_get(root, head);
    return json_is_object(sub) ? json_object_get(sub, dot + 1) : NULL;
}

/* Reads field i from root; *found says whether any of its keys is there. */
static gptoss_status read_field(const char *path, json_t *root, const char *const *keys, int i,
                                gptoss_config *c, const char **name, int *found, char *err) {
    json_t *v = NULL;
    *name = keys[0];
    for (int k = 0; k < 2 && keys[k] && !v; k++)
        if ((v = lookup(root, keys[k])))
            *name = keys[k];
    *found = v != NULL;
    if (!v)
        return i == SEQ_LEN_FIELD ? GPTOSS_OK
                                  : gptoss_fail(err, GPTOSS_E_INVALID,
                                                "checkpoint config '%s': %s is missing", path, keys[0]);
    char *dst = (char *)c + gptoss_fields[i].offset;
    if (gptoss_fields[i].type == GPTOSS_FIELD_INT) {
        if (!json_is_integer(v))
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "checkpoint config '%s': %s must be an integer (got %s)", path, *name,
                               gptoss_json_kind(v));
        json_int_t x = json_integer_value(v);
        if (x < INT32_MIN || x > INT32_MAX)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "checkpoint config '%s': %s = %lld does not fit in 32 bits", path,
                               *name, (long long)x);
        int32_t x32 = (int32_t)x;
        memcpy(dst, &x32, sizeof x32);
    } else {
        if (!json_is_number(v))
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "checkpoint config '%s': %s must be a number (got %s)", path, *name,
                               gptoss_json_kind(v));
        float x = (float)json_number_value(v);
        memcpy(dst, &x, sizeof x);
    }
    return GPTOSS_OK;
}

static gptoss_status check_fixed(const char *path, json_t *root, const fixed_number *fixed,
                                 char *err) {
    for (const fixed_number *x = fixed; x->key; x++) {
        json_t *v = lookup(root, x->key);
        if (v && !json_is_number(v))
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "checkpoint config '%s': %s must be a number (got %s)", path, x->key,
                               gptoss_json_kind(v));
        if (v && json_number_value(v) != x->value)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "checkpoint config '%s': %s = %g is not implemented (the forward "
                               "pass uses %g)",
                               path, x->key, json_number_value(v), x->value);
    }
    return GPTOSS_OK;
}

/* Hugging Face's rope_scaling: YaRN (factor >= 1), unrounded bounds. */
static gptoss_status check_hf_rope(const char *path, json_t *root, char *err) {
    json_t *rs = json_object_get(root, "rope_scaling");
    if (!json_is_object(rs))
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "checkpoint config '%s': rope_scaling must be an object (got %s)", path,
                           gptoss_json_kind(rs));
    json_t *type = json_object_get(rs, "rope_type");
    char got[80];
    if (!json_is_string(type) || strcmp(json_string_value(type), "yarn") != 0)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "checkpoint config '%s': rope_scaling.rope_type must be \"yarn\", the "
                           "RoPE the forward pass implements (got %s)",
                           path, gptoss_json_describe(type, got, sizeof got));
    json_t *truncate = json_object_get(rs, "truncate");
    if (truncate && !json_is_false(truncate))
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "checkpoint config '%s': rope_scaling.truncate must be false: the "
                           "forward pass does not round YaRN's bounds",
                           path);
    json_t *factor = json_object_get(rs, "factor");
    if (json_is_number(factor) && json_number_value(factor) < 1)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "checkpoint config '%s': rope_scaling.factor = %g is not implemented "
                           "(YaRN below 1)",
                           path, json_number_value(factor));
    return GPTOSS_OK;
}

/* layer_types, when given, must be the windowing the forward pass applies. */
static gptoss_status check_layer_types(const char *path, json_t *root, const gptoss_config *c,
                                       char *err) {
    json_t *types = json_object_get(root, "layer_types");
    if (!types)
        return GPTOSS_OK;
    if (!json_is_array(types) || json_array_size(types) != (size_t)c->n_layers)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "checkpoint config '%s': layer_types must be an array of "
                           "num_hidden_layers = %d names",
                           path, c->n_layers);
    for (int l = 0; l < c->n_layers; l++) {
        json_t *v = json_array_get(types, (size_t)l);
        const char *want = gptoss_layer_windowed(c, l) ? "sliding_attention" : "full_attention";
        char got[80];
        if (!json_is_string(v) || strcmp(json_string_value(v), want) != 0)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "checkpoint config '%s': layer_types[%d] is %s; the forward pass "
                               "has %s there (sliding_attention on even layers when sliding_window "
                               "> 0, full_attention elsewhere)",
                               path, l, gptoss_json_describe(v, got, sizeof got), want);
    }
    return GPTOSS_OK;
}

/* seq_len when config.json does not give it: initial_context_length x the
 * RoPE factor, the context the model was trained for (20b: 131072). Invalid
 * inputs give 1, so that validation names the field at fault. */
static gptoss_status derive_seq_len(const char *path, gptoss_config *c, const char *const *names,
                                    char *err) {
    double n = (double)c->initial_context_length * (double)c->rope_scaling_factor;
    c->seq_len = 1;
    if (!(c->initial_context_length > 0 && c->rope_scaling_factor > 0 && isfinite(n)))
        return GPTOSS_OK;
    if (n > INT32_MAX)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "checkpoint config '%s': %s x %s = %.0f exceeds 2^31-1 (give "
                           "max_position_embeddings)",
                           path,
                           gptoss_field_name(names, offsetof(gptoss_config, initial_context_length)),
                           gptoss_field_name(names, offsetof(gptoss_config, rope_scaling_factor)), n);
    c->seq_len = n < 1 ? 1 : (int32_t)n;
    return GPTOSS_OK;
}

gptoss_status gptoss_checkpoint_config_read(const char *path, gptoss_format *f, gptoss_config *c,
                                            const char **names, char *err) {
    json_error_t jerr;
    json_t *root;
    gptoss_status s =
        gptoss_json_load_regular(path, "checkpoint config", JSON_REJECT_DUPLICATES, &root, &jerr, err);
    if (s == GPTOSS_E_INVALID)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "checkpoint config '%s' is not JSON: %s (line %d, column %d)", path,
                           jerr.text, jerr.line, jerr.column);
    if (s)
        return s;
    if (!json_is_object(root)) {
        s = gptoss_fail(err, GPTOSS_E_INVALID, "checkpoint config '%s' is %s, not an object", path,
                        gptoss_json_kind(root));
        goto done;
    }
    if (json_object_get(root, "num_local_experts"))
        *f = GPTOSS_FORMAT_HF;
    else if (json_object_get(root, "num_experts"))
        *f = GPTOSS_FORMAT_ORIGINAL;
    else {
        s = gptoss_fail(err, GPTOSS_E_INVALID,
                        "checkpoint config '%s' is neither a Hugging Face one (num_local_experts) "
                        "nor an OpenAI original one (num_experts)",
                        path);
        goto done;
    }
    if (*f == GPTOSS_FORMAT_HF && (s = check_hf_rope(path, root, err)))
        goto done;
    if ((s = check_fixed(path, root, fixed_of(*f), err)))
        goto done;
    memset(c, 0, sizeof *c);
    int seq_len_given = 0;
    for (int i = 0; i < GPTOSS_N_FIELDS && !s; i++) {
        int found;
        s = read_field(path, root, (*keys_of(*f))[i], i, c, &names[i], &found, err);
        if (i == SEQ_LEN_FIELD)
            seq_len_given = found;
    }
    if (!s && !seq_len_given)
        s = derive_seq_len(path, c, names, err);
    char why[GPTOSS_ERR_LEN];
    if (!s && (s = gptoss_config_validate_named(c, names, why)))
        gptoss_fail(err, s, "checkpoint config '%.200s': %.300s", path, why);
    if (!s && *f == GPTOSS_FORMAT_HF)
        s = check_layer_types(path, root, c, err);
done:
    json_decref(root);
    return s;
}

/* Sets root's value at a key with at most one dot, making the object it is in. */
static int set_at(json_t *root, const char *key, json_t *value) {
    const char *dot = strchr(key, '.');
    if (!dot)
        return json_object_set_new(root, key, value);
    char head[64];
    snprintf(head, sizeof head, "%.*s", (int)(dot - key), key);
    json_t *sub = json_object_get(root, head);
    if (!sub && json_object_set_new(root, head, sub = json_object()))
        sub = NULL;
    if (!sub) {
        json_decref(value);
        return -1;
    }
    return json_object_set_new(sub, dot + 1, value);
}

/* What a real Hugging Face config.json also states, as far as it follows from the model. */
static int set_hf_extras(json_t *root, const gptoss_config *c) {
    json_t *types = json_array();
    int bad = !types;
    for (int l = 0; l < c->n_layers && !bad; l++)
        bad = json_array_append_new(types, json_string(gptoss_layer_windowed(c, l) ? "sliding_attention"
                                                                                   : "full_attention"));
    if (bad) {
        json_decref(types);
        return -1;
    }
    bad = set_at(root, "layer_types", types);
    bad |= set_at(root, "rope_scaling.rope_type", json_string("yarn"));
    bad |= set_at(root, "rope_scaling.truncate", json_false());
    bad |= set_at(root, "initial_context_length", json_integer(c->initial_context_length));
    bad |= set_at(root, "attention_bias", json_true());
    bad |= set_at(root, "tie_word_embeddings", json_false());
    bad |= set_at(root, "torch_dtype", json_string("bfloat16"));
    bad |= set_at(root, "quantization_config",
                  json_pack("{s:s, s:[s, s, s, s]}", "quant_method", "mxfp4",
                            "modules_to_not_convert", "model.layers.*.self_attn",
                            "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"));
    return bad;
}

gptoss_status gptoss_checkpoint_config_text(const gptoss_config *c, gptoss_format f, char **text,
                                            char *err) {
    if (f == GPTOSS_FORMAT_HF && c->rope_scaling_factor < 1.0f)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "rope_scaling_factor = %g cannot be written as Hugging Face's YaRN "
                           "(factor >= 1)",
                           c->rope_scaling_factor);
    json_t *root = f == GPTOSS_FORMAT_HF
                       ? json_pack("{s:[s], s:s}", "architectures", "GptOssForCausalLM",
                                   "model_type", "gpt_oss")
                       : json_object();
    int bad = !root;
    for (int i = 0; i < GPTOSS_N_FIELDS && !bad; i++) {
        const char *key = (*keys_of(f))[i][0];
        const char *src = (const char *)c + gptoss_fields[i].offset;
        int32_t n;
        float x;
        memcpy(&n, src, 4);
        memcpy(&x, src, 4);
        bad = set_at(root, key, gptoss_fields[i].type == GPTOSS_FIELD_INT ? json_integer(n)
                                                                          : json_real(x));
    }
    for (const fixed_number *x = fixed_of(f); x->key && !bad; x++)
        bad = set_at(root, x->key, json_real(x->value));
    if (!bad && f == GPTOSS_FORMAT_HF)
        bad = set_hf_extras(root, c);
    /* 9 digits give every float back exactly */
    *text = bad ? NULL : json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
    json_decref(root);
    if (!*text)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    return GPTOSS_OK;
}
