#include "batch.h"

#include <stdio.h>
#include <stdlib.h>

gptoss_status gptoss_batch_check(const gptoss_batch *b, int n_slots, int ctx, int vocab,
                                 const int *lengths, char *err) {
    if (b->n < 1)
        return gptoss_fail(err, GPTOSS_E_INVALID, "empty batch (no rows)");
    /* last row index seen per slot, -1 if none */
    int *last = malloc(sizeof(int) * (size_t)n_slots);
    if (!last)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    for (int s = 0; s < n_slots; s++)
        last[s] = -1;
    gptoss_status rc = GPTOSS_E_INVALID;
    for (int r = 0; r < b->n; r++) {
        int s = b->slots[r], p = b->positions[r], t = b->tokens[r];
        if (s < 0 || s >= n_slots) {
            snprintf(err, GPTOSS_ERR_LEN, "slots[%d] = %d is out of range 1..%d", r + 1, s + 1,
                     n_slots);
            goto out;
        }
        int fed = gptoss_token_is_fed(t) && gptoss_fed_row(t) < b->fed_rows; /* a row the previous step drew */
        if (!fed && (t < 0 || t >= vocab)) {
            snprintf(err, GPTOSS_ERR_LEN, "tokens[%d] = %d is out of range 0..%d", r + 1, t,
                     vocab - 1);
            goto out;
        }
        if (p < 0) {
            snprintf(err, GPTOSS_ERR_LEN, "positions[%d] = %d is negative", r + 1, p);
            goto out;
        }
        if (p >= ctx) {
            snprintf(err, GPTOSS_ERR_LEN,
                     "positions[%d] = %d is past the context: slot %d holds ctx = %d positions",
                     r + 1, p, s + 1, ctx);
            goto out;
        }
        if (last[s] < 0) {
            if (p > lengths[s]) {
                snprintf(err, GPTOSS_ERR_LEN,
                         "positions[%d] = %d leaves a gap: slot %d holds %d positions, so "
                         "the next one is %d",
                         r + 1, p, s + 1, lengths[s], lengths[s]);
                goto out;
            }
        } else if (p != b->positions[last[s]] + 1) {
            snprintf(err, GPTOSS_ERR_LEN,
                     "positions[%d] = %d does not follow positions[%d] = %d of slot %d (rows "
                     "of one slot must be consecutive positions)",
                     r + 1, p, last[s] + 1, b->positions[last[s]], s + 1);
            goto out;
        }
        last[s] = r;
    }
    rc = GPTOSS_OK;
out:
    free(last);
    return rc;
}

void gptoss_batch_commit(const gptoss_batch *b, int *lengths) {
    /* a slot's rows are increasing, so its last row sets the length */
    for (int r = 0; r < b->n; r++)
        lengths[b->slots[r]] = b->positions[r] + 1;
}
