/* One ragged batch of rows (slot, position, token) and the rules every
 * backend applies before running it: slots and tokens in range, positions
 * inside ctx, no gap after a slot's current length, and several rows of one
 * slot only as consecutive positions (a prefill chunk). Writing at a position
 * below the slot's length truncates the sequence there. */
#ifndef GPTOSS_BATCH_H
#define GPTOSS_BATCH_H

#include "../../contract/device_contract.h" /* fed tokens */
#include "status.h"

#ifdef __cplusplus
extern "C" { /* the HIP engine is C++ */
#endif

typedef struct {
    int n;
    const int *slots;     /* 0-based */
    const int *positions; /* 0-based */
    const int *tokens;
    /* > 0: the engine's previous step had fed_rows rows, and a fed token
     * naming one of them (gptoss_fed_token) stands for what that step drew
     * there, which the engine reads on the device; 0: every token is an id */
    int fed_rows;
} gptoss_batch;

/* Checks the batch against n_slots slots of ctx positions whose current
 * lengths are given (GPTOSS_E_INVALID). Messages use the API's 1-based slot
 * and row numbers. */
gptoss_status gptoss_batch_check(const gptoss_batch *b, int n_slots, int ctx, int vocab,
                                 const int *lengths, char *err);

/* After a successful check: each touched slot's length becomes its last
 * position + 1. */
void gptoss_batch_commit(const gptoss_batch *b, int *lengths);

#ifdef __cplusplus
}
#endif

#endif
