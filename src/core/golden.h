/* The CPU golden engine: the course's run.cpp forward (docs/course.md),
 * reproduced operation for operation, over a pool of independent sequences
 * (slots), one ragged batch of rows per step. Rows are computed layer by
 * layer so that each weight row is read once per step, but every row's
 * arithmetic (summation order, float/double mix) is exactly run.cpp's.
 * Its steps finish before they return; tokens are drawn on the host. */
#ifndef GPTOSS_GOLDEN_H
#define GPTOSS_GOLDEN_H

#include "engine.h"

extern const gptoss_engine_i gptoss_golden_engine;

#endif
