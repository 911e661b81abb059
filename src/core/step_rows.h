/* Which rows of a step keep their logits and which draw a token, and what
 * became of each row's token (gptoss_result's fate): the part of
 * gptoss_engine_step (engine.c) that is about a result's rows. Not part of
 * the engine interface (engine.h). */
#ifndef GPTOSS_STEP_ROWS_H
#define GPTOSS_STEP_ROWS_H

#include "engine.h"

/* The rows whose logits res keeps: keep (0-based) checked against the
 * batch's n rows and copied into res; every row when keep is NULL. */
gptoss_status gptoss_step_rows_keep(const int *keep, int n_keep, int n, gptoss_result *res, char *err);

/* The rows that draw a token: draw (0-based) checked against the batch's n
 * rows, the others GPTOSS_ROW_UNDRAWN in res->fate; every row when draw is
 * NULL. */
gptoss_status gptoss_step_rows_draw(const int *draw, int n_draw, int n, gptoss_result *res, char *err);

/* The rows that draw under a constraint: mask_rows (0-based) checked
 * against the batch's n rows, each one that draws (after
 * gptoss_step_rows_draw). */
gptoss_status gptoss_step_rows_masked(const int *mask_rows, int n_masks, int n, const gptoss_result *res, char *err);

/* Refuses a batch fed a token of a row fed_by was not asked to draw. */
gptoss_status gptoss_step_rows_check_fed(const gptoss_batch *b, const gptoss_result *fed_by, char *err);

/* Row (0-based) of res is fed the token of fed_row of fed_by (settled),
 * which could not be drawn: it draws none (GPTOSS_ROW_FED_FAILED). Called
 * for ascending rows, before the step runs: the first becomes res's
 * bad_row, its why saying why the feeding row failed. */
gptoss_status gptoss_step_rows_fed_failed(gptoss_result *res, int row, const gptoss_result *fed_by, int fed_row,
                                          char *err);

/* A delivered result's fates applied, once: an undrawn row's token is
 * GPTOSS_TOKEN_UNDRAWN, a row fed a token that could not be drawn fails,
 * and bad_row is the first row that failed among those that draw (why
 * then says so, where it is not the row the engine named). */
void gptoss_step_rows_settle(gptoss_result *res);

#endif
