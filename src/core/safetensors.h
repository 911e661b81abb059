/* Safetensors files (docs/checkpoints.md#safetensors): an 8-byte little-endian
 * header length N, N bytes of JSON naming each tensor's dtype, shape and byte
 * range, then the data. A file is mapped read-only and its header validated
 * completely when opened; tensor bytes are read from the mapping when used. */
#ifndef GPTOSS_SAFETENSORS_H
#define GPTOSS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Safetensors' reference reader refuses longer headers. */
#define GPTOSS_ST_MAX_HEADER 100000000ull
#define GPTOSS_ST_MAX_DIMS 8

/* The dtypes the models use; a file may hold others (GPTOSS_ST_OTHER). */
typedef enum { GPTOSS_ST_BF16, GPTOSS_ST_F32, GPTOSS_ST_U8, GPTOSS_ST_OTHER } gptoss_st_dtype;

typedef struct {
    char *name;
    char dtype_name[16]; /* as the header spells it */
    gptoss_st_dtype dtype;
    int ndim;
    int64_t shape[GPTOSS_ST_MAX_DIMS];
    uint64_t bytes;
    const unsigned char *data; /* in the mapping */
    int used;                  /* set by the caller that takes the tensor */
} gptoss_st_tensor;

typedef struct {
    char *path;
    const unsigned char *map;
    size_t map_bytes;
    int n_tensors;
    gptoss_st_tensor *tensors; /* sorted by name */
} gptoss_st_file;

/* Maps and validates a file: GPTOSS_E_IO when it cannot be opened, read or
 * mapped; GPTOSS_E_INVALID, naming the file and the tensor, when its header
 * length exceeds the file or GPTOSS_ST_MAX_HEADER, its JSON does not parse
 * or is not {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}},
 * a dtype is unknown to safetensors, a tensor's size is not its dtype's
 * size times its shape, or the byte ranges overlap, leave holes, do not
 * start at 0 or do not end where the file does; GPTOSS_E_HOST_MEMORY. */
gptoss_status gptoss_st_open(const char *path, gptoss_st_file **out, char *err);

/* The tensor of that name, or NULL. */
gptoss_st_tensor *gptoss_st_find(const gptoss_st_file *f, const char *name);

void gptoss_st_close(gptoss_st_file *f);

/* A dtype's name in headers ("BF16", "F32", "U8"). */
const char *gptoss_st_dtype_name(gptoss_st_dtype d);

/* One tensor a writer lays out: tensors follow one another in the order given. */
typedef struct {
    const char *name;
    gptoss_st_dtype dtype; /* not GPTOSS_ST_OTHER */
    int ndim;
    const int64_t *shape;
} gptoss_st_entry;

/* The bytes a file of these tensors starts with: the length field, then the
 * JSON (with "__metadata__": {"format": "pt"}, as PyTorch's writer puts it)
 * padded with spaces to a multiple of 8 so that the data starts aligned.
 * *header is malloc'd; GPTOSS_E_HOST_MEMORY. */
gptoss_status gptoss_st_header(const gptoss_st_entry *entries, int n, unsigned char **header,
                               uint64_t *header_bytes, char *err);

/* Bytes of an entry's data. */
uint64_t gptoss_st_entry_bytes(const gptoss_st_entry *e);

#ifdef __cplusplus
}
#endif

#endif
