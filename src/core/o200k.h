/* tiktoken's o200k pre-tokenizer: the regular expression that cuts text
 * into the pieces BPE then merges one by one (o200k_base and
 * o200k_harmony share it), run by PCRE2 with Unicode properties and JIT.
 *
 * Invalid UTF-8 is kept, not replaced: bytes that no alternative of the
 * pattern can match (they are no character) form pieces of their own, each
 * maximal run of them one piece, so decoding the ids gives back the text's
 * bytes exactly. */
#ifndef GPTOSS_O200K_H
#define GPTOSS_O200K_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* Called for each piece in order; a nonzero status stops the split and is
 * returned. */
typedef gptoss_status (*gptoss_piece_fn)(void *ctx, const uint8_t *piece, size_t len, char *err);

/* Cuts text[0..len) into its o200k pieces. GPTOSS_E_HOST_MEMORY when the
 * matcher's memory cannot be had; GPTOSS_E_INTERNAL if PCRE2 fails. */
gptoss_status gptoss_o200k_split(const uint8_t *text, size_t len, gptoss_piece_fn fn, void *ctx, char *err);

#endif
