#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct gptoss_pool {
    int threads;
    pthread_t *workers;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    unsigned long generation; /* bumped for each run */
    int stop;
    gptoss_task_fn fn;
    void *ctx;
    int n_tasks;
    atomic_int next;
    int busy; /* workers still inside the current run */
};

static void drain(gptoss_pool *p) {
    for (;;) {
        int t = atomic_fetch_add(&p->next, 1);
        if (t >= p->n_tasks)
            return;
        p->fn(p->ctx, t);
    }
}

static void *worker(void *arg) {
    gptoss_pool *p = arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && p->generation == seen)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->stop)
            break;
        seen = p->generation;
        pthread_mutex_unlock(&p->lock);
        drain(p);
        pthread_mutex_lock(&p->lock);
        if (--p->busy == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

gptoss_pool *gptoss_pool_new(int threads) {
    gptoss_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->threads = threads < 1 ? 1 : threads;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (p->threads > 1) {
        p->workers = calloc((size_t)p->threads - 1, sizeof *p->workers);
        if (!p->workers) {
            gptoss_pool_free(p);
            return NULL;
        }
        for (int i = 0; i < p->threads - 1; i++) {
            if (pthread_create(&p->workers[i], NULL, worker, p) != 0)
                break;
            p->started++;
        }
    }
    return p;
}

int gptoss_pool_threads(const gptoss_pool *p) { return p->started + 1; }

void gptoss_pool_run(gptoss_pool *p, int n_tasks, gptoss_task_fn fn, void *ctx) {
    if (n_tasks <= 0)
        return;
    if (p->started == 0 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++)
            fn(ctx, t);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    p->busy = p->started;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    drain(p);
    pthread_mutex_lock(&p->lock);
    while (p->busy > 0)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

void gptoss_pool_free(gptoss_pool *p) {
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->workers[i], NULL);
    free(p->workers);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p);
}
