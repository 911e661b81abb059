/* JSON schemas, OpenAI's strict-mode subset (docs/structured.md#json-schemas):
 * each schema becomes the expression of the JSON texts of its values.
 * Objects write their properties in the schema's order (required ones
 * always, optional ones or not); $ref targets become rules of their own, so
 * that references may recurse; strings, numbers and any-value are rules
 * shared by the whole document (grammar_schema_scalar.c). Keywords the
 * grammar cannot enforce are refused by name, never ignored
 * (grammar_schema_keywords.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_schema.h"

/* the types, as bits, in the order alternatives are written */
static const char *const TYPES[] = {"null", "boolean", "integer", "number", "string", "array", "object", NULL};
enum { T_NULL = 1, T_BOOLEAN = 2, T_INTEGER = 4, T_NUMBER = 8, T_STRING = 16, T_ARRAY = 32, T_OBJECT = 64 };

gm_ast *gm_schema_ws(gm_schema *s) {
    static const gm_range WS[] = {{'\t', '\n'}, {'\r', '\r'}, {' ', ' '}};
    if (!s->whitespace)
        return gm_node(s->b, GM_EMPTY);
    return gm_repeat(s->b, gm_chars(s->b, WS, 3), 0, s->whitespace);
}

gm_ast *gm_schema_shared(gm_schema *s, int *rule, const char *name, gm_ast *(*body)(gm_schema *s)) {
    if (*rule < 0) {
        if ((*rule = gm_rule_add(s->b, name, 0)) < 0)
            return NULL;
        gm_ast *x = body(s); /* may refer to *rule: it exists already */
        if (!x)
            return NULL;
        s->b->rules[*rule].body = x;
    }
    return gm_ref(s->b, *rule);
}

/* a sequence of the parts, the whitespace marker WS standing for gm_schema_ws */
#define WS ((gm_ast *)&ws_marker)
static const int ws_marker = 0;
static gm_ast *seq(gm_schema *s, gm_ast *const *parts, int n) {
    gm_ast *x = gm_node(s->b, GM_SEQ);
    for (int i = 0; i < n; i++)
        x = gm_add(s->b, x, parts[i] == WS ? gm_schema_ws(s) : parts[i]);
    return x;
}
#define SEQ(s, ...) seq(s, (gm_ast *const[]){__VA_ARGS__}, (int)(sizeof((gm_ast *const[]){__VA_ARGS__}) / sizeof(gm_ast *)))

/* open, then items (none, one, or more with ", " between), then close */
static gm_ast *list(gm_schema *s, const char *open, gm_ast *item, int min, int max, const char *close) {
    gm_builder *b = s->b;
    gm_ast *more = gm_repeat(b, SEQ(s, WS, gm_literal(b, ","), WS, item), min > 1 ? min - 1 : 0, max < 0 ? GM_UNBOUNDED : max - 1);
    gm_ast *items = SEQ(s, item, more);
    if (min == 0)
        items = max == 0 ? gm_node(b, GM_EMPTY) : gm_add(b, gm_add(b, gm_node(b, GM_ALT), items), gm_node(b, GM_EMPTY));
    return SEQ(s, gm_literal(b, open), WS, items, WS, gm_literal(b, close));
}

/* any JSON value: the shared value rule's body */
static gm_ast *any_value(gm_schema *s) {
    gm_builder *b = s->b;
    gm_ast *value = gm_ref(b, s->value_rule);
    gm_ast *key = gm_schema_shared(s, &s->string_rule, "a JSON string", gm_schema_any_string);
    gm_ast *member = SEQ(s, key, WS, gm_literal(b, ":"), WS, value);
    gm_ast *alt = gm_node(b, GM_ALT);
    alt = gm_add(b, alt, list(s, "{", member, 0, GM_UNBOUNDED, "}"));
    alt = gm_add(b, alt, list(s, "[", value, 0, GM_UNBOUNDED, "]"));
    alt = gm_add(b, alt, key);
    alt = gm_add(b, alt, gm_schema_shared(s, &s->number_rule, "a JSON number", gm_schema_any_number));
    for (int i = 0; i < 3; i++)
        alt = gm_add(b, alt, gm_literal(b, (const char *[]){"true", "false", "null"}[i]));
    return alt;
}

static gm_ast *any(gm_schema *s) { return gm_schema_shared(s, &s->value_rule, "a JSON value", any_value); }

/* a value written as JSON, compact */
static gm_ast *literal(gm_schema *s, json_t *v) {
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!text)
        return gm_fail_memory(s->b);
    gm_ast *x = gm_literal(s->b, text);
    free(text);
    return x;
}

/* the type bits a JSON value has */
static int type_of(json_t *v) {
    switch (json_typeof(v)) {
    case JSON_NULL: return T_NULL;
    case JSON_TRUE: case JSON_FALSE: return T_BOOLEAN;
    case JSON_INTEGER: return T_INTEGER | T_NUMBER;
    case JSON_REAL: return T_NUMBER | (json_real_value(v) == floor(json_real_value(v)) ? T_INTEGER : 0);
    case JSON_STRING: return T_STRING;
    case JSON_ARRAY: return T_ARRAY;
    default: return T_OBJECT;
    }
}

/* enum or const: the values given, those of the schema's types */
static gm_ast *values(gm_schema *s, json_t *node, const char *path, int types) {
    json_t *c = json_object_get(node, "const"), *e = json_object_get(node, "enum");
    if (c && e)
        return gm_fail(s->b, "%s: give enum or const, not both", path);
    if (e && (!json_is_array(e) || !json_array_size(e)))
        return gm_fail(s->b, "%s.enum: must be a non-empty array", path);
    gm_ast *alt = gm_node(s->b, GM_ALT);
    size_t i;
    json_t *v;
    if (c && (type_of(c) & types))
        alt = gm_add(s->b, alt, literal(s, c));
    json_array_foreach(e, i, v) if (type_of(v) & types) alt = gm_add(s->b, alt, literal(s, v));
    if (alt && alt->n == 0)
        return gm_fail(s->b, "%s.%s: no value is of the schema's type", path, c ? "const" : "enum");
    return alt;
}

int gm_schema_recall(const gm_schema *s, const char *key) {
    for (int i = 0; i < s->nmemo; i++)
        if (!strcmp(s->memo[i].key, key))
            return s->memo[i].rule;
    return -1;
}

int gm_schema_remember(gm_schema *s, const char *key, const char *name) {
    if (gm_grow(s->b, &s->memo, s->nmemo, &s->cap, sizeof *s->memo))
        return -1;
    int rule = gm_rule_add(s->b, name, 0);
    const char *copy = gm_strdup(s->b, key);
    if (rule < 0 || !copy)
        return -1;
    s->memo[s->nmemo++] = (gm_schema_memo){copy, rule};
    return rule;
}

/* the rule of a JSON pointer's target (made the first time) */
static gm_ast *reference(gm_schema *s, json_t *ref, const char *path, int depth) {
    const char *text = json_string_value(ref);
    if (!text || text[0] != '#' || (text[1] && text[1] != '/'))
        return gm_fail(s->b, "%s.$ref: only references into the same schema (#, #/$defs/name) are supported", path);
    int rule = gm_schema_recall(s, text);
    if (rule >= 0)
        return gm_ref(s->b, rule);
    json_t *target = s->root;
    char name[GPTOSS_ERR_LEN];
    snprintf(name, sizeof name, "%s", s->name);
    for (const char *at = text + 1; target && *at == '/';) {
        const char *end = strchr(at + 1, '/');
        size_t len = end ? (size_t)(end - at - 1) : strlen(at + 1);
        char token[256];
        size_t n = 0;
        for (size_t k = 0; k < len && n + 1 < sizeof token; k++) { /* ~1 is '/', ~0 is '~' */
            char c = at[1 + k];
            token[n++] = c == '~' && k + 1 < len && (at[2 + k] == '0' || at[2 + k] == '1') ? (at[2 + k++] == '1' ? '/' : '~') : c;
        }
        token[n] = 0;
        snprintf(name + strlen(name), sizeof name - strlen(name), ".%s", token);
        target = json_is_array(target) ? json_array_get(target, strtoul(token, NULL, 10)) : json_object_get(target, token);
        at += 1 + len;
    }
    if (!target)
        return gm_fail(s->b, "%s.$ref: '%s' points at nothing in the schema", path, text);
    if ((rule = gm_schema_remember(s, text, name)) < 0)
        return NULL;
    gm_ast *body = gm_schema_value(s, target, s->b->rules[rule].name, depth + 1);
    if (!body)
        return NULL;
    s->b->rules[rule].body = body;
    return gm_ref(s->b, rule);
}

/* whether name is among the required ones (an array of strings, or an
 * empty object: Lua cannot tell an empty array from one) */
static int required(json_t *req, const char *name) {
    size_t i;
    json_t *v;
    json_array_foreach(req, i, v) if (!strcmp(json_string_value(v), name)) return 1;
    return 0;
}

static gm_ast *object(gm_schema *s, json_t *node, const char *path, int depth) {
    gm_builder *b = s->b;
    json_t *props = json_object_get(node, "properties"), *req = json_object_get(node, "required");
    json_t *extra = json_object_get(node, "additionalProperties");
    if (props && !json_is_object(props))
        return gm_fail(b, "%s.properties: must be an object", path);
    if (req && !json_is_array(req) && !(json_is_object(req) && !json_object_size(req)))
        return gm_fail(b, "%s.required: must be an array of property names", path);
    if (extra && !json_is_boolean(extra) && !json_is_object(extra))
        return gm_fail(b, "%s.additionalProperties: must be a boolean or a schema", path);
    size_t i;
    json_t *v;
    json_array_foreach(req, i, v) {
        if (!json_is_string(v))
            return gm_fail(b, "%s.required[%zu]: must be a string", path, i);
        if (!json_object_get(props, json_string_value(v)))
            return gm_fail(b, "%s.required[%zu]: '%s' is not among the properties", path, i, json_string_value(v));
    }
    if (!json_object_size(props)) { /* no properties listed: a map of the additional ones */
        if (json_is_false(extra))
            return SEQ(s, gm_literal(b, "{"), WS, gm_literal(b, "}"));
        gm_ast *value = json_is_object(extra) ? gm_schema_value(s, extra, gm_printf(b, "%s.additionalProperties", path), depth + 1) : any(s);
        gm_ast *key = gm_schema_shared(s, &s->string_rule, "a JSON string", gm_schema_any_string);
        return list(s, "{", SEQ(s, key, WS, gm_literal(b, ":"), WS, value), 0, GM_UNBOUNDED, "}");
    }
    gm_ast *members = gm_node(b, GM_OBJECT);
    if (members)
        members->sep = SEQ(s, WS, gm_literal(b, ","), WS);
    const char *name;
    json_object_foreach(props, name, v) {
        json_t *key = json_string(name);
        gm_ast *k = key ? literal(s, key) : gm_fail_memory(b);
        json_decref(key);
        gm_ast *value = gm_schema_value(s, v, gm_printf(b, "%s.properties.%s", path, name), depth + 1);
        members = gm_add(b, members, SEQ(s, k, WS, gm_literal(b, ":"), WS, value));
        if (!members)
            return NULL;
        members->required[members->n - 1] = (uint8_t)required(req, name);
    }
    return SEQ(s, gm_literal(b, "{"), WS, members, WS, gm_literal(b, "}"));
}

static gm_ast *array(gm_schema *s, json_t *node, const char *path, int depth) {
    json_t *items = json_object_get(node, "items");
    int min = gm_schema_count(s, node, "minItems", path), max = gm_schema_count(s, node, "maxItems", path);
    if (min == -2 || max == -2)
        return NULL;
    if (min >= 0 && max >= 0 && min > max)
        return gm_fail(s->b, "%s.minItems: %d is above maxItems %d", path, min, max);
    if (items && !json_is_object(items) && !json_is_boolean(items))
        return gm_fail(s->b, "%s.items: must be a schema (tuples are not supported)", path);
    if (json_is_false(items) && min > 0)
        return gm_fail(s->b, "%s.items: false allows no item, yet minItems is %d", path, min);
    gm_ast *item;
    if (json_is_false(items))
        max = 0, item = gm_node(s->b, GM_EMPTY);
    else if (!items || json_is_true(items))
        item = any(s);
    else { /* a rule of its own: the list writes it many times */
        const char *name = gm_printf(s->b, "%s.items", path);
        int rule = gm_rule_add(s->b, name ? name : "", 0);
        gm_ast *body = rule < 0 ? NULL : gm_schema_value(s, items, name, depth + 1);
        if (!body)
            return NULL;
        s->b->rules[rule].body = body;
        item = gm_ref(s->b, rule);
    }
    return list(s, "[", item, min < 0 ? 0 : min, max, "]");
}

/* The types the schema allows, as bits: its "type", or what its keywords
 * imply (kinds), or every type (0 when it allows any value). */
static int types_of(gm_schema *s, json_t *node, const char *path, int kinds) {
    json_t *type = json_object_get(node, "type");
    if (!type) {
        static const int implied[] = {0, T_OBJECT, T_ARRAY, -1, T_STRING, -1, -1, -1, T_NUMBER};
        int t = kinds < 9 ? implied[kinds] : -1;
        if (t < 0)
            gm_fail(s->b, "%s: keywords of several types: give 'type'", path);
        return t;
    }
    int bits = 0;
    for (size_t i = 0; i < (json_is_array(type) ? json_array_size(type) : 1); i++) {
        json_t *t = json_is_array(type) ? json_array_get(type, i) : type;
        int k = 0;
        while (TYPES[k] && (!json_is_string(t) || strcmp(TYPES[k], json_string_value(t))))
            k++;
        if (!TYPES[k]) {
            gm_fail(s->b, "%s.type: must be one of null, boolean, integer, number, string, array, object or a list of them", path);
            return -1;
        }
        bits |= 1 << k;
    }
    if (!bits)
        gm_fail(s->b, "%s.type: an empty list allows no value", path);
    return bits ? bits : -1;
}

/* anyOf: the alternatives */
static gm_ast *any_of(gm_schema *s, json_t *choices, const char *path, int depth) {
    if (!json_is_array(choices) || !json_array_size(choices))
        return gm_fail(s->b, "%s.anyOf: must be a non-empty array of schemas", path);
    gm_ast *alt = gm_node(s->b, GM_ALT);
    size_t i;
    json_t *v;
    json_array_foreach(choices, i, v) alt = gm_add(s->b, alt, gm_schema_value(s, v, gm_printf(s->b, "%s.anyOf[%zu]", path, i), depth + 1));
    return alt;
}

gm_ast *gm_schema_value(gm_schema *s, json_t *node, const char *path, int depth) {
    if (!path || s->b->failed)
        return NULL;
    if (depth > GM_MAX_NESTING)
        return gm_fail(s->b, "%s: schemas nest too deeply (more than %d levels)", path, GM_MAX_NESTING);
    if (json_is_true(node))
        return any(s);
    if (!json_is_object(node))
        return gm_fail(s->b, "%s: %s", path, json_is_false(node) ? "the schema false allows no value" : "a schema must be an object or a boolean");
    int kinds = gm_schema_keywords(s, node, path);
    if (kinds < 0)
        return NULL;
    static const char *const ALONE[] = {"$ref", "anyOf", "enum", "const"};
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(node, ALONE[i]);
        const char *other = v ? gm_schema_sibling(node, ALONE[i], i >= 2) : NULL;
        if (other)
            return gm_fail(s->b, "%s: '%s' beside '%s' is not supported%s", path, other, ALONE[i],
                           i >= 2 ? ": list only the values that meet it" : "");
        if (v && i == 0)
            return reference(s, v, path, depth);
        if (v && i == 1)
            return any_of(s, v, path, depth);
    }
    int types = types_of(s, node, path, kinds);
    if (types < 0)
        return NULL;
    if (json_object_get(node, "enum") || json_object_get(node, "const"))
        return values(s, node, path, types ? types : -1);
    if (!types)
        return any(s);
    static const int KIND_TYPES[] = {0, T_OBJECT, T_ARRAY, 0, T_STRING, 0, 0, 0, T_NUMBER | T_INTEGER};
    for (int k = 1; k <= 8; k <<= 1)
        if ((kinds & k) && !(types & KIND_TYPES[k]))
            return gm_fail(s->b, "%s: it has keywords of type %s, which its 'type' does not allow", path,
                           k == GM_OBJECT_KW ? "object" : k == GM_ARRAY_KW ? "array" : k == GM_STRING_KW ? "string" : "number");
    gm_ast *alt = gm_node(s->b, GM_ALT);
    if (types & T_NULL)
        alt = gm_add(s->b, alt, gm_literal(s->b, "null"));
    if (types & T_BOOLEAN)
        alt = gm_add(s->b, gm_add(s->b, alt, gm_literal(s->b, "true")), gm_literal(s->b, "false"));
    if (types & (T_INTEGER | T_NUMBER))
        alt = gm_add(s->b, alt, gm_schema_number(s, node, path, !(types & T_NUMBER)));
    if (types & T_STRING)
        alt = gm_add(s->b, alt, gm_schema_string(s, node, path));
    if (types & T_ARRAY)
        alt = gm_add(s->b, alt, array(s, node, path, depth));
    if (types & T_OBJECT)
        alt = gm_add(s->b, alt, object(s, node, path, depth));
    return alt;
}

int gm_schema_rule(gm_builder *b, const char *text, size_t len, int whitespace, const char *name) {
    json_error_t error;
    json_t *root = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &error);
    if (!root) {
        gm_fail(b, "%s: the schema is not valid JSON: line %d, column %d: %s", name, error.line, error.column, error.text);
        return -1;
    }
    gm_schema s = {.b = b, .root = root, .whitespace = whitespace, .name = name,
                   .string_rule = -1, .number_rule = -1, .integer_rule = -1, .value_rule = -1};
    int rule = gm_schema_remember(&s, "#", name);
    if (rule >= 0) {
        gm_ast *body = gm_schema_value(&s, root, name, 0);
        if (body)
            b->rules[rule].body = body;
    }
    json_decref(root);
    return b->failed ? -1 : rule;
}
