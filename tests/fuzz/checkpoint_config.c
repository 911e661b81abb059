/* libFuzzer target: a checkpoint's config.json (src/core/checkpoint_config.c),
 * then what a loader does with a config it reads: the range checks, the
 * tensor layout (their sizes) and the count of the tensors a checkpoint of
 * it holds, which the reader compares with its files' before allocating. */
#include "checkpoint.h"
#include "checkpoint_tensors.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gptoss_format format;
    gptoss_config c;
    const char *names[GPTOSS_N_FIELDS];
    char err[GPTOSS_ERR_LEN];
    if (gptoss_checkpoint_config_read(fuzz_file(data, size, ".json"), &format, &c, names, err) ||
        gptoss_config_validate_named(&c, names, err))
        return 0;
    gptoss_layout layout;
    (void)gptoss_layout_compute(&c, &layout, err);
    gptoss_model *m;
    if (gptoss_model_new(&c, names, format, &m, err))
        return 0;
    uint64_t tensors, parts = gptoss_checkpoint_count(m, gptoss_checkpoint_names_of(format), &tensors);
    if (parts > tensors || tensors > 2 * parts) /* a part is one tensor, or an MXFP4 pair */
        abort();
    gptoss_model_free(m);
    return 0;
}
