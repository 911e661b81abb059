/* Opening the files the readers take (a model .bin, a checkpoint's JSON and
 * shards, a tokenizer, a tensor file) only when they are regular files: a
 * named pipe blocks open() itself until a writer comes, and read() after it
 * until the writer writes, so a reader handed one would hang; a directory or
 * a device has no bytes a reader can mean. */
#ifndef GPTOSS_REGULAR_FILE_H
#define GPTOSS_REGULAR_FILE_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "status.h"

/* What a file of this mode is, in words that follow "is": "a directory",
 * "a named pipe", "a character device", "a block device", "a socket",
 * "a regular file" ("something else" for a kind Linux does not have). */
const char *gptoss_file_kind(mode_t mode);

/* Opens path read-only when it is a regular file, and *fd (close it) reads
 * it as usual; *size is its size in bytes. The path is looked at before it
 * is opened, so that no pipe or device is opened, and the file opened is
 * looked at again without blocking, so that a path swapped for a pipe in
 * between cannot hang either. Fails with GPTOSS_E_IO: "cannot open <what>
 * '<path>': <the system's reason>" when it cannot be looked at or opened,
 * "<what> '<path>' is a named pipe, not a regular file" (or a directory,
 * ...) when it is not a regular file; what may be NULL ("'<path>' is ..."). */
gptoss_status gptoss_open_regular(const char *path, const char *what, int *fd, uint64_t *size, char *err);

/* The JSON of path (jansson's flags) when it is a regular file, opened as
 * gptoss_open_regular opens it and failing as it fails; GPTOSS_E_INVALID
 * with *jerr saying why when the text is not JSON, for the caller to say. */
gptoss_status gptoss_json_load_regular(const char *path, const char *what, size_t flags, json_t **root,
                                       json_error_t *jerr, char *err);

/* Whether path is a regular file, without opening it: 1; 0 with why
 * ("'<path>' is a named pipe, not a regular file"); -1 with the system's
 * reason ("No such file or directory") when it cannot be looked at. For
 * readers that open a path in another way (Lua's io.open): a path swapped
 * for a pipe after this look can still block them. */
int gptoss_regular_file(const char *path, char *why);

/* The length of path without its trailing slashes ("/" keeps its one). */
size_t gptoss_path_length(const char *path);
/* dir/name (malloc'd; "out/" and "out" give "out/name"), NULL when memory is short. */
char *gptoss_path_join(const char *dir, const char *name);

#endif
