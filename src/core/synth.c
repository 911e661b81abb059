#include "synth_params.h"

#include <math.h>

/* Scale exponents keep each linear layer's output variance close to its
 * input's (uniform on [-1,1) has variance 1/3, so scale ~ sqrt(3/fan_in)),
 * with the router doubled so that top-4 choices are decisive. */
static int fan_in_exp(int64_t fan_in) { return (int)lround(-0.5 * log2((double)fan_in / 3.0)); }

/* e2m1 codes drawn uniformly have an RMS of about 2^1.55 */
static int mxfp4_exp(int64_t fan_in) { return (int)lround(-0.5 * log2((double)fan_in) - 1.55); }

gptoss_synth_param gptoss_synth_params(const gptoss_config *c, uint64_t seed, int tensor) {
    int64_t H = c->hidden_dim, I = c->intermediate_dim;
    int64_t HqD = (int64_t)c->n_attn_heads * c->head_dim;
    gptoss_synth_param p = {0};
    p.key = gptoss_synth_key(seed, (uint64_t)tensor);
    p.block_key = gptoss_synth_key(seed, (uint64_t)tensor + 64);
    p.kind = GPTOSS_SYNTH_UNIFORM;
    switch (tensor) {
    case GPTOSS_T_EMBEDDING: p.scale_exp = 0; break;
    case GPTOSS_T_OUT: p.scale_exp = fan_in_exp(H); break;
    case GPTOSS_T_RMS_ATTN:
    case GPTOSS_T_RMS_FFN:
    case GPTOSS_T_RMS_OUT: p.kind = GPTOSS_SYNTH_NORM; p.scale_exp = -3; break;
    case GPTOSS_T_W_QKV: p.scale_exp = fan_in_exp(H); break;
    case GPTOSS_T_B_QKV: p.scale_exp = -3; break;
    case GPTOSS_T_W_O: p.scale_exp = fan_in_exp(HqD); break;
    case GPTOSS_T_B_O: p.scale_exp = -4; break;
    case GPTOSS_T_SINKS: p.scale_exp = 1; break;
    case GPTOSS_T_W_ROUTER: p.scale_exp = fan_in_exp(H) + 1; break;
    case GPTOSS_T_B_ROUTER: p.scale_exp = -2; break;
    case GPTOSS_T_W_MLP1: p.kind = GPTOSS_SYNTH_MXFP4; p.scale_exp = mxfp4_exp(H); p.n_in = H; break;
    case GPTOSS_T_B_MLP1: p.scale_exp = -3; break;
    case GPTOSS_T_W_MLP2: p.kind = GPTOSS_SYNTH_MXFP4; p.scale_exp = mxfp4_exp(I); p.n_in = I; break;
    case GPTOSS_T_B_MLP2: p.scale_exp = -4; break;
    }
    return p;
}

void gptoss_synth_fill(const gptoss_synth_param *p, uint64_t first, uint64_t count, float *out) {
    for (uint64_t i = 0; i < count; i++)
        out[i] = gptoss_synth_value(p, first + i);
}
