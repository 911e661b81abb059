/* The weights a CPU replica reads (model.h, gptoss_held): where the model
 * keeps them when it maps them (a course file's fp32, a checkpoint's bf16,
 * f32 and MXFP4 runs), else made once per weight format in that format's
 * form, so that a synthetic 20b in MXFP4 takes its 4.25 bits a weight on the
 * host as on a GPU. The golden widens matrices a few rows at a time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bf16.h"
#include "checkpoint_tensors.h" /* gptoss_checkpoint_is_mxfp4: the experts */
#include "model.h"
#include "mxfp4.h"
#include "synth_params.h"

/* held_kind's answer for a tensor read where the model keeps it */
enum { IN_PLACE = -1 };

/* weight values made between two progress reports (16 MiB of fp32) */
enum { REPORT_VALUES = 1 << 22 };

/* How tensor t is held for a replica of format f: in place (a course file
 * maps everything in fp32, a checkpoint its matrices in their own form), or
 * made as a piece of this kind. Matrices of a bf16 format are bf16 (the
 * golden rounds every weight to bf16 in it), the experts MXFP4 where the
 * format says so (its experts were checked to be exact). */
static int held_kind(const gptoss_model *m, const gptoss_weight_format *f, int t) {
    int matrix = gptoss_tensor_is_matrix(t);
    if (m->format == GPTOSS_FORMAT_COURSE || (matrix && !gptoss_model_is_synthetic(m)))
        return IN_PLACE;
    if (!matrix || !f->bf16_arithmetic)
        return GPTOSS_PIECE_F32;
    int mxfp4 = f->experts && f->experts == gptoss_weight_format_of(GPTOSS_WEIGHTS_MXFP4)->experts;
    return mxfp4 && gptoss_checkpoint_is_mxfp4(t) ? GPTOSS_PIECE_MXFP4 : GPTOSS_PIECE_BF16;
}

/* bytes of a piece of count values, rows of `row` inputs for MXFP4 */
static uint64_t piece_bytes(int kind, uint64_t count, int64_t row) {
    if (kind == GPTOSS_PIECE_MXFP4)
        return count / (uint64_t)row * (uint64_t)gptoss_mxfp4_blocks(row) * (GPTOSS_MXFP4_BLOCK_BYTES + 1);
    return count * (kind == GPTOSS_PIECE_BF16 ? 2 : 4);
}

static int64_t row_of(const gptoss_model *m, int t) {
    const gptoss_tensor_desc *d = &m->layout.t[t];
    return d->dims[d->ndim - 1];
}

/* the bytes gptoss_model_hold makes for format (*made), and those it reads in place */
static uint64_t held_bytes(const gptoss_model *m, int format, uint64_t *made) {
    const gptoss_weight_format *f = gptoss_weight_format_of(format);
    uint64_t in_place = 0;
    *made = 0;
    for (int t = 0; t < GPTOSS_N_TENSORS; t++) {
        int kind = held_kind(m, f, t);
        const gptoss_source *src = &m->source[t];
        if (kind != IN_PLACE)
            *made += piece_bytes(kind, m->layout.t[t].count, row_of(m, t));
        else if (m->format == GPTOSS_FORMAT_COURSE)
            in_place += m->layout.t[t].count * 4;
        else
            for (int i = 0; i < src->n; i++)
                in_place += piece_bytes(src->piece[i].kind, src->piece[i].count, src->piece[i].row);
    }
    return *made + in_place;
}

uint64_t gptoss_model_held_bytes(const gptoss_model *m, int format) {
    uint64_t made;
    return held_bytes(m, format, &made);
}

/* A slot per format where the formats' forms differ (a synthetic model's);
 * a file's weights are read the same way by every format. */
static gptoss_held **slot_of(gptoss_model *m, int format) {
    return &m->held[gptoss_model_is_synthetic(m) ? format : 0];
}

const gptoss_held *gptoss_model_held(const gptoss_model *m, int format) {
    return *slot_of((gptoss_model *)m, format);
}

static void free_held(gptoss_held *h) {
    for (int t = 0; h && t < GPTOSS_N_TENSORS; t++)
        free(h->owned[t]);
    free(h);
}

void gptoss_model_free_held(gptoss_model *m) {
    for (int f = 0; f < GPTOSS_N_WEIGHT_FORMATS; f++)
        free_held(m->held[f]);
}

/* Asks for transparent huge pages over a large allocation: where the kernel gives them
 * on request only, faulting fresh 4 KiB pages in one by one is a large part of
 * making a big model's weights. */
static void want_huge_pages(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t start = ((uintptr_t)p + huge - 1) & ~(huge - 1), end = ((uintptr_t)p + bytes) & ~(huge - 1);
    if (end > start)
        (void)madvise((void *)start, end - start, MADV_HUGEPAGE); /* advice: failing changes nothing */
#else
    (void)p, (void)bytes;
#endif
}

/* Rows [row0, row0 + rows) of a synthetic expert tensor into p as the
 * recipe makes them (synth.h): its e2m1 codes, and each block's power of
 * two as the scale byte, which decode to exactly the recipe's values. */
static void recipe_mxfp4_rows(const gptoss_model *m, int t, gptoss_piece *p, uint64_t row0, uint64_t rows) {
    gptoss_synth_param sp = gptoss_synth_params(&m->config, m->seed, t);
    const int64_t n = p->row, blocks = gptoss_mxfp4_blocks(n);
    const size_t row_codes = (size_t)blocks * GPTOSS_MXFP4_BLOCK_BYTES;
    for (uint64_t r = row0; r < row0 + rows; r++) {
        uint8_t *codes = (uint8_t *)p->data + r * row_codes, *scales = (uint8_t *)p->scales + r * (uint64_t)blocks;
        memset(codes, 0, row_codes);
        for (int64_t b = 0; b < blocks; b++)
            scales[b] = (uint8_t)(gptoss_synth_mxfp4_exp(&sp, r * (uint64_t)blocks + (uint64_t)b) + 127);
        for (int64_t k = 0; k < n; k++)
            codes[k / GPTOSS_MXFP4_BLOCK * GPTOSS_MXFP4_BLOCK_BYTES + k % GPTOSS_MXFP4_BLOCK / 2] |=
                (uint8_t)(gptoss_synth_mxfp4_code(&sp, r * (uint64_t)n + (uint64_t)k) << (k % 2 * 4));
    }
}

/* Values [first, first + count) of tensor t into its made piece p (whole rows for MXFP4). */
static void make_range(const gptoss_model *m, int t, gptoss_piece *p, uint64_t first, uint64_t count) {
    if (p->kind == GPTOSS_PIECE_F32) {
        gptoss_model_read(m, t, first, count, (float *)p->data + first);
    } else if (p->kind == GPTOSS_PIECE_BF16) {
        float buf[256];
        uint16_t *out = (uint16_t *)p->data + first;
        for (uint64_t at = 0; at < count; at += 256) {
            uint64_t n = count - at < 256 ? count - at : 256;
            gptoss_model_read(m, t, first + at, n, buf);
            for (uint64_t i = 0; i < n; i++)
                out[at + i] = gptoss_bf16_bits(buf[i]);
        }
    } else { /* only a synthetic model's experts are made in MXFP4 */
        recipe_mxfp4_rows(m, t, p, first / (uint64_t)p->row, count / (uint64_t)p->row);
    }
}

/* A share of one report's worth of a tensor for each pool task, in units
 * (values; rows for MXFP4). */
typedef struct {
    const gptoss_model *m;
    int t;
    gptoss_piece *p;
    uint64_t first, units, per_task, unit;
} make_job;

static void make_task(void *ctx, int task) {
    const make_job *j = ctx;
    uint64_t a = (uint64_t)task * j->per_task, b = a + j->per_task < j->units ? a + j->per_task : j->units;
    if (a < b)
        make_range(j->m, j->t, j->p, (j->first + a) * j->unit, (b - a) * j->unit);
}

/* Every made tensor of h filled, REPORT_VALUES at a time split over the
 * pool; 1 when progress stopped it. */
static int make_all(const gptoss_model *m, gptoss_held *h, uint64_t total, gptoss_pool *pool,
                    const gptoss_progress *progress) {
    int report = progress && progress->fn && total, threads = gptoss_pool_threads(pool);
    uint64_t done = 0;
    int stopped = report && progress->fn(progress->arg, 0, total);
    for (int t = 0; t < GPTOSS_N_TENSORS && !stopped; t++) {
        if (!h->owned[t])
            continue;
        gptoss_piece *p = &h->piece[t];
        make_job j = {m, t, p, 0, 0, 0, p->kind == GPTOSS_PIECE_MXFP4 ? (uint64_t)p->row : 1};
        const uint64_t units = m->layout.t[t].count / j.unit, chunk = REPORT_VALUES / j.unit ? REPORT_VALUES / j.unit : 1;
        for (; j.first < units && !stopped; j.first += chunk) {
            j.units = units - j.first < chunk ? units - j.first : chunk;
            j.per_task = (j.units + (uint64_t)threads - 1) / (uint64_t)threads;
            gptoss_pool_run(pool, threads, make_task, &j);
            done += j.units * j.unit;
            stopped = report && progress->fn(progress->arg, done, total);
        }
    }
    return stopped;
}

/* Where each tensor of h is read from, with room for those to be made. */
static gptoss_status lay_out(const gptoss_model *m, const gptoss_weight_format *f, gptoss_held *h, char *err) {
    for (int t = 0; t < GPTOSS_N_TENSORS; t++) {
        const gptoss_tensor_desc *d = &m->layout.t[t];
        int kind = held_kind(m, f, t), matrix = gptoss_tensor_is_matrix(t);
        if (kind == IN_PLACE && m->format != GPTOSS_FORMAT_COURSE) { /* a checkpoint's matrix: its own pieces */
            h->matrix[t] = m->source[t];
            continue;
        }
        gptoss_piece *p = &h->piece[t]; /* one piece: a course file's fp32, or made */
        *p = (gptoss_piece){kind == IN_PLACE ? GPTOSS_PIECE_F32 : (gptoss_piece_kind)kind, 0, d->count, NULL, NULL,
                            row_of(m, t)};
        if (kind == IN_PLACE) {
            p->data = m->map + d->offset;
        } else {
            uint64_t bytes = piece_bytes(kind, d->count, p->row);
            if (!(h->owned[t] = malloc((size_t)bytes)))
                return gptoss_fail(err, GPTOSS_E_HOST_MEMORY,
                                   "cannot allocate %.2f GiB of host memory for the %s weights' %s", bytes / 1073741824.0,
                                   f->title, d->name);
            want_huge_pages(h->owned[t], (size_t)bytes);
            p->data = h->owned[t];
            if (kind == GPTOSS_PIECE_MXFP4)
                p->scales = p->data + d->count / (uint64_t)p->row * (uint64_t)gptoss_mxfp4_blocks(p->row) *
                                          GPTOSS_MXFP4_BLOCK_BYTES;
        }
        if (matrix)
            h->matrix[t] = (gptoss_source){1, p};
        else
            h->vector[t] = (const float *)p->data;
    }
    return GPTOSS_OK;
}

/* Refuses format's weights that do not fit, naming a format whose would, when one holds them in fewer bytes. */
static gptoss_status too_large(gptoss_model *m, int format, uint64_t bytes, uint64_t avail, char *err) {
    char hint[128] = "", why[GPTOSS_ERR_LEN];
    uint64_t fewest = bytes;
    for (int g = 0; g < GPTOSS_N_WEIGHT_FORMATS; g++) {
        const gptoss_weight_format *f = gptoss_weight_format_of(g);
        uint64_t made, b = held_bytes(m, g, &made);
        if (b < fewest && (!f->experts || !gptoss_model_experts_in(m, g, why))) {
            fewest = b;
            snprintf(hint, sizeof hint, "; weights = \"%s\" holds them in %.2f GiB", f->name, b / 1073741824.0);
        }
    }
    return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "the %s weights of a %s model need %.2f GiB of host memory, %.2f "
                                                  "GiB available%s",
                       gptoss_weight_format_of(format)->title, gptoss_format_name(m->format), bytes / 1073741824.0,
                       avail / 1073741824.0, hint);
}

gptoss_status gptoss_model_hold(gptoss_model *m, int format, gptoss_pool *pool, const gptoss_progress *progress,
                                char *err) {
    if (*slot_of(m, format))
        return GPTOSS_OK;
    const gptoss_weight_format *f = gptoss_weight_format_of(format);
    uint64_t made, bytes = held_bytes(m, format, &made), avail = gptoss_host_memory_available(), values = 0;
    if (made > avail || made > SIZE_MAX)
        return too_large(m, format, bytes, avail, err);
    gptoss_held *h = calloc(1, sizeof *h);
    if (!h)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    gptoss_status s = lay_out(m, f, h, err);
    for (int t = 0; t < GPTOSS_N_TENSORS; t++)
        values += h->owned[t] ? m->layout.t[t].count : 0;
    int stopped = !s && make_all(m, h, values, pool, progress);
    /* failed, stopped, or made meanwhile by a replica the callback made: keep theirs */
    if (s || stopped || *slot_of(m, format)) {
        free_held(h);
        return s ? s : stopped ? gptoss_fail(err, GPTOSS_E_STOPPED, "stopped while materialising the weights") : GPTOSS_OK;
    }
    *slot_of(m, format) = h;
    return GPTOSS_OK;
}
