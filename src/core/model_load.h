/* Opening a model from a path: the loader above the readers, which picks
 * the one the path needs (a course .bin, model.c; a checkpoint directory,
 * checkpoint_read.c), so that no reader calls another. */
#ifndef GPTOSS_MODEL_LOAD_H
#define GPTOSS_MODEL_LOAD_H

#include "model.h"

/* Opens a course .bin (a file) or a checkpoint (a directory: Hugging Face
 * layout, or OpenAI's original/; docs/checkpoints.md), mapped read-only.
 * GPTOSS_E_IO when a file cannot be opened, read or mapped (or the path is
 * neither a regular file nor a directory); GPTOSS_E_INVALID, naming the
 * file and the field or tensor, when the header or config fails
 * validation, the file is shorter than its header implies, or a
 * checkpoint's tensors are missing, unexpected, malformed or of a dtype or
 * shape the model does not take; GPTOSS_E_HOST_MEMORY. */
gptoss_status gptoss_model_open(const char *path, gptoss_model **out, char *err);

#endif
