/* A model's experts (w_mlp1, w_mlp2) in a block format (weight_format.h):
 * whether every expert weight is exactly representable with blocks the
 * kernels take, and the experts' rows as the format's codes and scales. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

static const int experts[] = {GPTOSS_T_W_MLP1, GPTOSS_T_W_MLP2};

/* Refuses an expert weight: row counts over (layer, expert, row) of tensor
 * t; numbers are 1-based, as model:tensor counts layers and experts. */
static gptoss_status not_exact(const gptoss_model *m, int t, uint64_t row, int64_t input, float value,
                               const char *why, char *err) {
    const gptoss_tensor_desc *d = &m->layout.t[t];
    uint64_t rows = (uint64_t)d->dims[2], n_experts = (uint64_t)d->dims[1];
    return gptoss_fail(err, GPTOSS_E_UNSUPPORTED,
                       "%s layer %llu expert %llu row %llu input %lld = %.9g %s", d->name,
                       (unsigned long long)(row / rows / n_experts + 1),
                       (unsigned long long)(row / rows % n_experts + 1),
                       (unsigned long long)(row % rows + 1), (long long)input + 1, value, why);
}

/* whether a checkpoint's pieces of tensor t hold this codec's bytes */
static int pieces_in(const gptoss_model *m, int t, const gptoss_block_codec *codec) {
    const gptoss_source *src = &m->source[t];
    return src->n && src->piece[0].kind == GPTOSS_PIECE_MXFP4 &&
           codec == gptoss_weight_format_of(GPTOSS_WEIGHTS_MXFP4)->experts;
}

/* One encoded row: GPTOSS_E_UNSUPPORTED at the first nonzero input of a block the kernels do not take. */
static gptoss_status check_taken(const gptoss_model *m, const gptoss_block_codec *codec, int t, uint64_t row,
                                 const uint8_t *codes, const uint8_t *scales, int64_t n, char *err) {
    char why[128];
    int64_t bad = codec->kernels_take(codes, scales, n, why);
    if (bad < 0)
        return GPTOSS_OK;
    float value;
    codec->decode(codes, scales, bad, 1, &value);
    return not_exact(m, t, row, bad, value, why, err);
}

/* Every row of tensor t: a checkpoint's own bytes where they are the
 * codec's, else each row read and encoded. */
static gptoss_status check_tensor(const gptoss_model *m, const gptoss_block_codec *codec, int t, char *err) {
    const gptoss_tensor_desc *d = &m->layout.t[t];
    const int64_t n = d->dims[3], blocks = (n + codec->block - 1) / codec->block;
    const size_t row_codes = (size_t)blocks * (size_t)codec->block_bytes;
    const uint64_t rows = d->count / (uint64_t)n;
    gptoss_status s = GPTOSS_OK;
    if (pieces_in(m, t, codec)) {
        const gptoss_source *src = &m->source[t];
        uint64_t row = 0;
        for (int i = 0; i < src->n && !s; i++) {
            const gptoss_piece *p = &src->piece[i];
            for (uint64_t r = 0; r < p->count / (uint64_t)n && !s; r++, row++)
                s = check_taken(m, codec, t, row, p->data + r * row_codes, p->scales + r * blocks, n, err);
        }
        return s;
    }
    float *w = malloc((size_t)n * sizeof *w);
    uint8_t *codes = malloc(row_codes), *scales = malloc((size_t)blocks);
    if (!w || !codes || !scales)
        s = gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    for (uint64_t row = 0; row < rows && !s; row++) {
        gptoss_model_read(m, t, row * (uint64_t)n, (uint64_t)n, w);
        int64_t bad = codec->encode_row(w, n, codes, scales);
        s = bad >= 0 ? not_exact(m, t, row, bad, w[bad], codec->inexact, err)
                     : check_taken(m, codec, t, row, codes, scales, n, err);
    }
    free(w);
    free(codes);
    free(scales);
    return s;
}

gptoss_status gptoss_model_experts_in(gptoss_model *m, int format, char *err) {
    const gptoss_weight_format *f = gptoss_weight_format_of(format);
    if (!f || !f->experts)
        return gptoss_fail(err, GPTOSS_E_INVALID, "weight format %d holds no experts in a block format", format);
    const gptoss_block_codec *codec = f->experts;
    if (gptoss_model_is_synthetic(m) && codec->synthetic_exact)
        return GPTOSS_OK;
    gptoss_model_answer *a = &m->experts_exact[format];
    if (!a->checked) {
        gptoss_status s = GPTOSS_OK;
        for (int i = 0; i < 2 && !s; i++)
            s = check_tensor(m, codec, experts[i], a->message);
        if (s == GPTOSS_E_HOST_MEMORY) /* not an answer: ask again later */
            return gptoss_fail(err, s, "%s", a->message);
        a->status = s;
        a->checked = 1;
    }
    if (a->status)
        return gptoss_fail(err, a->status, "%s", a->message);
    return GPTOSS_OK;
}

void gptoss_model_read_blocks(const gptoss_model *m, int format, int tensor, uint64_t first, uint64_t rows,
                              uint8_t *codes, uint8_t *scales) {
    const gptoss_block_codec *codec = gptoss_weight_format_of(format)->experts;
    const int64_t n = m->layout.t[tensor].dims[3], blocks = (n + codec->block - 1) / codec->block;
    const size_t row_codes = (size_t)blocks * (size_t)codec->block_bytes;
    const int from_pieces = pieces_in(m, tensor, codec);
    for (uint64_t row = first; row < first + rows; row++, codes += row_codes, scales += blocks) {
        if (from_pieces) { /* a checkpoint: its bytes */
            const gptoss_piece *p = gptoss_model_piece_at(&m->source[tensor], row * (uint64_t)n);
            uint64_t r = (row * (uint64_t)n - p->first) / (uint64_t)n;
            memcpy(codes, p->data + r * row_codes, row_codes);
            memcpy(scales, p->scales + r * blocks, (size_t)blocks);
            continue;
        }
        for (int64_t b = 0; b < blocks; b++) { /* a block at a time: no row buffer to allocate */
            float w[GPTOSS_MAX_CODEC_BLOCK];
            int64_t k = b * codec->block;
            int64_t count = n - k < codec->block ? n - k : codec->block;
            gptoss_model_read(m, tensor, row * (uint64_t)n + (uint64_t)k, (uint64_t)count, w);
            codec->encode_row(w, count, codes + b * codec->block_bytes, scales + b);
        }
    }
}
