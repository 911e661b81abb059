/* Reading a checkpoint directory (docs/checkpoints.md): its shards, checked
 * against the index when there is one, and each course tensor's parts taken
 * from them into the model's sources, which stay in the mapped files. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "checkpoint.h"

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint_tensors.h"
#include "regular_file.h"

static void format_shape(char *buf, size_t len, int ndim, const int64_t *dims) {
    size_t at = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (at < len)
        snprintf(buf + at, len - at, "]");
}

static gptoss_status out_of_memory(char *err, const char *what) {
    return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for %s", what);
}

/* Whether path is dir or lies below it (both real paths). */
static int below(const char *path, const char *dir) {
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == 0 || (n == 1 && dir[0] == '/'));
}

/* Refuses path, a file of the checkpoint in dir, when it is a link to a file
 * outside the checkpoint (docs/checkpoints.md#links): its real path must lie
 * below dir's, or, for a checkpoint in a Hugging Face cache (a folder below a
 * repository's snapshots/REVISION/), below that repository's blobs/, where
 * huggingface_hub keeps the files its snapshots link to. A path that does
 * not resolve is left for the opening to report. */
static gptoss_status inside_checkpoint(const char *dir, const char *path, const char *what, char *err) {
    char *real = realpath(path, NULL), *root = real ? realpath(dir, NULL) : NULL;
    gptoss_status s = GPTOSS_OK;
    if (real && root && !below(real, root)) {
        char *snapshots = NULL; /* the last "/snapshots/" of root, followed by a revision */
        for (char *at = strstr(root, "/snapshots/"); at; at = strstr(at + 1, "/snapshots/"))
            snapshots = at[11] ? at : snapshots;
        if (snapshots)
            memcpy(snapshots, "/blobs", 7); /* no longer than what it replaces */
        if (!snapshots || !below(real, root))
            s = gptoss_fail(err, GPTOSS_E_INVALID,
                            "%s '%s' is a link to '%s', outside the checkpoint's directory: gptoss reads no file "
                            "a checkpoint links to outside it (docs/checkpoints.md#links)",
                            what, path, real);
    }
    free(real);
    free(root);
    return s;
}

/* dir/name (malloc'd into *path), refused unless it lies in the checkpoint. */
static gptoss_status checkpoint_file(const char *dir, const char *name, const char *what, char **path, char *err) {
    if (!(*path = gptoss_path_join(dir, name)))
        return out_of_memory(err, "the path of a checkpoint's file");
    gptoss_status s = inside_checkpoint(dir, *path, what, err);
    if (s) {
        free(*path);
        *path = NULL;
    }
    return s;
}

/* Adds the safetensors file dir/name to m->shards. */
static gptoss_status add_shard(gptoss_model *m, const char *dir, const char *name, char *err) {
    gptoss_st_file **grown = realloc(m->shards, sizeof *grown * (size_t)(m->n_shards + 1));
    if (!grown)
        return out_of_memory(err, "the list of a checkpoint's shards");
    m->shards = grown;
    char *path;
    gptoss_status s = checkpoint_file(dir, name, "checkpoint shard", &path, err);
    if (s)
        return s;
    s = gptoss_st_open(path, &m->shards[m->n_shards], err);
    free(path);
    if (!s)
        m->n_shards++;
    return s;
}

/* The shards an index names, each checked against its weight_map. */
static gptoss_status open_indexed(gptoss_model *m, const char *dir, const char *index, char *err) {
    json_error_t jerr;
    json_t *root;
    gptoss_status s =
        gptoss_json_load_regular(index, "checkpoint index", JSON_REJECT_DUPLICATES, &root, &jerr, err);
    if (s == GPTOSS_E_INVALID)
        return gptoss_fail(err, GPTOSS_E_INVALID, "checkpoint index '%s' is not JSON: %s (line %d)",
                           index, jerr.text, jerr.line);
    if (s)
        return s;
    json_t *map = json_object_get(root, "weight_map");
    const char *name;
    json_t *shard;
    if (!json_is_object(map))
        s = gptoss_fail(err, GPTOSS_E_INVALID,
                        "checkpoint index '%s' has no weight_map object {tensor: shard file}", index);
    json_object_foreach(map, name, shard) {
        if (s)
            break;
        const char *file = json_string_value(shard);
        if (!file || !*file || strchr(file, '/')) {
            s = gptoss_fail(err, GPTOSS_E_INVALID,
                            "checkpoint index '%s': weight_map['%s'] must be the name of a file in "
                            "the checkpoint directory",
                            index, name);
            break;
        }
        int known = 0;
        for (int i = 0; i < m->n_shards && !known; i++)
            known = strcmp(strrchr(m->shards[i]->path, '/') + 1, file) == 0;
        char why[GPTOSS_ERR_LEN];
        if (!known && (s = add_shard(m, dir, file, why)))
            gptoss_fail(err, s, "checkpoint index '%.150s' names shard '%.60s': %.280s", index, file,
                        why);
    }
    for (int i = 0; i < m->n_shards && !s; i++) { /* every shard's tensors, and only they */
        const gptoss_st_file *f = m->shards[i];
        const char *file = strrchr(f->path, '/') + 1;
        for (int k = 0; k < f->n_tensors && !s; k++) {
            const char *listed = json_string_value(json_object_get(map, f->tensors[k].name));
            if (!listed || strcmp(listed, file) != 0)
                s = gptoss_fail(err, GPTOSS_E_INVALID,
                                "checkpoint shard '%s' holds tensor '%s', which the index '%s' %s%s%s",
                                f->path, f->tensors[k].name, index,
                                listed ? "puts in '" : "does not list", listed ? listed : "",
                                listed ? "'" : "");
        }
    }
    json_object_foreach(map, name, shard) {
        if (s)
            break;
        int held = 0;
        for (int i = 0; i < m->n_shards && !held; i++)
            held = strcmp(strrchr(m->shards[i]->path, '/') + 1, json_string_value(shard)) == 0 &&
                   gptoss_st_find(m->shards[i], name);
        if (!held)
            s = gptoss_fail(err, GPTOSS_E_INVALID,
                            "checkpoint index '%s' puts tensor '%s' in '%s', which does not hold it",
                            index, name, json_string_value(shard));
    }
    json_decref(root);
    return s;
}

/* Opens the shards: the index's, or model.safetensors. *where (malloc'd)
 * is the file that lists the tensors, for messages. */
static gptoss_status open_shards(gptoss_model *m, const char *dir, char **where, char *err) {
    char *index = gptoss_path_join(dir, GPTOSS_CHECKPOINT_INDEX_FILE);
    char *single = gptoss_path_join(dir, GPTOSS_CHECKPOINT_SINGLE_FILE);
    struct stat st;
    gptoss_status s;
    *where = NULL;
    if (!index || !single) {
        s = out_of_memory(err, "the paths of a checkpoint's files");
    } else if (stat(index, &st) == 0) {
        s = inside_checkpoint(dir, index, "checkpoint index", err);
        if (!s)
            s = open_indexed(m, dir, index, err);
        *where = index, index = NULL;
    } else if (stat(single, &st) == 0) {
        s = add_shard(m, dir, GPTOSS_CHECKPOINT_SINGLE_FILE, err);
        *where = single, single = NULL;
    } else {
        s = gptoss_fail(err, GPTOSS_E_IO, "checkpoint '%s' has neither %s nor %s", dir,
                        GPTOSS_CHECKPOINT_SINGLE_FILE, GPTOSS_CHECKPOINT_INDEX_FILE);
    }
    free(index);
    free(single);
    return s;
}

static gptoss_st_tensor *find(const gptoss_model *m, const char *name, const char **file) {
    for (int i = 0; i < m->n_shards; i++) {
        gptoss_st_tensor *t = gptoss_st_find(m->shards[i], name);
        if (t) {
            *file = m->shards[i]->path;
            return t;
        }
    }
    return NULL;
}

/* The tensor of that name, of one of the dtypes (up to 2) and this shape. */
static gptoss_status take(const gptoss_model *m, const char *where, const char *name,
                          const gptoss_st_dtype *dtypes, const gptoss_checkpoint_shape *want,
                          gptoss_st_tensor **out, char *err) {
    const char *file;
    gptoss_st_tensor *t = find(m, name, &file);
    if (!t)
        return gptoss_fail(err, GPTOSS_E_INVALID, "checkpoint '%s': tensor '%s' is missing from '%s'",
                           m->path, name, where);
    if (t->dtype != dtypes[0] && t->dtype != dtypes[1])
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "checkpoint file '%s': tensor '%s' has dtype %s; gpt-oss needs %s%s%s", file,
                           name, t->dtype_name, gptoss_st_dtype_name(dtypes[0]),
                           dtypes[1] != dtypes[0] ? " or " : "",
                           dtypes[1] != dtypes[0] ? gptoss_st_dtype_name(dtypes[1]) : "");
    int same = t->ndim == want->ndim;
    for (int i = 0; i < want->ndim && same; i++)
        same = t->shape[i] == want->dims[i];
    if (!same) {
        char got[128], need[128];
        format_shape(got, sizeof got, t->ndim, t->shape);
        format_shape(need, sizeof need, want->ndim, want->dims);
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "checkpoint file '%s': tensor '%s' has shape %s; the config makes it %s",
                           file, name, got, need);
    }
    t->used = 1;
    *out = t;
    return GPTOSS_OK;
}

/* Fills m->source from the shards: every part present with its dtype and
 * shape, and no tensor left over. */
static gptoss_status take_tensors(gptoss_model *m, const gptoss_checkpoint_names *ln, const char *where,
                                  char *err) {
    static const gptoss_st_dtype dense[2] = {GPTOSS_ST_BF16, GPTOSS_ST_F32};
    static const gptoss_st_dtype u8[2] = {GPTOSS_ST_U8, GPTOSS_ST_U8};
    int n = 0;
    gptoss_checkpoint_part *parts = gptoss_checkpoint_parts(m, ln, &n);
    gptoss_piece *pieces = parts ? calloc((size_t)n, sizeof *pieces) : NULL;
    if (!parts || !pieces) {
        free(parts);
        free(pieces);
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for the tensor table of %d layers",
                           m->config.n_layers);
    }
    m->source[0].piece = pieces; /* freed with the model */
    gptoss_status s = GPTOSS_OK;
    for (int i = 0; i < n && !s; i++) {
        const gptoss_checkpoint_part *q = &parts[i];
        gptoss_source *src = &m->source[q->tensor];
        if (!src->n)
            src->piece = &pieces[i];
        gptoss_piece *p = &src->piece[src->n++];
        p->first = q->first;
        p->count = q->count;
        gptoss_st_tensor *t, *scales;
        if (gptoss_checkpoint_is_mxfp4(q->tensor)) {
            char name[GPTOSS_CHECKPOINT_NAME_LEN + 16];
            snprintf(name, sizeof name, "%s%s", q->name, ln->blocks);
            if (!(s = take(m, where, name, u8, &q->blocks, &t, err))) {
                snprintf(name, sizeof name, "%s%s", q->name, ln->scales);
                s = take(m, where, name, u8, &q->scales, &scales, err);
            }
            if (!s) {
                p->kind = GPTOSS_PIECE_MXFP4;
                p->data = t->data;
                p->scales = scales->data;
                p->row = q->dense.dims[2];
            }
        } else if (!(s = take(m, where, q->name, dense, &q->dense, &t, err))) {
            p->kind = t->dtype == GPTOSS_ST_BF16 ? GPTOSS_PIECE_BF16 : GPTOSS_PIECE_F32;
            p->data = t->data;
        }
    }
    for (int i = 0; i < m->n_shards && !s; i++)
        for (int k = 0; k < m->shards[i]->n_tensors && !s; k++)
            if (!m->shards[i]->tensors[k].used)
                s = gptoss_fail(err, GPTOSS_E_INVALID,
                                "checkpoint file '%s': unexpected tensor '%s' (not one of a %d-layer "
                                "gpt-oss's)",
                                m->shards[i]->path, m->shards[i]->tensors[k].name,
                                m->config.n_layers);
    free(parts);
    return s;
}

/* The tensors the config makes, counted, against those the shards hold: a
 * config of 10^8 layers is refused here, before a table of its parts is
 * allocated. Every tensor held must be taken, so more wanted than held
 * always fails. */
static gptoss_status check_count(const gptoss_model *m, const char *config_path, const char *const *names,
                                 const char *where, char *err) {
    uint64_t wanted, held = 0;
    gptoss_checkpoint_count(m, gptoss_checkpoint_names_of(m->format), &wanted);
    for (int i = 0; i < m->n_shards; i++)
        held += (uint64_t)m->shards[i]->n_tensors;
    if (wanted <= held)
        return GPTOSS_OK;
    return gptoss_fail(err, GPTOSS_E_INVALID,
                       "checkpoint config '%s': %s = %d makes %llu tensors, more than the %llu the "
                       "checkpoint holds ('%s')",
                       config_path, gptoss_field_name(names, offsetof(gptoss_config, n_layers)),
                       m->config.n_layers, (unsigned long long)wanted, (unsigned long long)held, where);
}

gptoss_status gptoss_checkpoint_open(const char *dir, gptoss_model **out, char *err) {
    char *config_path;
    gptoss_status s = checkpoint_file(dir, "config.json", "checkpoint config", &config_path, err);
    if (s)
        return s;
    gptoss_format f;
    gptoss_config c;
    const char *names[GPTOSS_N_FIELDS];
    s = gptoss_checkpoint_config_read(config_path, &f, &c, names, err);
    gptoss_model *m = NULL;
    char why[GPTOSS_ERR_LEN];
    if (!s && (s = gptoss_model_new(&c, names, f, &m, why)))
        gptoss_fail(err, s, "checkpoint config '%.200s': %.300s", config_path, why);
    char *where = NULL;
    if (!s && !(m->path = strdup(dir)))
        s = out_of_memory(err, "the checkpoint's path");
    if (!s)
        s = open_shards(m, dir, &where, err);
    if (!s)
        s = check_count(m, config_path, names, where, err);
    if (!s)
        s = take_tensors(m, gptoss_checkpoint_names_of(f), where, err);
    free(where);
    free(config_path);
    if (s) {
        gptoss_model_free(m);
        return s;
    }
    *out = m;
    return GPTOSS_OK;
}
