/* A step's rows (step_rows.h): the lists of rows that keep logits and that
 * draw, checked against the batch, and the fates of the rows' tokens. */
#include "step_rows.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Checks a list of n_list rows (0-based) of a batch of n rows, the option
 * name gives: each in range, none twice. */
static gptoss_status check_rows(const char *name, const int *list, int n_list, int n, char *err) {
    int *first = calloc((size_t)(n > 0 ? n : 1), sizeof *first); /* per row: 1 + where the list names it first */
    if (!first)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    gptoss_status s = GPTOSS_OK;
    for (int i = 0; i < n_list && !s; i++) {
        int r = list[i];
        if (r < 0 || r >= n)
            s = gptoss_fail(err, GPTOSS_E_INVALID, "%s[%d] = %d is out of range 1..%d (the step's rows)", name, i + 1,
                            r + 1, n);
        else if (first[r])
            s = gptoss_fail(err, GPTOSS_E_INVALID, "%s[%d] = %d repeats %s[%d]", name, i + 1, r + 1, name, first[r]);
        else
            first[r] = i + 1;
    }
    free(first);
    return s;
}

gptoss_status gptoss_step_rows_keep(const int *keep, int n_keep, int n, gptoss_result *res, char *err) {
    if (!keep)
        return GPTOSS_OK;
    if (n_keep < 1)
        return gptoss_fail(err, GPTOSS_E_INVALID, "logits names no row (keep none with logits = false)");
    gptoss_status s = check_rows("logits", keep, n_keep, n, err);
    if (s)
        return s;
    if (!(res->logit_rows = malloc(sizeof(int) * (size_t)n_keep)))
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    memcpy(res->logit_rows, keep, sizeof(int) * (size_t)n_keep);
    res->logits_rows = n_keep;
    return GPTOSS_OK;
}

gptoss_status gptoss_step_rows_draw(const int *draw, int n_draw, int n, gptoss_result *res, char *err) {
    if (!draw)
        return GPTOSS_OK;
    gptoss_status s = check_rows("draw", draw, n_draw, n, err);
    if (s)
        return s;
    if (!(res->fate = malloc((size_t)(n > 0 ? n : 1))))
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    memset(res->fate, GPTOSS_ROW_UNDRAWN, (size_t)n);
    for (int i = 0; i < n_draw; i++)
        res->fate[draw[i]] = GPTOSS_ROW_DRAWS;
    return GPTOSS_OK;
}

gptoss_status gptoss_step_rows_masked(const int *mask_rows, int n_masks, int n, const gptoss_result *res, char *err) {
    gptoss_status s = check_rows("constraint", mask_rows, n_masks, n, err);
    for (int k = 0; !s && k < n_masks; k++)
        if (res->fate && res->fate[mask_rows[k]] == GPTOSS_ROW_UNDRAWN)
            s = gptoss_fail(err, GPTOSS_E_INVALID, "constraint names row %d, which does not draw a token (draw)",
                            mask_rows[k] + 1);
    return s;
}

gptoss_status gptoss_step_rows_check_fed(const gptoss_batch *b, const gptoss_result *fed_by, char *err) {
    for (int r = 0; fed_by->fate && r < b->n; r++) {
        int t = b->tokens[r], j = gptoss_fed_row(t);
        if (gptoss_token_is_fed(t) && j < fed_by->rows && fed_by->fate[j] == GPTOSS_ROW_UNDRAWN)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "tokens[%d] is fed by row %d of the step before, which was not asked to draw a "
                               "token (draw)",
                               r + 1, j + 1);
    }
    return GPTOSS_OK;
}

/* why a row fed a token that could not be drawn fails */
#define FED_FAILED "the token fed to it could not be drawn"

gptoss_status gptoss_step_rows_fed_failed(gptoss_result *res, int row, const gptoss_result *fed_by, int fed_row,
                                          char *err) {
    if (!res->fate && !(res->fate = calloc((size_t)res->rows, 1))) /* calloc: GPTOSS_ROW_DRAWS */
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    res->fate[row] = GPTOSS_ROW_FED_FAILED;
    if (res->bad_row < 0) { /* the first: it says why its feeding row failed */
        char why[GPTOSS_ERR_LEN];
        gptoss_result_row_failed(fed_by, fed_row, why);
        res->bad_row = row;
        snprintf(res->why, sizeof res->why, "row %d: " FED_FAILED " (row %d of the step before: %.400s)", row + 1,
                 fed_row + 1, why);
    }
    return GPTOSS_OK;
}

void gptoss_step_rows_settle(gptoss_result *res) {
    if (res->settled || !res->delivered)
        return;
    res->settled = 1;
    if (!res->fate)
        return;
    int first = -1;
    for (int r = 0; r < res->rows; r++) {
        int fate = res->fate[r];
        if (fate == GPTOSS_ROW_UNDRAWN)
            res->tokens[r] = GPTOSS_TOKEN_UNDRAWN;
        else if (fate == GPTOSS_ROW_FED_FAILED)
            res->tokens[r] = -1;
        if (fate != GPTOSS_ROW_DRAWS && res->logprobs)
            res->logprobs[r].n_top = -1;
        if (first < 0 && res->tokens[r] < 0 && fate != GPTOSS_ROW_UNDRAWN)
            first = r;
    }
    if (first != res->bad_row && first >= 0) {
        char why[GPTOSS_ERR_LEN];
        gptoss_result_row_failed(res, first, why);
        snprintf(res->why, sizeof res->why, "row %d: %.480s", first + 1, why);
    }
    res->bad_row = first;
}

int gptoss_result_row_failed(const gptoss_result *res, int row, char *why) {
    int t = res->tokens[row];
    if (t >= 0 || t == GPTOSS_TOKEN_UNDRAWN)
        return 0;
    char prefix[32];
    int n = snprintf(prefix, sizeof prefix, "row %d: ", row + 1);
    if (row == res->bad_row && strncmp(res->why, prefix, (size_t)n) == 0)
        snprintf(why, GPTOSS_ERR_LEN, "%s", res->why + n);
    else if (res->fate && res->fate[row] == GPTOSS_ROW_FED_FAILED)
        snprintf(why, GPTOSS_ERR_LEN, FED_FAILED);
    else
        snprintf(why, GPTOSS_ERR_LEN, "its logits allowed no token to be drawn");
    return 1;
}
