/* gpt-oss checkpoints as OpenAI ships them (docs/checkpoints.md): a directory
 * of config.json and safetensors files, in the Hugging Face layout or
 * OpenAI's original/ one. Read into a model whose tensors stay in the mapped
 * files (checkpoint_read.c), and written from any model (checkpoint_write.c). */
#ifndef GPTOSS_CHECKPOINT_H
#define GPTOSS_CHECKPOINT_H

#include <stdint.h>

#include "model.h"
#include "tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The default cap of a shard's bytes: transformers' default (5 GB). */
#define GPTOSS_SHARD_BYTES 5000000000ull

/* Opens the checkpoint in directory dir (gptoss_model_open's contract,
 * model_load.h); the layout follows from config.json. */
gptoss_status gptoss_checkpoint_open(const char *dir, gptoss_model **out, char *err);

/* Writes m as a new checkpoint directory dir of format f (hf or original):
 * config.json, tokenizer.json from tok when it is not NULL (its entries as
 * many as the model's vocab_size), then shards of at most shard_bytes of tensor data (a tensor
 * larger than that alone in one), with an index when there are several;
 * into dir.tmp-XXXXXX, renamed to dir at the end. Experts are written as
 * MXFP4 (GPTOSS_E_UNSUPPORTED when gptoss_model_experts_in refuses
 * them), other tensors as BF16 when every value is exactly a bf16, else
 * F32. GPTOSS_E_INVALID when dir exists (other than as an empty
 * directory) or the config cannot be written in format f; GPTOSS_E_IO,
 * GPTOSS_E_HOST_MEMORY. */
gptoss_status gptoss_checkpoint_save(gptoss_model *m, const char *dir, gptoss_format f,
                                     const gptoss_tokenizer *tok, uint64_t shard_bytes, char *err);

/* ---- config.json (checkpoint_config.c) ---- */

/* Reads config.json at path into c, detecting the layout (*f: hf when it
 * has num_local_experts, original when num_experts); names[i] receives the
 * key field i was read from (for gptoss_config_validate_named). Refuses,
 * naming the file and the key, what does not parse, a missing required
 * key, a wrong JSON type, and settings the forward pass does not implement
 * (another RoPE than YaRN, other YaRN betas, rms_norm_eps other than 1e-5,
 * layer_types other than sliding on even layers). Ranges are left to
 * gptoss_config_validate_named. */
gptoss_status gptoss_checkpoint_config_read(const char *path, gptoss_format *f, gptoss_config *c,
                                            const char **names, char *err);

/* config.json's text for c in format f (malloc'd); GPTOSS_E_INVALID when
 * format f cannot state c, GPTOSS_E_HOST_MEMORY. */
gptoss_status gptoss_checkpoint_config_text(const gptoss_config *c, gptoss_format f, char **text,
                                            char *err);

#ifdef __cplusplus
}
#endif

#endif
