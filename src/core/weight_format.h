/* How a replica holds its weight matrices: one table of formats. The
 * engines, the memory plan, the binding (gptoss.weight_formats) and through
 * it the command line and the benchmarks read it; no other list of format
 * names exists. Ask a format's row, never compare enum values: a format
 * appended to the enum is only what its row says.
 *
 * Adding a format: its host codec (like mxfp4.c) and a row here, its device
 * codec (kernels/<format>.h) and a line in kernels/weight_formats.h. */
#ifndef GPTOSS_WEIGHT_FORMAT_H
#define GPTOSS_WEIGHT_FORMAT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    GPTOSS_WEIGHTS_UNSET = -1, /* not given: the engine picks */
    GPTOSS_WEIGHTS_FP32,
    GPTOSS_WEIGHTS_BF16,
    GPTOSS_WEIGHTS_MXFP4,
    GPTOSS_N_WEIGHT_FORMATS
} gptoss_weights;

/* A block format's host codec: a row of n inputs in blocks of `block`
 * inputs, each block_bytes of codes and one scale byte (codes
 * [blocks][block_bytes], scales [blocks], blocks = ceil(n / block)). */
typedef struct {
    int block, block_bytes;
    /* encodes a row exactly: -1 when every input is representable, else the
     * first that is not (what it is not: `inexact`) */
    int64_t (*encode_row)(const float *w, int64_t n, uint8_t *codes, uint8_t *scales);
    /* inputs [first, first + n) of an encoded row */
    void (*decode)(const uint8_t *codes, const uint8_t *scales, int64_t first, int64_t n, float *out);
    /* -1 when the kernels take every block of an encoded row, else the
     * first nonzero input of a block they do not, with why (128 bytes) set */
    int64_t (*kernels_take)(const uint8_t *codes, const uint8_t *scales, int64_t n, char *why);
    const char *inexact;
    /* the synthetic recipe's experts (e2m1 codes times a power of two per
     * block of 32 inputs, synth.h) are exact in it: nothing to scan */
    int synthetic_exact;
} gptoss_block_codec;

/* the largest block a codec has (a block's inputs fit a stack buffer) */
#define GPTOSS_MAX_CODEC_BLOCK 32

typedef struct {
    const char *name;       /* as the weights option and r.weights say it */
    const char *title;      /* as messages name it */
    double bits;            /* bits per weight of the matrices it holds in its own form, scales included */
    int exact_against_bf16; /* a replica computes the bf16 replica's bits */
    int bf16_arithmetic;    /* matrices hold bf16 values, GEMM inputs rounded to bf16: the bf16 golden */
    const gptoss_block_codec *experts; /* the experts' matrices in this block format (the rest
                                          as bf16), or NULL */
    int gpu_layout;         /* a block format's tiles on a GPU: a gptoss_weight_layout (device_contract.h) */
    const char *summary;    /* one line: what a replica holds */
} gptoss_weight_format;

/* weights' row, or NULL for GPTOSS_WEIGHTS_UNSET or a value out of range */
const gptoss_weight_format *gptoss_weight_format_of(int weights);
/* the format named name, or GPTOSS_WEIGHTS_UNSET */
int gptoss_weight_format_find(const char *name);
/* inputs sharing one scale: the codec's block, or 1 */
int gptoss_weight_format_block(const gptoss_weight_format *f);

#ifdef __cplusplus
}
#endif

#endif
