/* What the JSON schema reader's two files share (grammar_schema.c: the
 * structure, grammar_schema_scalar.c: strings and numbers). */
#ifndef GPTOSS_GRAMMAR_SCHEMA_H
#define GPTOSS_GRAMMAR_SCHEMA_H

#include <jansson.h>

#include "grammar_internal.h"

/* a rule made once and found again by its key: "#" and a JSON pointer for
 * a $ref's target ("#" alone is the root), "string:" and the keywords for
 * a constrained string */
typedef struct {
    const char *key;
    int rule;
} gm_schema_memo;

typedef struct {
    gm_builder *b;
    json_t *root;
    int whitespace;
    const char *name; /* the root's path ("$") */
    /* rules every schema of the document shares, -1 until first needed */
    int string_rule, number_rule, integer_rule, value_rule;
    gm_schema_memo *memo;
    int nmemo, cap;
} gm_schema;

/* the rule made for key, or -1 */
int gm_schema_recall(const gm_schema *s, const char *key);
/* a new rule named name, remembered under key; -1 on failure */
int gm_schema_remember(gm_schema *s, const char *key, const char *name);

/* the kinds of type-specific keywords, as bits */
enum { GM_ANY_KW = 0, GM_OBJECT_KW = 1, GM_ARRAY_KW = 2, GM_STRING_KW = 4, GM_NUMBER_KW = 8 };
/* Checks that each keyword of node is known and supported;
 * returns the kinds present, -1 after an error (grammar_schema_keywords.c). */
int gm_schema_keywords(gm_schema *s, json_t *node, const char *path);
/* A keyword beside self ($ref, anyOf, enum or const) other than
 * annotations (and, with type_ok, type and the other of enum/const), or NULL. */
const char *gm_schema_sibling(json_t *node, const char *self, int type_ok);

/* The expression of the values a schema allows; path names it in errors. */
gm_ast *gm_schema_value(gm_schema *s, json_t *node, const char *path, int depth);
/* A count keyword (minLength, maxItems, ...): >= 0, -1 when absent, -2 after an error. */
int gm_schema_count(gm_schema *s, json_t *node, const char *key, const char *path);
/* JSON whitespace as the options bound it */
gm_ast *gm_schema_ws(gm_schema *s);
/* A shared rule (one of gm_schema's *_rule fields), made from body the first time. */
gm_ast *gm_schema_shared(gm_schema *s, int *rule, const char *name, gm_ast *(*body)(gm_schema *s));
/* Any JSON string / number / integer, unconstrained (the shared rules' bodies). */
gm_ast *gm_schema_any_string(gm_schema *s);
gm_ast *gm_schema_any_number(gm_schema *s);
gm_ast *gm_schema_any_integer(gm_schema *s);
/* A string or number schema with its keywords (the type's own; the caller checked the rest). */
gm_ast *gm_schema_string(gm_schema *s, json_t *node, const char *path);
gm_ast *gm_schema_number(gm_schema *s, json_t *node, const char *path, int integer);

#endif
