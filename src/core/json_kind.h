/* What a JSON value is, in words, for messages about files whose JSON has
 * the wrong shape ("must be an integer (got a string)"). */
#ifndef GPTOSS_JSON_KIND_H
#define GPTOSS_JSON_KIND_H

#include <jansson.h>
#include <stdio.h>

static inline const char *gptoss_json_kind(const json_t *v) {
    if (!v)
        return "nothing";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* A string value quoted ("linear"), any other value by its kind. */
static inline const char *gptoss_json_describe(const json_t *v, char *buf, size_t len) {
    if (!json_is_string(v))
        return gptoss_json_kind(v);
    snprintf(buf, len, "\"%.60s\"", json_string_value(v));
    return buf;
}

#endif
