/* TEMPORARY until the checkpoint branch lands (it owns these in model.h). */
#ifndef GPTOSS_EXPERTS_TMP_H
#define GPTOSS_EXPERTS_TMP_H
#include "model.h"
#ifdef __cplusplus
extern "C" {
#endif
gptoss_status gptoss_model_experts_mxfp4(gptoss_model *m, char *err);
void gptoss_model_read_mxfp4(const gptoss_model *m, int tensor, uint64_t first, uint64_t rows, uint8_t *codes,
                             uint8_t *scales);
#ifdef __cplusplus
}
#endif
#endif
