/* gptoss.tokenizer(path, {vocab_size=N}) and its streaming decoder. */
#include <stdio.h>
#include <string.h>

#include "../core/config.h"
#include "../core/tokenizer.h"
#include "../core/tokenizer_load.h"
#include "binding.h"

#define IDS_MT "gptoss.encode_ids"

typedef struct {
    gptoss_lua_object obj;
    gptoss_tokenizer *t;
} lua_tokenizer;

/* user values: 1 the tokenizer */
typedef struct {
    gptoss_lua_object obj; /* open for good: it holds nothing of its own */
    uint8_t pending[4]; /* the start of a UTF-8 character not yet complete */
    size_t n;
} lua_decoder;

gptoss_tokenizer *gptoss_check_tokenizer(lua_State *L, int idx, const char *fn) {
    return ((lua_tokenizer *)gptoss_lua_check(L, idx, GPTOSS_TOKENIZER_MT, fn))->t;
}

/* the 0-based token id at stack idx, range-checked; what names the value */
static int check_id(lua_State *L, const gptoss_tokenizer *t, int idx, const char *fn,
                    const char *what) {
    int ok;
    lua_Integer id = lua_tointegerx(L, idx, &ok);
    int v = gptoss_tokenizer_vocab_size(t);
    if (!ok)
        luaL_error(L, "%s: %s must be an integer token id (got %s)", fn, what,
                   luaL_tolstring(L, idx, NULL));
    if (id < 0 || id >= v)
        luaL_error(L, "%s: %s %I is out of range 0..%d", fn, what, id, v - 1);
    return (int)id;
}

/* The tokenizer whose pieces add_pieces adds: at idx, checked as fn names it
 * (check_tokenizer) */
typedef struct {
    int idx;
    const char *fn;
} piece_source;

/* Adds the piece of id to b, the tokenizer taken again after b has grown:
 * growing allocates, and a finaliser may collect it meanwhile. */
static void add_piece(lua_State *L, piece_source tok, int id, luaL_Buffer *b) {
    size_t len;
    gptoss_tokenizer_piece(gptoss_check_tokenizer(L, tok.idx, tok.fn), id, &len);
    char *room = luaL_prepbuffsize(b, len);
    memcpy(room, gptoss_tokenizer_piece(gptoss_check_tokenizer(L, tok.idx, tok.fn), id, &len), len);
    luaL_addsize(b, len);
}

/* Adds to b the piece of each id of the table, or of the single id, at idx
 * (tok taken for each id: reading the table runs its metamethods). */
static void add_pieces(lua_State *L, piece_source tok, int idx, const char *fn, luaL_Buffer *b) {
    if (lua_type(L, idx) != LUA_TTABLE) {
        add_piece(L, tok, check_id(L, gptoss_check_tokenizer(L, tok.idx, tok.fn), idx, fn, "id"), b);
        return;
    }
    lua_Integer n = luaL_len(L, idx);
    for (lua_Integer i = 1; i <= n; i++) {
        char what[48];
        snprintf(what, sizeof what, "ids[%lld]", (long long)i);
        lua_geti(L, idx, i); /* balanced before the buffer is touched again */
        int id = check_id(L, gptoss_check_tokenizer(L, tok.idx, tok.fn), -1, fn, what);
        lua_pop(L, 1);
        add_piece(L, tok, id, b);
    }
}

/* The ids of one encode call, freed by __gc if building their table raises. */
static int ids_gc(lua_State *L) {
    gptoss_ids_free(lua_touserdata(L, 1));
    return 0;
}

/* tok:encode(text [, {special=true, max_tokens=N, mode="course"|"o200k"}]) -> {ids} */
static int tokenizer_encode(lua_State *L) {
    gptoss_check_tokenizer(L, 1, NULL);
    size_t len;
    const char *text = luaL_checklstring(L, 2, &len);
    int special = 0;
    gptoss_split split = GPTOSS_SPLIT_COURSE;
    lua_Integer max_tokens = LUA_MAXINTEGER;
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        static const char *const known[] = {"special", "max_tokens", "mode", NULL};
        static const char *const modes[] = {"course", "o200k", NULL}; /* gptoss_split's order */
        gptoss_opt_known(L, 3, "tokenizer:encode", known);
        lua_getfield(L, 3, "special");
        special = lua_toboolean(L, -1);
        lua_pop(L, 1);
        split = (gptoss_split)gptoss_opt_choice(L, 3, "tokenizer:encode", "mode", modes, GPTOSS_SPLIT_COURSE);
        max_tokens = gptoss_opt_integer(L, 3, "tokenizer:encode", "max_tokens", max_tokens);
        if (max_tokens < 0)
            return luaL_error(L, "tokenizer:encode: max_tokens must be >= 0 (got %I)", max_tokens);
    }
    gptoss_ids *ids = lua_newuserdatauv(L, sizeof *ids, 0);
    memset(ids, 0, sizeof *ids);
    luaL_setmetatable(L, IDS_MT);
    char err[GPTOSS_ERR_LEN];
    const gptoss_tokenizer *t = gptoss_check_tokenizer(L, 1, NULL); /* the options ran Lua */
    if (gptoss_tokenizer_encode(t, (const uint8_t *)text, len, special, split, ids, err))
        return luaL_error(L, "tokenizer:encode: %s", err);
    size_t n = ids->n < (size_t)max_tokens ? ids->n : (size_t)max_tokens;
    if (n > INT32_MAX)
        return luaL_error(L, "tokenizer:encode: %zu tokens are too many for one table", n);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushinteger(L, ids->ids[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    gptoss_ids_free(ids);
    return 1;
}

/* tok:decode(ids | id) -> string */
static int tokenizer_decode(lua_State *L) {
    gptoss_check_tokenizer(L, 1, NULL);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    add_pieces(L, (piece_source){1, NULL}, 2, "tokenizer:decode", &b);
    luaL_pushresult(&b);
    return 1;
}

/* tok:piece(id) -> string */
static int tokenizer_piece(lua_State *L) {
    const gptoss_tokenizer *t = gptoss_check_tokenizer(L, 1, NULL);
    size_t len;
    const uint8_t *p = gptoss_tokenizer_piece(t, check_id(L, t, 2, "tokenizer:piece", "id"), &len);
    lua_pushlstring(L, (const char *)p, len);
    return 1;
}

/* tok:id(bytes) -> id or nil */
static int tokenizer_id(lua_State *L) {
    gptoss_check_tokenizer(L, 1, NULL);
    size_t len;
    const char *s = luaL_checklstring(L, 2, &len); /* a number converted allocates */
    int id = gptoss_tokenizer_find(gptoss_check_tokenizer(L, 1, NULL), (const uint8_t *)s, len);
    if (id < 0)
        lua_pushnil(L);
    else
        lua_pushinteger(L, id);
    return 1;
}

/* tok:entry(id) -> stored bytes, score (the file's record, undecoded) */
static int tokenizer_entry(lua_State *L) {
    const gptoss_tokenizer *t = gptoss_check_tokenizer(L, 1, NULL);
    size_t len;
    float score;
    const uint8_t *p =
        gptoss_tokenizer_entry(t, check_id(L, t, 2, "tokenizer:entry", "id"), &len, &score);
    lua_pushlstring(L, (const char *)p, len);
    lua_pushnumber(L, score);
    return 2;
}

/* tok:decoder() -> streaming decoder (keeps the tokenizer alive) */
static int tokenizer_decoder(lua_State *L) {
    gptoss_check_tokenizer(L, 1, NULL);
    gptoss_lua_new(L, GPTOSS_DECODER_MT, sizeof(lua_decoder), 1);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    return 1;
}

/* {endoftext=199999, ["return"]=200002, ...}: every special entry spelled
 * <|name|>, built once and kept as the tokenizer's user value */
static void push_special_table(lua_State *L, const gptoss_tokenizer *t) {
    lua_newtable(L);
    for (int id = 0; id < gptoss_tokenizer_vocab_size(t); id++) {
        if (!gptoss_tokenizer_is_special(t, id))
            continue;
        size_t n;
        const uint8_t *s = gptoss_tokenizer_entry(t, id, &n, NULL);
        if (n > 4 && memcmp(s, "<|", 2) == 0 && memcmp(s + n - 2, "|>", 2) == 0) {
            lua_pushlstring(L, (const char *)s + 2, n - 4);
            if (lua_rawget(L, -2) == LUA_TNIL) { /* the first id of a name wins */
                lua_pop(L, 1);
                lua_pushlstring(L, (const char *)s + 2, n - 4);
                lua_pushinteger(L, id);
                lua_rawset(L, -3);
            } else {
                lua_pop(L, 1);
            }
        }
    }
}

static int tokenizer_get(lua_State *L) {
    const gptoss_tokenizer *t = gptoss_check_tokenizer(L, 1, NULL);
    const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
    if (!k)
        return 0;
    if (strcmp(k, "vocab_size") == 0)
        lua_pushinteger(L, gptoss_tokenizer_vocab_size(t));
    else if (strcmp(k, "max_token_length") == 0)
        lua_pushinteger(L, gptoss_tokenizer_max_token_length(t));
    else if (strcmp(k, "special") == 0)
        lua_getiuservalue(L, 1, 1);
    else
        return 0;
    return 1;
}

static int tokenizer_gc(lua_State *L) {
    lua_tokenizer *u = gptoss_lua_end(L, 1, GPTOSS_TOKENIZER_MT, GPTOSS_LUA_COLLECTED);
    if (u) {
        gptoss_tokenizer_free(u->t);
        u->t = NULL;
    }
    return 0;
}

static int tokenizer_tostring(lua_State *L) {
    const gptoss_tokenizer *t = gptoss_check_tokenizer(L, 1, NULL);
    lua_pushfstring(L, "gptoss.tokenizer(vocab_size=%d, max_token_length=%d)",
                    gptoss_tokenizer_vocab_size(t), gptoss_tokenizer_max_token_length(t));
    return 1;
}

/* gptoss.core.tokenizer(path [, {vocab_size=N}]) */
int gptoss_lua_tokenizer(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    lua_Integer vocab = GPTOSS_VOCAB_SIZE;
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        static const char *const known[] = {"vocab_size", NULL};
        gptoss_opt_known(L, 2, "tokenizer", known);
        vocab = gptoss_opt_integer(L, 2, "tokenizer", "vocab_size", GPTOSS_VOCAB_SIZE);
        if (vocab < 1 || vocab > INT32_MAX)
            return luaL_error(L, "tokenizer: vocab_size must be within 1..%d (got %I)", INT32_MAX,
                              vocab);
    }
    lua_tokenizer *u = gptoss_lua_new(L, GPTOSS_TOKENIZER_MT, sizeof *u, 1);
    char err[GPTOSS_ERR_LEN];
    if (gptoss_tokenizer_open(path, (int)vocab, &u->t, err))
        return luaL_error(L, "%s", err);
    push_special_table(L, u->t);
    lua_setiuservalue(L, -2, 1);
    return 1;
}

/* ---- streaming decoder ---- */

/* Pushes the complete UTF-8 characters of s (n bytes: d's pending bytes and
 * what follows them) and keeps the rest pending in d. */
static int push_complete(lua_State *L, lua_decoder *d, const uint8_t *s, size_t n) {
    size_t ready = gptoss_utf8_complete_prefix(s, n);
    d->n = n - ready;
    memcpy(d->pending, s + ready, d->n);
    lua_pushlstring(L, (const char *)s, ready);
    return 1;
}

/* a piece this long or shorter, with the pending bytes, is joined on the C stack */
#define SHORT_PIECE 256

/* dec:add(id | ids) -> the text that is complete so far ("" while a UTF-8
 * character is still open). One id of a short piece (a stream's every
 * step) is joined on the C stack, its piece copied there before anything
 * allocates (a finaliser run by an allocation may close the tokenizer). */
static int decoder_add(lua_State *L) {
    lua_decoder *d = gptoss_lua_check(L, 1, GPTOSS_DECODER_MT, NULL);
    lua_settop(L, 2);
    lua_getiuservalue(L, 1, 1); /* 3: the tokenizer */
    const gptoss_tokenizer *t = gptoss_check_tokenizer(L, 3, "decoder:add");
    if (lua_type(L, 2) != LUA_TTABLE) {
        size_t len;
        const uint8_t *piece = gptoss_tokenizer_piece(t, check_id(L, t, 2, "decoder:add", "id"), &len);
        if (len <= SHORT_PIECE) {
            uint8_t joined[sizeof d->pending + SHORT_PIECE];
            memcpy(joined, d->pending, d->n);
            memcpy(joined + d->n, piece, len);
            return push_complete(L, d, joined, d->n + len);
        }
    }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addlstring(&b, (const char *)d->pending, d->n);
    add_pieces(L, (piece_source){3, "decoder:add"}, 2, "decoder:add", &b);
    luaL_pushresult(&b);
    size_t len;
    const uint8_t *s = (const uint8_t *)lua_tolstring(L, -1, &len);
    return push_complete(L, d, s, len);
}

/* dec:flush() -> whatever is held back (an incomplete character's bytes) */
static int decoder_flush(lua_State *L) {
    lua_decoder *d = gptoss_lua_check(L, 1, GPTOSS_DECODER_MT, NULL);
    lua_pushlstring(L, (const char *)d->pending, d->n);
    d->n = 0;
    return 1;
}

static int decoder_get(lua_State *L) {
    lua_decoder *d = gptoss_lua_check(L, 1, GPTOSS_DECODER_MT, NULL);
    const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
    if (k && strcmp(k, "pending") == 0) {
        lua_pushinteger(L, (lua_Integer)d->n);
        return 1;
    }
    return 0;
}

static int decoder_tostring(lua_State *L) {
    lua_decoder *d = gptoss_lua_check(L, 1, GPTOSS_DECODER_MT, NULL);
    lua_pushfstring(L, "gptoss.decoder(%d byte%s of a character pending)", (int)d->n, d->n == 1 ? "" : "s");
    return 1;
}

void gptoss_open_tokenizer(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"encode", tokenizer_encode}, {"decode", tokenizer_decode},   {"piece", tokenizer_piece},
        {"id", tokenizer_id},         {"entry", tokenizer_entry},     {"decoder", tokenizer_decoder},
        {NULL, NULL},
    };
    static const luaL_Reg meta[] = {{"__gc", tokenizer_gc}, {"__tostring", tokenizer_tostring}, {NULL, NULL}};
    static const gptoss_lua_class_def tokenizer = {GPTOSS_TOKENIZER_MT, methods, tokenizer_get, meta};
    gptoss_lua_class(L, &tokenizer);

    static const luaL_Reg ids_meta[] = {{"__gc", ids_gc}, {NULL, NULL}};
    static const gptoss_lua_class_def ids = {IDS_MT, NULL, NULL, ids_meta};
    gptoss_lua_class(L, &ids);

    static const luaL_Reg decoder_methods[] = {{"add", decoder_add}, {"flush", decoder_flush}, {NULL, NULL}};
    static const luaL_Reg decoder_meta[] = {{"__tostring", decoder_tostring}, {NULL, NULL}};
    static const gptoss_lua_class_def decoder = {GPTOSS_DECODER_MT, decoder_methods, decoder_get, decoder_meta};
    gptoss_lua_class(L, &decoder);
}
