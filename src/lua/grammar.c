/* gptoss.grammar: grammars from JSON schemas, regexes and EBNF, and
 * g:matcher(tokenizer). A tokenizer's vocabulary trie is built once and
 * kept for as long as the tokenizer lives (a registry table with weak
 * keys); a grammar keeps, per vocabulary, the constraint whose cache its
 * matchers share (its user value: a table with weak keys). */
#include <stdio.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "binding.h"

#define VOCAB_MT "gptoss.vocab"
#define CONSTRAINT_MT "gptoss.constraint"
#define VOCABS "gptoss.grammar_vocabs"

/* user values: 1 the constraints of the vocabularies it was matched against */
typedef struct {
    gptoss_lua_object obj;
    gptoss_grammar *g;
} lua_grammar;

typedef struct {
    gptoss_lua_object obj;
    gptoss_vocab *v;
} vocab_holder;

typedef struct {
    gptoss_lua_object obj;
    gptoss_constraint *c;
} constraint_holder;

static gptoss_grammar *check_grammar(lua_State *L, int idx) {
    return ((lua_grammar *)gptoss_lua_check(L, idx, GPTOSS_GRAMMAR_MT, NULL))->g;
}

/* Pushes a grammar object, compiled by the function the kind names. */
static int new_grammar(lua_State *L, const char *fn, const char *text, size_t len, int whitespace) {
    lua_grammar *u = gptoss_lua_new(L, GPTOSS_GRAMMAR_MT, sizeof *u, 1);
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_setiuservalue(L, -2, 1);
    char err[GPTOSS_ERR_LEN];
    gptoss_status st = !strcmp(fn, "regex")  ? gptoss_grammar_regex(text, len, &u->g, err)
                       : !strcmp(fn, "ebnf") ? gptoss_grammar_ebnf(text, len, &u->g, err)
                                             : gptoss_grammar_json_schema(text, len, whitespace, &u->g, err);
    if (st)
        return luaL_error(L, "%s: %s", fn, err);
    return 1;
}

/* gptoss.core.grammar_json_schema(schema [, {whitespace = N}]): schema a
 * table (or boolean) or a JSON text */
int gptoss_lua_grammar_json_schema(lua_State *L) {
    static const char *const known[] = {"whitespace", NULL};
    lua_Integer whitespace = 0;
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        gptoss_opt_known(L, 2, "json_schema", known);
        whitespace = gptoss_opt_integer(L, 2, "json_schema", "whitespace", 0);
        if (whitespace < 0 || whitespace > GPTOSS_JSON_MAX_WHITESPACE)
            return luaL_error(L, "json_schema: whitespace must be within 0..%d (got %I)", GPTOSS_JSON_MAX_WHITESPACE,
                              whitespace);
    }
    int t = lua_type(L, 1);
    if (t != LUA_TSTRING && t != LUA_TTABLE && t != LUA_TBOOLEAN)
        return luaL_error(L, "json_schema: schema must be a table or a JSON text (got %s)", luaL_typename(L, 1));
    size_t len;
    const char *text = t == LUA_TSTRING ? lua_tolstring(L, 1, &len) : gptoss_lua_json_text(L, 1, "json_schema", "schema", &len);
    return new_grammar(L, "json_schema", text, len, (int)whitespace);
}

/* gptoss.core.grammar_regex(pattern) */
int gptoss_lua_grammar_regex(lua_State *L) {
    size_t len;
    const char *text = luaL_checklstring(L, 1, &len);
    return new_grammar(L, "regex", text, len, 0);
}

/* gptoss.core.grammar_ebnf(text) */
int gptoss_lua_grammar_ebnf(lua_State *L) {
    size_t len;
    const char *text = luaL_checklstring(L, 1, &len);
    return new_grammar(L, "ebnf", text, len, 0);
}

/* Pushes the vocabulary of the tokenizer at idx, built the first time. */
static void push_vocab(lua_State *L, int idx) {
    lua_getfield(L, LUA_REGISTRYINDEX, VOCABS);
    lua_pushvalue(L, idx);
    if (lua_rawget(L, -2) != LUA_TNIL) {
        lua_remove(L, -2);
        return;
    }
    lua_pop(L, 1);
    vocab_holder *h = gptoss_lua_new(L, VOCAB_MT, sizeof *h, 0);
    char err[GPTOSS_ERR_LEN];
    if (gptoss_vocab_new(gptoss_check_tokenizer(L, idx, "grammar:matcher"), &h->v, err))
        luaL_error(L, "grammar:matcher: %s", err);
    lua_pushvalue(L, idx);
    lua_pushvalue(L, -2);
    lua_rawset(L, -4);
    lua_remove(L, -2);
}

/* Pushes the constraint of the grammar at 1 and the vocabulary on top
 * (which it replaces), made the first time. */
static gptoss_constraint *push_constraint(lua_State *L) {
    lua_getiuservalue(L, 1, 1);
    lua_pushvalue(L, -2);
    if (lua_rawget(L, -2) == LUA_TNIL) {
        lua_pop(L, 1);
        constraint_holder *h = gptoss_lua_new(L, CONSTRAINT_MT, sizeof *h, 0);
        vocab_holder *v = gptoss_lua_check(L, -3, VOCAB_MT, "grammar:matcher");
        char err[GPTOSS_ERR_LEN];
        if (gptoss_constraint_new(check_grammar(L, 1), v->v, &h->c, err))
            luaL_error(L, "grammar:matcher: %s", err);
        lua_pushvalue(L, -3);
        lua_pushvalue(L, -2);
        lua_rawset(L, -4);
    }
    lua_replace(L, -3);
    lua_pop(L, 1);
    return ((constraint_holder *)gptoss_lua_check(L, -1, CONSTRAINT_MT, "grammar:matcher"))->c;
}

/* the ids of the options' end_ids into a userdata it pushes; *n of them */
static int32_t *read_end_ids(lua_State *L, int idx, int *n) {
    *n = 0;
    if (lua_isnoneornil(L, idx)) {
        lua_pushnil(L);
        return NULL;
    }
    luaL_checktype(L, idx, LUA_TTABLE);
    static const char *const known[] = {"end_ids", NULL};
    gptoss_opt_known(L, idx, "grammar:matcher", known);
    lua_getfield(L, idx, "end_ids");
    if (lua_isnil(L, -1))
        return NULL;
    if (!lua_istable(L, -1))
        luaL_error(L, "grammar:matcher: end_ids must be a list of token ids (got %s)", luaL_typename(L, -1));
    lua_Integer count = luaL_len(L, -1);
    if (count < 0 || count > 65536)
        luaL_error(L, "grammar:matcher: end_ids has %I entries (at most 65536)", count);
    int32_t *ids = lua_newuserdatauv(L, (size_t)(count ? count : 1) * sizeof *ids, 0);
    for (lua_Integer i = 1; i <= count; i++) {
        int ok;
        lua_geti(L, -2, i);
        lua_Integer id = lua_tointegerx(L, -1, &ok);
        if (!ok || id < INT32_MIN || id > INT32_MAX)
            luaL_error(L, "grammar:matcher: end_ids[%I] must be an integer token id (got %s)", i, luaL_tolstring(L, -1, NULL));
        ids[i - 1] = (int32_t)id;
        lua_pop(L, 1);
    }
    lua_remove(L, -2);
    *n = (int)count;
    return ids;
}

/* g:matcher(tokenizer [, {end_ids = {...}}]) -> a matcher at the output's start */
static int grammar_matcher(lua_State *L) {
    check_grammar(L, 1);
    gptoss_check_tokenizer(L, 2, "grammar:matcher");
    int n;
    lua_settop(L, 3);
    const int32_t *ids = read_end_ids(L, 3, &n); /* its userdata at 4 */
    push_vocab(L, 2);
    push_constraint(L);
    gptoss_matcher **m = gptoss_lua_new_matcher(L, 1, 2);
    gptoss_constraint *c = ((constraint_holder *)gptoss_lua_check(L, -2, CONSTRAINT_MT, "grammar:matcher"))->c;
    char err[GPTOSS_ERR_LEN];
    if (gptoss_matcher_new(c, ids, n, m, err))
        return luaL_error(L, "grammar:matcher: %s", err);
    return 1;
}

static int grammar_get(lua_State *L) {
    const gptoss_grammar *g = check_grammar(L, 1);
    const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
    if (!strcmp(k, "kind"))
        lua_pushstring(L, gptoss_grammar_kind(g));
    else if (!strcmp(k, "rules"))
        lua_pushinteger(L, gptoss_grammar_rules(g));
    else if (!strcmp(k, "states"))
        lua_pushinteger(L, gptoss_grammar_states(g));
    else if (!strcmp(k, "counted_states"))
        lua_pushinteger(L, gptoss_grammar_counted_states(g));
    else
        return 0;
    return 1;
}

static int grammar_tostring(lua_State *L) {
    const gptoss_grammar *g = check_grammar(L, 1);
    lua_pushfstring(L, "gptoss.grammar(%s, %d rules, %d states)", gptoss_grammar_kind(g), gptoss_grammar_rules(g),
                    gptoss_grammar_states(g));
    return 1;
}

static int grammar_gc(lua_State *L) {
    lua_grammar *u = gptoss_lua_end(L, 1, GPTOSS_GRAMMAR_MT, GPTOSS_LUA_COLLECTED);
    if (u) {
        gptoss_grammar_release(u->g);
        u->g = NULL;
    }
    return 0;
}

static int vocab_gc(lua_State *L) {
    vocab_holder *h = gptoss_lua_end(L, 1, VOCAB_MT, GPTOSS_LUA_COLLECTED);
    if (h)
        gptoss_vocab_release(h->v);
    return 0;
}

static int constraint_gc(lua_State *L) {
    constraint_holder *h = gptoss_lua_end(L, 1, CONSTRAINT_MT, GPTOSS_LUA_COLLECTED);
    if (h)
        gptoss_constraint_release(h->c);
    return 0;
}

/* gptoss.core.pcre2_full_match(pattern, subject) -> whether PCRE2 (UTF)
 * matches the whole subject: the independent check of the regex specs */
int gptoss_lua_pcre2_full_match(lua_State *L) {
    size_t plen, slen;
    const char *pattern = luaL_checklstring(L, 1, &plen), *subject = luaL_checklstring(L, 2, &slen);
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, plen, PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &code, &at, NULL);
    if (!re) {
        PCRE2_UCHAR why[160];
        pcre2_get_error_message(code, why, sizeof why);
        return luaL_error(L, "pcre2_full_match: offset %d: %s", (int)at, (const char *)why);
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = md ? pcre2_match(re, (PCRE2_SPTR)subject, slen, 0, 0, md, NULL) : PCRE2_ERROR_NOMEMORY;
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
        return luaL_error(L, "pcre2_full_match: matching failed (PCRE2 error %d)", rc);
    lua_pushboolean(L, rc >= 0);
    return 1;
}

void gptoss_open_grammar(lua_State *L) {
    static const luaL_Reg methods[] = {{"matcher", grammar_matcher}, {NULL, NULL}};
    static const luaL_Reg meta[] = {{"__gc", grammar_gc}, {"__tostring", grammar_tostring}, {NULL, NULL}};
    static const gptoss_lua_class_def grammar = {GPTOSS_GRAMMAR_MT, methods, grammar_get, meta};
    gptoss_lua_class(L, &grammar);
    static const luaL_Reg vocab_meta[] = {{"__gc", vocab_gc}, {NULL, NULL}};
    static const gptoss_lua_class_def vocab = {VOCAB_MT, NULL, NULL, vocab_meta};
    gptoss_lua_class(L, &vocab);
    static const luaL_Reg constraint_meta[] = {{"__gc", constraint_gc}, {NULL, NULL}};
    static const gptoss_lua_class_def constraint = {CONSTRAINT_MT, NULL, NULL, constraint_meta};
    gptoss_lua_class(L, &constraint);
    lua_newtable(L); /* tokenizer -> its vocabulary, for as long as the tokenizer lives */
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, VOCABS);
}
