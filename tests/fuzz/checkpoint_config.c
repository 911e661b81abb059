/* libFuzzer target: a checkpoint's config.json (src/core/checkpoint_config.c),
 * then what a loader does with a config it reads: the range checks and the
 * tensor layout (their sizes). */
#include "checkpoint.h"
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
    return 0;
}
