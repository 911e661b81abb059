/* Launch bookkeeping of a GPU replica: every kernel launch goes through
 * gptoss_gpu_launch_begin / gptoss_gpu_launched, which name the kernel in
 * errors, wait after it under GPTOSS_SYNC_LAUNCHES, and time it with device
 * events while profiling (r:profile). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_replica.h"

static gptoss_status grow_events(gptoss_gpu_profiler *p, char *err) {
    if (p->n_events + 2 <= p->cap_events)
        return GPTOSS_OK;
    int cap = p->cap_events ? 2 * p->cap_events : 1024;
    hipEvent_t *ev = (hipEvent_t *)realloc(p->events, sizeof(hipEvent_t) * (size_t)cap);
    if (ev)
        p->events = ev;
    const char **lb = ev ? (const char **)realloc(p->labels, sizeof(char *) * (size_t)cap) : NULL;
    if (lb)
        p->labels = lb;
    if (!ev || !lb)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    p->cap_events = cap;
    return GPTOSS_OK;
}

gptoss_status gptoss_gpu_launch_begin(gptoss_gpu *g, const char *label, char *err) {
    gptoss_gpu_profiler *p = &g->prof;
    if (!p->on)
        return GPTOSS_OK;
    gptoss_status s = grow_events(p, err);
    if (s)
        return s;
    while (p->made_events < p->n_events + 2) {
        hipError_t e = hipEventCreate(&p->events[p->made_events]);
        if (e != hipSuccess)
            return gptoss_gpu_fail(err, g, "cannot create a timing event", e);
        p->made_events++;
    }
    p->labels[p->n_events / 2] = label;
    hipError_t e = hipEventRecord(p->events[p->n_events], g->stream);
    p->n_events += 2;
    return e == hipSuccess ? GPTOSS_OK : gptoss_gpu_fail(err, g, "cannot record a timing event", e);
}

gptoss_status gptoss_gpu_launched(gptoss_gpu *g, const char *label, hipError_t e, char *err) {
    g->last_kernel = label;
    if (e == hipSuccess && g->sync_launches)
        e = hipStreamSynchronize(g->stream);
    if (e != hipSuccess) {
        char what[96];
        snprintf(what, sizeof what, "kernel %s", label);
        return gptoss_gpu_fail(err, g, what, e);
    }
    if (g->prof.on) {
        e = hipEventRecord(g->prof.events[g->prof.n_events - 1], g->stream);
        if (e != hipSuccess)
            return gptoss_gpu_fail(err, g, "cannot record a timing event", e);
    }
    return GPTOSS_OK;
}

/* the total of label, appended in first-launch order when new */
static struct profile_total *total_of(gptoss_gpu_profiler *p, const char *label, char *err) {
    for (int i = 0; i < p->n_totals; i++)
        if (strcmp(p->totals[i].label, label) == 0)
            return &p->totals[i];
    if (p->n_totals == p->cap_totals) {
        int cap = p->cap_totals ? 2 * p->cap_totals : 32;
        struct profile_total *t = (struct profile_total *)realloc(p->totals, sizeof *t * (size_t)cap);
        if (!t) {
            gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
            return NULL;
        }
        p->totals = t;
        p->cap_totals = cap;
    }
    p->totals[p->n_totals] = (struct profile_total){label, 0.0, 0};
    return &p->totals[p->n_totals++];
}

/* Folds the timed launches of the steps so far into the totals. */
static gptoss_status collect(gptoss_gpu *g, char *err) {
    gptoss_gpu_profiler *p = &g->prof;
    hipError_t e = hipSetDevice(g->o.device);
    if (e == hipSuccess)
        e = hipStreamSynchronize(g->stream);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "waiting for the timed steps", e);
    for (int i = 0; i < p->n_events; i += 2) {
        float ms = 0;
        (void)hipEventElapsedTime(&ms, p->events[i], p->events[i + 1]);
        struct profile_total *t = total_of(p, p->labels[i / 2], err);
        if (!t)
            return GPTOSS_E_HOST_MEMORY;
        t->seconds += ms / 1000.0;
        t->calls++;
    }
    p->n_events = 0;
    return GPTOSS_OK;
}

gptoss_status gptoss_gpu_profile(void *ctx, int on, char *err) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    gptoss_status s = collect(g, err);
    if (s)
        return s;
    if (!on)
        g->prof.n_totals = 0;
    g->prof.on = on;
    return GPTOSS_OK;
}

void gptoss_gpu_profile_read(void *ctx, void (*each)(void *arg, const char *label, double seconds, long calls),
                             void *arg) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    char err[GPTOSS_ERR_LEN];
    if (collect(g, err))
        return;
    for (int i = 0; i < g->prof.n_totals; i++)
        each(arg, g->prof.totals[i].label, g->prof.totals[i].seconds, g->prof.totals[i].calls);
}

void gptoss_gpu_profile_free(gptoss_gpu *g) {
    gptoss_gpu_profiler *p = &g->prof;
    for (int i = 0; i < p->made_events; i++)
        (void)hipEventDestroy(p->events[i]);
    free(p->totals);
    free(p->events);
    free(p->labels);
}
