/* A GPU replica's steps: each checked (rows, chunks, what the windowed
 * layers' rings still hold), uploaded through the next entry of the ring of
 * pinned buffers and enqueued with its sampling and copies back; results
 * delivered into the caller's memory when asked, or when the ring needs the
 * entry again. Forks, which the rings also bound, are enqueued in the same
 * order. */
#include <stdio.h>
#include <string.h>

#include "gpu_replica.h"

/* ---- delivering results ------------------------------------------------------------ */

void gptoss_gpu_deliver(gptoss_gpu *g, struct ring_entry *r) {
    gptoss_result *res = r->result;
    if (!res)
        return;
    r->result = NULL;
    if (hipEventSynchronize(r->done) != hipSuccess)
        return; /* the caller's wait reports the error */
    memcpy(res->tokens, r->tokens_host, sizeof(int) * (size_t)r->rows);
    if (res->logprobs && r->has_logprobs)
        memcpy(res->logprobs, r->logprobs_host, sizeof *res->logprobs * (size_t)r->rows);
    /* the step's row sampling is still in its upload buffer */
    const gptoss_row_sampling *rs = (const gptoss_row_sampling *)(r->upload_host + g->buf.sampling_at);
    res->bad_row = -1;
    for (int i = 0; i < r->rows && res->bad_row < 0; i++)
        if (res->tokens[i] < 0 && (!res->fate || res->fate[i] == GPTOSS_ROW_DRAWS)) { /* the rows asked to draw */
            res->bad_row = i;
            snprintf(res->why, sizeof res->why, "row %d: %s", i + 1,
                     res->tokens[i] == -1 ? "a logit is NaN or +inf"
                     : rs[i].mask        ? GPTOSS_MASK_BANS_ALL
                     : rs[i].n_bias      ? GPTOSS_BIAS_BANS_ALL
                                         : "every logit is -inf");
        }
    res->delivered = 1;
}

/* ---- windowed rings ---------------------------------------------------------- */

/* A windowed layer keeps a ring of the last ring_positions positions
 * written (sliding_window + chunk - 1): a slot's rings hold the keys of
 * positions ring_from[slot] up to its length, the older ones overwritten.
 * A row at position pos attends to the sliding_window - 1 positions before
 * it: a slot may go back to 0, or to where those are all still held (any
 * position while its rings hold every one it wrote: 0 then). */
int gptoss_gpu_rewind_limit(const void *ctx, int slot) {
    const gptoss_gpu *g = (const gptoss_gpu *)ctx;
    int from = g->ring_from[slot];
    return g->ring_positions && from > 0 ? from + g->c.sliding_window - 1 : 0;
}

/* The lowest position a row of slot at pos attends to that the rings
 * lost, or -1 when they hold all. */
static int ring_lacks(const gptoss_gpu *g, int slot, int pos) {
    int need = pos - g->c.sliding_window + 1;
    return pos > 0 && pos < gptoss_gpu_rewind_limit(g, slot) ? (need > 0 ? need : 0) : -1;
}

/* The error for what (a row, or a fork when fork) at pos of slot, with the
 * least pos that works. */
static gptoss_status ring_refusal(const gptoss_gpu *g, int slot, int pos, const char *what, int fork, char *err) {
    int chunk = g->ring_positions - g->c.sliding_window + 1;
    return gptoss_fail(err, GPTOSS_E_UNSUPPORTED,
                       "%s needs the keys of positions %d..%d of slot %d, but its windowed layers keep a ring of the "
                       "last %d positions written (sliding_window %d + chunk %d - 1), which holds positions from %d "
                       "on: %s %d %s",
                       what, ring_lacks(g, slot, pos), pos - 1, slot + 1, g->ring_positions, g->c.sliding_window,
                       chunk, g->ring_from[slot], fork ? "forks of length" : "rows can go back to position",
                       gptoss_gpu_rewind_limit(g, slot), fork ? "or more (or 0) can be copied" : "or start again at 0");
}

/* After a step: its slots' lengths and what their rings hold. Each row
 * overwrites the position ring_positions before it; a row at 0 starts the
 * slot again. */
static void commit(gptoss_gpu *g, const gptoss_batch *b) {
    gptoss_batch_commit(b, g->length);
    for (int r = 0; g->ring_positions && r < b->n; r++) {
        int *from = &g->ring_from[b->slots[r]], pos = b->positions[r], lost = pos - g->ring_positions + 1;
        *from = pos == 0 ? 0 : *from;
        *from = lost > *from ? lost : *from;
    }
}

/* Refuses a row going back further than its slot's rings hold. Keys at
 * or past the slot's first position in this step are this step's own
 * (written before any row attends), so only older ones must be held. */
static gptoss_status check_rings(gptoss_gpu *g, const gptoss_batch *b, char *err) {
    if (!g->ring_positions)
        return GPTOSS_OK;
    int *first = g->slot_rows; /* borrowed: 0 outside check_chunks; here first position + 1 */
    for (int i = 0; i < b->n; i++) {
        int *f = &first[b->slots[i]];
        *f = *f == 0 || b->positions[i] + 1 < *f ? b->positions[i] + 1 : *f;
    }
    gptoss_status s = GPTOSS_OK;
    for (int i = 0; i < b->n && !s; i++) {
        int slot = b->slots[i], lacks = ring_lacks(g, slot, b->positions[i]);
        if (lacks >= 0 && lacks < first[slot] - 1) {
            char what[48];
            snprintf(what, sizeof what, "positions[%d] = %d", i + 1, b->positions[i]);
            s = ring_refusal(g, slot, b->positions[i], what, 0, err);
        }
    }
    for (int i = 0; i < b->n; i++)
        first[b->slots[i]] = 0;
    return s;
}

/* ---- forks ---------------------------------------------------------------------- */

gptoss_status gptoss_gpu_fork(void *ctx, int from, int to, int length, char *err) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    if (ring_lacks(g, from, length) >= 0) {
        char what[48];
        snprintf(what, sizeof what, "a fork of length %d", length);
        return ring_refusal(g, from, length, what, 1, err);
    }
    hipError_t e = hipSetDevice(g->o.device);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "cannot select the device", e);
    size_t row_bytes = (size_t)gptoss_kv_dim(&g->c) * (g->o.kv_bf16 ? 2 : 4);
    gptoss_status s = gptoss_gpu_launch_begin(g, "kv_fork", err);
    if (s || (s = gptoss_gpu_launched(g, "kv_fork",
                                      gptoss_launch_kv_fork(g->buf.kv.layers, g->c.n_layers, row_bytes, from, to,
                                                            length, g->stream),
                                      err)))
        return s;
    g->length[to] = length;
    g->ring_from[to] = length ? g->ring_from[from] : 0; /* the copied rings hold what the source's hold */
    return GPTOSS_OK;
}

/* ---- steps ------------------------------------------------------------------------ */

static gptoss_status check_chunks(gptoss_gpu *g, const gptoss_batch *b, char *err) {
    if (b->n > g->o.rows)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "%d rows, but this replica takes at most rows = %d in one step", b->n, g->o.rows);
    /* slots are in range here (gptoss_batch_check ran first) */
    int over = -1;
    for (int r = 0; r < b->n; r++)
        if (++g->slot_rows[b->slots[r]] > g->o.chunk && over < 0)
            over = b->slots[r];
    int n = over >= 0 ? g->slot_rows[over] : 0;
    for (int r = 0; r < b->n; r++)
        g->slot_rows[b->slots[r]] = 0;
    if (over >= 0)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "slot %d has %d or more rows, but this replica takes at most chunk = %d rows "
                           "of one slot in one step",
                           over + 1, n, g->o.chunk);
    return GPTOSS_OK;
}

/* Checks the batch and uploads it through the next ring entry, padded to
 * `padded` rows by copies of its last: those write the same keys and
 * values, bit for bit (a row's sums do not depend on the others), at the
 * same place, and nobody reads what they draw. */
static gptoss_status begin_step(gptoss_gpu *g, const gptoss_batch *b, const gptoss_row_sampling *sampling,
                                int padded, struct ring_entry **entry, char *err) {
    gptoss_status s = gptoss_batch_check(b, g->o.slots, g->o.ctx, g->c.vocab_size, g->length, err);
    if (s || (s = check_chunks(g, b, err)))
        return s;
    if ((s = check_rings(g, b, err)))
        return s;
    hipError_t e = hipSetDevice(g->o.device);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "cannot select the device", e);
    struct ring_entry *r = &g->ring.entry[g->ring.next_ticket % GPTOSS_RING];
    gptoss_gpu_deliver(g, r);
    e = hipEventSynchronize(r->done); /* its upload buffer is free again */
    if (e != hipSuccess && r->ticket)
        return gptoss_gpu_fail(err, g, "an earlier step failed", e);
    int R = b->n, cap = g->o.rows;
    int *ints = (int *)r->upload_host;
    memcpy(ints, b->tokens, sizeof(int) * (size_t)R);
    memcpy(ints + cap, b->slots, sizeof(int) * (size_t)R);
    memcpy(ints + 2 * cap, b->positions, sizeof(int) * (size_t)R);
    for (int i = R; i < padded; i++)
        for (int field = 0; field < 3; field++)
            ints[field * cap + i] = ints[field * cap + R - 1];
    gptoss_row_sampling *rs = (gptoss_row_sampling *)(r->upload_host + g->buf.sampling_at);
    if (sampling)
        memcpy(rs, sampling, sizeof *rs * (size_t)R);
    else
        memset(rs, 0, sizeof *rs * (size_t)R);
    e = hipMemcpyAsync(g->buf.s.upload, r->upload_host, g->buf.upload_bytes, hipMemcpyHostToDevice, g->stream);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "uploading the batch", e);
    *entry = r;
    return GPTOSS_OK;
}

/* The constrained rows' masks (a->masks, as many as the highest mask a
 * row names) sent up through r's pinned buffer; *dev: where the sampler
 * reads them, NULL when no row has one. Before the forward pass: a
 * refusal leaves the slots as they were. */
static gptoss_status upload_masks(gptoss_gpu *g, struct ring_entry *r, const gptoss_step_args *a, int R,
                                  const uint32_t **dev, char *err) {
    *dev = NULL;
    int n = 0;
    for (int i = 0; a->sampling && i < R; i++)
        n = a->sampling[i].mask > n ? a->sampling[i].mask : n;
    if (n == 0)
        return GPTOSS_OK;
    size_t words = (size_t)gptoss_mask_words(g->c.vocab_size), bytes = (size_t)n * words * sizeof(uint32_t);
    hipError_t e = hipSuccess;
    if (!g->masks)
        e = hipMalloc((void **)&g->masks, (size_t)g->o.rows * words * sizeof(uint32_t));
    if (e == hipSuccess && r->masks_bytes < bytes) {
        if (r->masks_host)
            (void)hipHostFree(r->masks_host);
        r->masks_host = NULL;
        r->masks_bytes = 0;
        if ((e = hipHostMalloc((void **)&r->masks_host, bytes, 0)) == hipSuccess)
            r->masks_bytes = bytes;
    }
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "cannot allocate the buffers of the constrained rows' masks", e);
    memcpy(r->masks_host, a->masks, bytes);
    e = hipMemcpyAsync(g->masks, r->masks_host, bytes, hipMemcpyHostToDevice, g->stream);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "uploading the constrained rows' masks", e);
    *dev = g->masks;
    return GPTOSS_OK;
}

/* Copies the kept rows' logits back: runs of consecutive rows in one copy each. */
static hipError_t copy_logits(gptoss_gpu *g, const gptoss_step_args *a, int R) {
    size_t V = (size_t)g->c.vocab_size;
    hipError_t e = hipSuccess;
    int n = a->logit_rows ? a->n_logit_rows : R;
    for (int i = 0; i < n && e == hipSuccess;) {
        int first = a->logit_rows ? a->logit_rows[i] : i, run = 1;
        while (i + run < n && (a->logit_rows ? a->logit_rows[i + run] : i + run) == first + run)
            run++;
        e = hipMemcpyAsync(a->logits + (size_t)i * V, g->buf.s.logits + (size_t)first * V, sizeof(float) * V * run,
                           hipMemcpyDeviceToHost, g->stream);
        i += run;
    }
    return e;
}

gptoss_status gptoss_gpu_step(void *ctx, const gptoss_batch *b, const gptoss_step_args *a, gptoss_result *res,
                               char *err) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    struct ring_entry *r;
    const int R = b->n, padded = gptoss_gpu_padded_rows(g, R);
    gptoss_status s = begin_step(g, b, a->sampling, padded, &r, err);
    if (s)
        return s;
    hipError_t e = hipSuccess;
    if (res->logprobs && !r->logprobs_host) /* before the forward pass: a refusal leaves the slots as they were */
        e = hipHostMalloc((void **)&r->logprobs_host, sizeof *r->logprobs_host * (size_t)g->o.rows, 0);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "cannot allocate pinned host buffers", e);
    const uint32_t *masks;
    if ((s = upload_masks(g, r, a, R, &masks, err)) || (s = gptoss_gpu_forward_step(g, b, padded, err)))
        return s;
    const gptoss_row_sampling *rs = (const gptoss_row_sampling *)(g->buf.s.upload + g->buf.sampling_at);
    gptoss_row_logprobs *lp = res->logprobs ? g->buf.s.logprobs : NULL;
    if ((s = gptoss_gpu_launch_begin(g, "sample", err)) ||
        (s = gptoss_gpu_launched(g, "sample",
                                 gptoss_launch_sample(g->buf.s.logits, R, g->c.vocab_size, rs, g->buf.s.bias, masks,
                                                      g->buf.s.drawn, g->buf.s.tokens, lp, g->stream),
                                 err)))
        return s;
    e = hipMemcpyAsync(r->tokens_host, g->buf.s.tokens, sizeof(int) * (size_t)R, hipMemcpyDeviceToHost, g->stream);
    if (e == hipSuccess && lp)
        e = hipMemcpyAsync(r->logprobs_host, lp, sizeof *lp * (size_t)R, hipMemcpyDeviceToHost, g->stream);
    if (e == hipSuccess && a->logits)
        e = copy_logits(g, a, R);
    if (e == hipSuccess)
        e = hipEventRecord(r->done, g->stream);
    if (e == hipSuccess && a->logits)
        e = hipEventSynchronize(r->done);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "copying the results back", e);
    commit(g, b);
    r->ticket = g->ring.next_ticket++;
    r->rows = R;
    r->has_logprobs = lp != NULL;
    r->result = res;
    res->ticket = r->ticket;
    return GPTOSS_OK;
}

gptoss_status gptoss_gpu_wait(void *ctx, gptoss_result *res, char *err) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    struct ring_entry *r = &g->ring.entry[res->ticket % GPTOSS_RING];
    if (r->ticket != res->ticket || r->result != res)
        return gptoss_fail(err, GPTOSS_E_STATE, "this step's result is gone (internal error)");
    hipError_t e = hipEventSynchronize(r->done);
    if (e != hipSuccess)
        return gptoss_fail(err, GPTOSS_E_DEVICE,
                           "device %d: %s (while running a step; last kernel enqueued: %s; with "
                           "GPTOSS_SYNC_LAUNCHES=1 each kernel is waited for and the failing one named)",
                           g->o.device, hipGetErrorString(e), g->last_kernel);
    gptoss_gpu_deliver(g, r);
    return GPTOSS_OK;
}

/* An event query, which never blocks. A result whose entry the ring took
 * back was delivered then; a failed step is ready too: wait reports it. */
int gptoss_gpu_ready(void *ctx, const gptoss_result *res) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    const struct ring_entry *r = &g->ring.entry[res->ticket % GPTOSS_RING];
    if (r->ticket != res->ticket || r->result != res)
        return 1;
    return hipEventQuery(r->done) != hipErrorNotReady;
}

void gptoss_gpu_forget(void *ctx, gptoss_result *res) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    struct ring_entry *r = &g->ring.entry[res->ticket % GPTOSS_RING];
    if (r->result == res)
        r->result = NULL;
}

gptoss_status gptoss_gpu_logits(void *ctx, const gptoss_result *res, float *out, char *err) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    if (res->ticket + 1 != g->ring.next_ticket)
        return gptoss_fail(err, GPTOSS_E_STATE, "a later step on this replica has replaced these logits");
    hipError_t e = hipSetDevice(g->o.device);
    if (e == hipSuccess)
        e = hipMemcpyAsync(out, g->buf.s.logits, sizeof(float) * (size_t)res->rows * g->c.vocab_size,
                           hipMemcpyDeviceToHost, g->stream);
    if (e == hipSuccess)
        e = hipStreamSynchronize(g->stream);
    if (e != hipSuccess)
        return gptoss_fail(err, GPTOSS_E_DEVICE, "device %d: %s (last kernel enqueued: %s)", g->o.device,
                           hipGetErrorString(e), g->last_kernel);
    return GPTOSS_OK;
}

gptoss_status gptoss_gpu_trace(void *ctx, const gptoss_batch *b, gptoss_trace *trace, float *logits,
                                char *err) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    struct ring_entry *r;
    gptoss_status s = begin_step(g, b, NULL, b->n, &r, err);
    if (s || (s = gptoss_gpu_forward(g, b, trace, err)))
        return s;
    hipError_t e = hipMemcpyAsync(logits, g->buf.s.logits, sizeof(float) * (size_t)g->c.vocab_size,
                                  hipMemcpyDeviceToHost, g->stream);
    if (e == hipSuccess)
        e = hipStreamSynchronize(g->stream);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "reading the logits", e);
    commit(g, b);
    g->ring.next_ticket++; /* the logits of earlier steps are gone */
    return GPTOSS_OK;
}
