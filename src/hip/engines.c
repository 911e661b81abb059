/* Which engine runs a replica. A new engine is its own file with its own
 * gptoss_engine_i, and a line here. */
#include "../core/golden.h"
#include "backend.h"

const gptoss_engine_i *gptoss_engine_for(int device) {
    return device < 0 ? &gptoss_golden_engine : gptoss_gpu_engine();
}
