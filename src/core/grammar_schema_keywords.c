/* Which JSON schema keywords the grammar reads, which it refuses (and
 * why), and which say nothing about validity: an unknown or unsupported
 * keyword is an error naming it, never silently ignored. */
#include <string.h>

#include "grammar_schema.h"

/* keywords that say nothing about which values are valid */
static const char *const ANNOTATIONS[] = {"title", "description", "default", "examples", "$schema", "$id",
                                          "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                          "definitions", NULL};

/* the keywords read, by the kind of values they constrain */
static const struct {
    const char *key;
    int kind;
} KEYWORDS[] = {
    {"type", GM_ANY_KW},          {"enum", GM_ANY_KW},         {"const", GM_ANY_KW},
    {"anyOf", GM_ANY_KW},         {"$ref", GM_ANY_KW},         {"properties", GM_OBJECT_KW},
    {"required", GM_OBJECT_KW},   {"additionalProperties", GM_OBJECT_KW},
    {"items", GM_ARRAY_KW},       {"minItems", GM_ARRAY_KW},   {"maxItems", GM_ARRAY_KW},
    {"pattern", GM_STRING_KW},    {"format", GM_STRING_KW},    {"minLength", GM_STRING_KW},
    {"maxLength", GM_STRING_KW},  {"minimum", GM_NUMBER_KW},   {"maximum", GM_NUMBER_KW},
    {"exclusiveMinimum", GM_NUMBER_KW}, {"exclusiveMaximum", GM_NUMBER_KW},
};

#define CONDITIONAL "conditionals (if, then, else) are not supported"
#define DEPENDENCY "dependencies between properties are not supported"
#define COUNTING "not supported: a grammar cannot count matching items"
#define DYNAMIC "dynamic references are not supported: use $ref"
static const struct {
    const char *key, *why;
} REFUSED[] = {
    {"allOf", "merging schemas is not supported: write the merged schema"},
    {"oneOf", "exactly-one is not supported: use anyOf (the same where the choices cannot overlap)"},
    {"not", "negation is not supported: a grammar says what may be written, not what may not"},
    {"if", CONDITIONAL}, {"then", CONDITIONAL}, {"else", CONDITIONAL},
    {"patternProperties", "keys by pattern are not supported: list the properties"},
    {"propertyNames", "constraints on keys are not supported: list the properties"},
    {"dependentRequired", DEPENDENCY}, {"dependentSchemas", DEPENDENCY}, {"dependencies", DEPENDENCY},
    {"unevaluatedProperties", "not supported: use additionalProperties"},
    {"unevaluatedItems", "not supported: use items"}, {"prefixItems", "tuples are not supported: use an object"},
    {"contains", COUNTING}, {"minContains", COUNTING}, {"maxContains", COUNTING},
    {"uniqueItems", "not supported: a grammar cannot compare items with each other"},
    {"minProperties", "not supported: make properties required instead"},
    {"maxProperties", "not supported: list the properties"},
    {"multipleOf", "not supported: a grammar over digits cannot divide"},
    {"$anchor", "anchors are not supported: refer with #/$defs/..."},
    {"$dynamicRef", DYNAMIC}, {"$dynamicAnchor", DYNAMIC}, {"$recursiveRef", DYNAMIC}, {"$recursiveAnchor", DYNAMIC},
};

static int listed(const char *const *list, const char *key) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], key))
            return 1;
    return 0;
}

int gm_schema_keywords(gm_schema *s, json_t *node, const char *path) {
    int kinds = 0;
    const char *key;
    json_t *v;
    json_object_foreach(node, key, v) {
        if (listed(ANNOTATIONS, key) || (!strcmp(key, "uniqueItems") && json_is_false(v)))
            continue;
        size_t i = 0;
        while (i < sizeof KEYWORDS / sizeof *KEYWORDS && strcmp(KEYWORDS[i].key, key))
            i++;
        if (i < sizeof KEYWORDS / sizeof *KEYWORDS) {
            kinds |= KEYWORDS[i].kind;
            continue;
        }
        for (i = 0; i < sizeof REFUSED / sizeof *REFUSED; i++)
            if (!strcmp(REFUSED[i].key, key))
                return gm_fail(s->b, "%s.%s: %s", path, key, REFUSED[i].why), -1;
        return gm_fail(s->b, "%s: unknown keyword '%s'", path, key), -1;
    }
    return kinds;
}

const char *gm_schema_sibling(json_t *node, const char *self, int type_ok) {
    const char *key;
    json_t *v;
    json_object_foreach(node, key, v) if (strcmp(key, self) && !listed(ANNOTATIONS, key) &&
                                          !(type_ok && !strcmp(key, "type")) &&
                                          !(type_ok && !strcmp(key, self[0] == 'e' ? "const" : "enum"))) return key;
    return NULL;
}

