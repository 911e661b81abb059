/* libFuzzer target: a safetensors file (src/core/safetensors.c), mapped and
 * validated; every tensor it accepts is then looked up by name and read
 * whole from the mapping, as a model's loader does. */
#include "fuzz.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gptoss_st_file *f;
    char err[GPTOSS_ERR_LEN];
    if (gptoss_st_open(fuzz_file(data, size, ".safetensors"), &f, err))
        return 0;
    static volatile unsigned sink; /* the reads are the point */
    unsigned sum = 0;
    for (int i = 0; i < f->n_tensors; i++) {
        const gptoss_st_tensor *t = gptoss_st_find(f, f->tensors[i].name);
        if (t != &f->tensors[i])
            abort();
        for (uint64_t b = 0; b < t->bytes; b++)
            sum += t->data[b];
    }
    sink = sum;
    gptoss_st_close(f);
    return 0;
}
