/* The tensors of each checkpoint layout (docs/checkpoints.md), for the
 * reader (checkpoint_read.c) and the writer (checkpoint_write.c). */
#include "checkpoint_tensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "mxfp4.h"

static const gptoss_checkpoint_names hf_names = {"_blocks", "_scales", {
    [GPTOSS_T_EMBEDDING] = {"model.embed_tokens.weight"},
    [GPTOSS_T_OUT] = {"lm_head.weight"},
    [GPTOSS_T_RMS_ATTN] = {"model.layers.%d.input_layernorm.weight"},
    [GPTOSS_T_RMS_FFN] = {"model.layers.%d.post_attention_layernorm.weight"},
    [GPTOSS_T_RMS_OUT] = {"model.norm.weight"},
    [GPTOSS_T_W_QKV] = {"model.layers.%d.self_attn.q_proj.weight",
                        "model.layers.%d.self_attn.k_proj.weight",
                        "model.layers.%d.self_attn.v_proj.weight"},
    [GPTOSS_T_B_QKV] = {"model.layers.%d.self_attn.q_proj.bias",
                        "model.layers.%d.self_attn.k_proj.bias",
                        "model.layers.%d.self_attn.v_proj.bias"},
    [GPTOSS_T_W_O] = {"model.layers.%d.self_attn.o_proj.weight"},
    [GPTOSS_T_B_O] = {"model.layers.%d.self_attn.o_proj.bias"},
    [GPTOSS_T_SINKS] = {"model.layers.%d.self_attn.sinks"},
    [GPTOSS_T_W_ROUTER] = {"model.layers.%d.mlp.router.weight"},
    [GPTOSS_T_B_ROUTER] = {"model.layers.%d.mlp.router.bias"},
    [GPTOSS_T_W_MLP1] = {"model.layers.%d.mlp.experts.gate_up_proj"},
    [GPTOSS_T_B_MLP1] = {"model.layers.%d.mlp.experts.gate_up_proj_bias"},
    [GPTOSS_T_W_MLP2] = {"model.layers.%d.mlp.experts.down_proj"},
    [GPTOSS_T_B_MLP2] = {"model.layers.%d.mlp.experts.down_proj_bias"},
}};

static const gptoss_checkpoint_names original_names = {".blocks", ".scales", {
    [GPTOSS_T_EMBEDDING] = {"embedding.weight"},
    [GPTOSS_T_OUT] = {"unembedding.weight"},
    [GPTOSS_T_RMS_ATTN] = {"block.%d.attn.norm.scale"},
    [GPTOSS_T_RMS_FFN] = {"block.%d.mlp.norm.scale"},
    [GPTOSS_T_RMS_OUT] = {"norm.scale"},
    [GPTOSS_T_W_QKV] = {"block.%d.attn.qkv.weight"},
    [GPTOSS_T_B_QKV] = {"block.%d.attn.qkv.bias"},
    [GPTOSS_T_W_O] = {"block.%d.attn.out.weight"},
    [GPTOSS_T_B_O] = {"block.%d.attn.out.bias"},
    [GPTOSS_T_SINKS] = {"block.%d.attn.sinks"},
    [GPTOSS_T_W_ROUTER] = {"block.%d.mlp.gate.weight"},
    [GPTOSS_T_B_ROUTER] = {"block.%d.mlp.gate.bias"},
    [GPTOSS_T_W_MLP1] = {"block.%d.mlp.mlp1_weight"},
    [GPTOSS_T_B_MLP1] = {"block.%d.mlp.mlp1_bias"},
    [GPTOSS_T_W_MLP2] = {"block.%d.mlp.mlp2_weight"},
    [GPTOSS_T_B_MLP2] = {"block.%d.mlp.mlp2_bias"},
}};

const gptoss_checkpoint_names *gptoss_checkpoint_names_of(gptoss_format f) {
    return f == GPTOSS_FORMAT_HF ? &hf_names : &original_names;
}

uint64_t gptoss_checkpoint_count(const gptoss_model *m, const gptoss_checkpoint_names *ln, uint64_t *tensors) {
    int overflow = 0; /* unread: a count past 2^64 saturates, more than any files hold */
    uint64_t parts = 0;
    *tensors = 0;
    for (int t = 0; t < GPTOSS_N_TENSORS; t++)
        for (int p = 0; p < 3 && ln->parts[t][p]; p++) {
            uint64_t n = m->layout.t[t].per_layer ? (uint64_t)m->config.n_layers : 1;
            parts = gptoss_checked_add(parts, n, &overflow);
            *tensors = gptoss_checked_add(*tensors, gptoss_checked_mul(n, gptoss_checkpoint_is_mxfp4(t) ? 2 : 1,
                                                                       &overflow), &overflow);
        }
    return parts;
}

gptoss_checkpoint_part *gptoss_checkpoint_parts(const gptoss_model *m, const gptoss_checkpoint_names *ln,
                                                int *n_out) {
    const gptoss_config *c = &m->config;
    uint64_t tensors, n = gptoss_checkpoint_count(m, ln, &tensors);
    /* n is an int to the callers; the reader has compared it with the tensors its files hold */
    gptoss_checkpoint_part *parts = n <= INT32_MAX / 2 ? calloc((size_t)n, sizeof *parts) : NULL;
    if (!parts)
        return NULL;
    gptoss_checkpoint_part *q = parts;
    for (int t = 0; t < GPTOSS_N_TENSORS; t++) {
        const gptoss_tensor_desc *d = &m->layout.t[t];
        int n_parts = ln->parts[t][1] ? 3 : 1;
        uint64_t first = 0;
        for (int l = 0; l < (d->per_layer ? c->n_layers : 1); l++) {
            for (int p = 0; p < n_parts; p++, q++) {
                q->tensor = t;
                q->index = (int)(q - parts);
                q->order = t == GPTOSS_T_EMBEDDING ? -1 : d->per_layer ? l : c->n_layers;
                snprintf(q->name, sizeof q->name, ln->parts[t][p], l);
                q->dense.ndim = d->ndim - d->per_layer;
                memcpy(q->dense.dims, d->dims + d->per_layer, sizeof(int64_t) * (size_t)q->dense.ndim);
                if (n_parts == 3) /* the query heads, then the key heads, then the value heads */
                    q->dense.dims[0] = (int64_t)c->head_dim * (p == 0 ? c->n_attn_heads : c->n_kv_heads);
                q->count = 1;
                for (int i = 0; i < q->dense.ndim; i++)
                    q->count *= (uint64_t)q->dense.dims[i];
                q->first = first;
                first += q->count;
                /* MXFP4: [E, rows, in] -> [E, rows, blocks, 16] and [E, rows, blocks] */
                if (gptoss_checkpoint_is_mxfp4(t)) {
                    q->scales = q->dense;
                    q->scales.dims[2] = gptoss_mxfp4_blocks(q->dense.dims[2]);
                    q->blocks = q->scales;
                    q->blocks.dims[q->blocks.ndim++] = GPTOSS_MXFP4_BLOCK_BYTES;
                }
            }
        }
    }
    *n_out = (int)n;
    return parts;
}
