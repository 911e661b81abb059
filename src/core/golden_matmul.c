/* The golden's batched matmul: Y[r][o] = sum_i W[o][i] * X[r][i]. Each
 * (r, o) is one double accumulator fed float products in ascending i, as
 * run.cpp's matmul. Four output rows run side by side for instruction
 * parallelism; tasks split the output rows, never a sum. The weights stay
 * in the form the model holds them (bf16, MXFP4, fp32): each task widens its
 * four rows into a tile of its own once and multiplies every batch row by
 * it, so the whole matrix is never widened and the values are the same. */
#include <stdlib.h>

#include "golden_replica.h"

typedef struct {
    gptoss_golden_matrix w;
    int n, d;
    const float *x;
    int rows;
    float *y;
    float *tiles;
    size_t tile_row;
    int bf16;     /* weights rounded to bf16 (bf16 mode) */
    int per_task; /* output rows per task, a multiple of 4 */
} mm_job;

/* Weight rows [o, o + k) as the products take them: in place when they are
 * fp32 values of one piece and the arithmetic is fp32, else widened into
 * tile, and in bf16 mode rounded to bf16. */
static const float *weight_rows(const mm_job *j, int o, int k, float *tile) {
    uint64_t first = j->w.first + (uint64_t)o * (uint64_t)j->n, count = (uint64_t)k * (uint64_t)j->n;
    const gptoss_piece *p = gptoss_model_piece_at(j->w.src, first);
    if (!j->bf16 && p->kind == GPTOSS_PIECE_F32 && first + count <= p->first + p->count)
        return (const float *)p->data + (first - p->first);
    (j->bf16 ? gptoss_source_read_bf16 : gptoss_source_read)(j->w.src, first, count, tile);
    return tile;
}

static void mm_task(void *ctx, int task) {
    const mm_job *j = ctx;
    int o0 = task * j->per_task, o1 = o0 + j->per_task;
    if (o1 > j->d)
        o1 = j->d;
    size_t n = (size_t)j->n;
    float *tile = j->tiles + (size_t)task * 4 * j->tile_row;
    for (int o = o0; o < o1; o += 4) {
        int k = o1 - o < 4 ? o1 - o : 4;
        const float *w = weight_rows(j, o, k, tile);
        const float *wr[4]; /* a tail block repeats row o in its unused lanes */
        for (int q = 0; q < 4; q++)
            wr[q] = w + (size_t)(q < k ? q : 0) * n;
        for (int r = 0; r < j->rows; r++) {
            const float *x = j->x + (size_t)r * n;
            double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
            for (size_t i = 0; i < n; i++) {
                float xv = x[i];
                a0 += wr[0][i] * xv;
                a1 += wr[1][i] * xv;
                a2 += wr[2][i] * xv;
                a3 += wr[3][i] * xv;
            }
            float *y = j->y + (size_t)r * j->d + o;
            const double acc[4] = {a0, a1, a2, a3};
            for (int q = 0; q < k; q++)
                y[q] = (float)acc[q];
        }
    }
}

void gptoss_golden_matmul(gptoss_golden *g, float *y, const float *x, int rows, gptoss_golden_matrix w, int n, int d) {
    int threads = gptoss_pool_threads(g->pool);
    int blocks = (d + 3) / 4;
    int tasks = threads * GPTOSS_GOLDEN_MM_TASKS_PER_THREAD < blocks ? threads * GPTOSS_GOLDEN_MM_TASKS_PER_THREAD : blocks;
    mm_job j = {w, n, d, x, rows, y, g->tiles, g->tile_row, gptoss_weights_bf16(&g->o), 0};
    j.per_task = ((blocks + tasks - 1) / tasks) * 4;
    tasks = (d + j.per_task - 1) / j.per_task;
    /* a single thread for tiny products: waking workers costs more */
    if ((double)rows * n * d < 65536.0) {
        j.per_task = ((d + 3) / 4) * 4;
        mm_task(&j, 0);
        return;
    }
    gptoss_pool_run(g->pool, tasks, mm_task, &j);
}
