/* A small persistent thread pool: run(fn, n_tasks) hands tasks 0..n-1 to the
 * workers and the calling thread, and returns when all are done. Engines
 * split work over output rows, so summation order never depends on it. */
#ifndef GPTOSS_POOL_H
#define GPTOSS_POOL_H

typedef struct gptoss_pool gptoss_pool;
typedef void (*gptoss_task_fn)(void *ctx, int task);

/* threads counts the caller; 1 means no worker threads. NULL on failure. */
gptoss_pool *gptoss_pool_new(int threads);
int gptoss_pool_threads(const gptoss_pool *p);
void gptoss_pool_run(gptoss_pool *p, int n_tasks, gptoss_task_fn fn, void *ctx);
void gptoss_pool_free(gptoss_pool *p);

#endif
