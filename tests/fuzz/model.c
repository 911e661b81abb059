/* libFuzzer target: a course model .bin (src/core/model.c: header, config
 * validation, layout, mapping), then what a loaded model feeds: the MXFP4
 * check of its experts, and a CPU golden replica stepping a prefill (the
 * logits of two chosen rows kept) and a fed decode, one slot greedy and one
 * sampled with a logit bias and logprobs, then a fork of the first slot
 * into the second and a step there; in fp32 and in bf16 (or MXFP4 when the
 * experts allow it).
 *
 * Cost cap: a model is only stepped when its fp32 weights take at most
 * STEP_WEIGHT_BYTES (a step's work is about rows x weights; the KV cache
 * and the scratch of ctx = 8 follow the same dimensions), so that one input
 * costs milliseconds. The seeds are a few kilobytes. */
#include <math.h>

#include "engine.h"
#include "fuzz.h"
#include "golden.h"
#include "model_load.h"

enum { STEP_WEIGHT_BYTES = 1 << 20, CTX = 8 };

/* A valid batch must run; its tokens must be ids, unless no row could be
 * drawn (a NaN in the weights makes every logit NaN, the bias may ban every
 * token a row could take). Then res is released. */
static void step(gptoss_engine *e, const gptoss_batch *b, gptoss_result *fed_by, const int *keep, int n_keep,
                 gptoss_result *res) {
    char err[GPTOSS_ERR_LEN];
    gptoss_step_request q = {b, fed_by, keep != NULL, keep, n_keep};
    gptoss_status s = gptoss_engine_step(e, &q, res, err);
    if (s == GPTOSS_E_DRAW) /* a fed token whose row drew none */
        return;
    if (s)
        abort();
    s = gptoss_engine_tokens(e, res, err);
    if (s && s != GPTOSS_E_DRAW)
        abort();
    for (int r = 0; !s && r < res->rows; r++)
        if (res->tokens[r] < 0 || res->tokens[r] >= res->vocab)
            abort();
}

static void run_replica(gptoss_model *m, int weights) {
    gptoss_engine_opts o = {.device = -1, .slots = 2, .ctx = CTX, .weights = weights, .threads = 1};
    gptoss_engine *e;
    char err[GPTOSS_ERR_LEN];
    if (gptoss_engine_new(&gptoss_golden_engine, m, &o, NULL, &e, err))
        abort(); /* a loaded model this small always makes a replica */
    int V = m->config.vocab_size;
    const gptoss_logit_bias bias[] = {{0, 1.5f}, {V - 1, -INFINITY}};
    gptoss_slot_sampling sampled = {{GPTOSS_SAMPLE_DEFAULT, 0.8, 0.9, 0.05, 3, 7}, bias, V > 1 ? 2 : 1, 3};
    if (gptoss_engine_sampling(e, 1, &sampled, err))
        abort();
    /* slot 0 prefills three tokens, slot 1 one; then each is fed what its last row drew */
    int slots[] = {0, 0, 0, 1}, positions[] = {0, 1, 2, 0}, tokens[] = {0, 1 % V, 2 % V, V - 1}, keep[] = {3, 0};
    gptoss_batch prefill = {4, slots, positions, tokens, 0};
    gptoss_result first, second, third;
    step(e, &prefill, NULL, keep, 2, &first);
    int fed_slots[] = {0, 1}, fed_positions[] = {3, 1}, fed_tokens[] = {gptoss_fed_token(2), gptoss_fed_token(3)};
    gptoss_batch decode = {2, fed_slots, fed_positions, fed_tokens, 0};
    step(e, &decode, &first, NULL, 0, &second);
    if (gptoss_engine_fork(e, 0, 1, 2, err))
        abort();
    int forked_slot = 1, forked_position = 2, forked_token = V / 2;
    gptoss_batch forked = {1, &forked_slot, &forked_position, &forked_token, 0};
    step(e, &forked, NULL, NULL, 0, &third);
    gptoss_result_release(e, &third);
    gptoss_result_release(e, &second);
    gptoss_result_release(e, &first);
    gptoss_engine_free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gptoss_model *m;
    char err[GPTOSS_ERR_LEN];
    if (gptoss_model_open(fuzz_file(data, size, ".bin"), &m, err))
        return 0;
    if (m->layout.total_bytes - GPTOSS_HEADER_BYTES <= STEP_WEIGHT_BYTES) {
        int mxfp4 = gptoss_model_experts_in(m, GPTOSS_WEIGHTS_MXFP4, err) == GPTOSS_OK;
        run_replica(m, GPTOSS_WEIGHTS_FP32);
        run_replica(m, mxfp4 ? GPTOSS_WEIGHTS_MXFP4 : GPTOSS_WEIGHTS_BF16);
    }
    gptoss_model_free(m);
    return 0;
}
