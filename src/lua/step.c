/* gptoss.step: the handle of one step, and r:step, which makes it: the
 * batch and its feeding step read from Lua, the logits to keep, the engine
 * asked; then the handle's tokens, logprobs and logits, waited for where
 * the engine has not delivered them yet. */
#include <string.h>

#include "../../contract/device_contract.h" /* gptoss_fed_token */
#include "binding.h"

/* user values: 1 the replica, whose userdata replica points to; 2 its
 * constraint {[row] = matcher}, or nil */
typedef struct {
    gptoss_lua_object obj;
    gptoss_result res;
    lua_replica *replica;
    int settled; /* the constraint's matchers took their tokens */
} lua_step;

/* ---- r:step ---- */

/* #t of the list field at the top of the stack, as the engine's int count
 * (a __len may say anything) */
static int list_length(lua_State *L, const char *field) {
    lua_Integer length = luaL_len(L, -1);
    if (length < 0 || length > INT32_MAX)
        luaL_error(L, "step: %s has length %I, outside 0..%d", field, length, INT32_MAX);
    return (int)length;
}

/* reads t[field] as an array of n integers (n < 0: sets n), left on the stack */
static int *int_array(lua_State *L, int tbl, const char *field, int *n) {
    lua_getfield(L, tbl, field);
    if (!lua_istable(L, -1))
        luaL_error(L, "step: %s must be a table of integers (got %s)", field, luaL_typename(L, -1));
    int len = list_length(L, field);
    if (*n >= 0 && len != *n)
        luaL_error(L, "step: slots, positions and tokens must have the same length (%s has %d, "
                      "slots has %d)", field, len, *n);
    *n = len;
    int *out = lua_newuserdatauv(L, sizeof(int) * (size_t)(len ? len : 1), 0);
    for (int i = 0; i < len; i++) {
        lua_geti(L, -2, i + 1);
        int ok;
        lua_Integer v = lua_tointegerx(L, -1, &ok);
        if (!ok || v < INT32_MIN || v > INT32_MAX)
            luaL_error(L, "step: %s[%d] must be an integer (got %s)", field, i + 1,
                       luaL_tolstring(L, -1, NULL));
        out[i] = (int)v;
        lua_pop(L, 1);
    }
    lua_remove(L, -2); /* keep the buffer on the stack, drop the table */
    return out;
}

/* The step at idx as the one feeding this batch (field of it): a live step
 * of the replica at 1, and its latest. Checked where the batch is read, for
 * the messages' order, and again before the step runs, for the pointer. */
static lua_step *feeding_step(lua_State *L, int idx, const char *field) {
    const char *fn = field[0] == 't' ? "step: tokens" : "step: from";
    const lua_replica *r = gptoss_lua_check(L, 1, GPTOSS_REPLICA_MT, NULL);
    lua_step *h = gptoss_lua_test(L, idx, GPTOSS_STEP_MT, fn);
    if (!h)
        luaL_error(L, "step: %s must be a step of this replica (got %s)", field, luaL_typename(L, idx));
    if (h->replica != r)
        luaL_error(L, "step: %s is a step of another replica", field);
    uint64_t latest = gptoss_engine_steps(r->e);
    if (h->res.seq != latest)
        luaL_error(L, "step: %s is step %I of this replica, not its latest (%I): only the latest "
                      "feeds the next", field, (lua_Integer)h->res.seq, (lua_Integer)latest);
    return h;
}

/* The batch of the table at tbl (buffers left on the stack); returns the
 * stack index of the step feeding it (left there too; *field: which field
 * gave it), or 0. tokens = h: row i takes the token h drew for its row i (h
 * of as many rows); from = h with a table of tokens: a token -j takes the
 * one h drew for its row j (1-based), passed on as the core's fed token. */
static int read_batch(lua_State *L, int tbl, gptoss_batch *b, const char **field) {
    luaL_checktype(L, tbl, LUA_TTABLE);
    static const char *const known[] = {"slots", "positions", "tokens", "from", "logits", "draw", "constraint", NULL};
    gptoss_opt_known(L, tbl, "step", known);
    int n = -1, fed = 0;
    int *slots = int_array(L, tbl, "slots", &n);
    b->positions = int_array(L, tbl, "positions", &n);
    lua_getfield(L, tbl, "tokens");
    if (luaL_testudata(L, -1, GPTOSS_STEP_MT)) {
        fed = lua_gettop(L);
        *field = "tokens";
        int rows = feeding_step(L, fed, "tokens")->res.rows;
        if (rows != n)
            luaL_error(L, "step: tokens is a step of %d rows; this batch has %d", rows, n);
        lua_getfield(L, tbl, "from");
        if (!lua_isnil(L, -1))
            luaL_error(L, "step: from is for a table of tokens; tokens = h already names the feeding step");
        lua_pop(L, 1);
        int *tokens = lua_newuserdatauv(L, sizeof(int) * (size_t)(n ? n : 1), 0);
        for (int i = 0; i < n; i++)
            tokens[i] = gptoss_fed_token(i);
        b->tokens = tokens;
    } else {
        if (!lua_istable(L, -1))
            luaL_error(L, "step: tokens must be a table of integers or the replica's latest step (got %s)",
                       luaL_typename(L, -1));
        lua_pop(L, 1);
        int *tokens = int_array(L, tbl, "tokens", &n);
        lua_getfield(L, tbl, "from");
        if (lua_isnil(L, -1)) {
            lua_pop(L, 1);
        } else {
            fed = lua_gettop(L);
            *field = "from";
        }
        int rows = fed ? feeding_step(L, fed, "from")->res.rows : 0;
        for (int i = 0; fed && i < n; i++) {
            if (tokens[i] >= 0)
                continue;
            lua_Integer row = -(lua_Integer)tokens[i]; /* not -tokens[i]: INT32_MIN has no negation */
            if (row > rows)
                luaL_error(L, "step: tokens[%d] = %d refers to row %I of from, a step of %d rows", i + 1,
                           tokens[i], row, rows);
            tokens[i] = gptoss_fed_token((int)row - 1);
        }
        b->tokens = tokens;
    }
    int count = gptoss_engine_options(gptoss_check_engine(L, 1))->slots; /* runs no Lua */
    for (int i = 0; i < n; i++) {
        if (slots[i] < 1) /* the core checks the other end, 0-based: INT32_MIN has no 0-based slot */
            luaL_error(L, "step: slots[%d] = %d is out of range 1..%d", i + 1, slots[i], count);
        slots[i]--; /* 1-based in Lua */
    }
    b->slots = slots;
    b->n = n;
    b->fed_rows = 0;
    return fed;
}

/* The list of 1-based rows at the stack top (t[field]), kept 0-based in a
 * userdata pushed on the stack; *n rows. */
static int *row_list(lua_State *L, const char *field, int *n) {
    int len = list_length(L, field);
    int *rows = lua_newuserdatauv(L, sizeof(int) * (size_t)(len ? len : 1), 0);
    for (int i = 1; i <= len; i++) {
        int ok;
        lua_geti(L, -2, i);
        lua_Integer row = lua_tointegerx(L, -1, &ok);
        if (!ok || row < INT32_MIN + 1 || row > INT32_MAX) /* the engine checks the batch's range */
            luaL_error(L, "step: %s[%d] must be a row number (got %s)", field, i, luaL_tolstring(L, -1, NULL));
        rows[i - 1] = (int)row - 1;
        lua_pop(L, 1);
    }
    *n = len;
    return rows;
}

/* The step's logits option at tbl into q: false/nil (keep none), true
 * (every row) or a table of 1-based rows, kept 0-based in a userdata left
 * on the stack. */
static void read_keep(lua_State *L, int tbl, gptoss_step_request *q) {
    lua_getfield(L, tbl, "logits");
    q->keep = NULL;
    q->n_keep = 0;
    q->keep_logits = lua_toboolean(L, -1);
    if (lua_isnil(L, -1) || lua_isboolean(L, -1))
        return;
    if (!lua_istable(L, -1))
        luaL_error(L, "step: logits must be true, false or a table of row numbers (got %s)", luaL_typename(L, -1));
    q->keep = row_list(L, "logits", &q->n_keep);
}

/* The step's draw option at tbl into q: nil (every row draws) or a table of
 * 1-based rows, possibly empty, kept 0-based in a userdata left on the
 * stack. */
static void read_draw(lua_State *L, int tbl, gptoss_step_request *q) {
    lua_getfield(L, tbl, "draw");
    q->draw = NULL;
    q->n_draw = 0;
    if (lua_isnil(L, -1))
        return;
    if (!lua_istable(L, -1))
        luaL_error(L, "step: draw must be a table of row numbers (got %s)", luaL_typename(L, -1));
    q->draw = row_list(L, "draw", &q->n_draw);
}

/* Tells the collector of the logits a step's handle now holds (NULL: none),
 * bytes its small userdata does not show: it then collects at the pace
 * they are allocated, as if Lua had allocated them (unless the script
 * stopped it). */
static void collect_for(lua_State *L, const gptoss_storage *logits) {
    size_t kib = logits ? logits->count * sizeof(float) / 1024 : 0;
    if (kib && lua_gc(L, LUA_GCISRUNNING))
        lua_gc(L, LUA_GCSTEP, kib > INT32_MAX ? INT32_MAX : (int)kib);
}

/* The constraint table at idx becomes the step at step_idx's (user value
 * 2), and its matchers wait for the step's tokens. */
static void pend_matchers(lua_State *L, int idx, int step_idx) {
    for (lua_pushnil(L); lua_next(L, idx); lua_pop(L, 1))
        gptoss_lua_matcher_pend(L, -1, step_idx);
    lua_pushvalue(L, idx);
    lua_setiuservalue(L, step_idx, 2);
}

/* r:step{slots=, positions=, tokens= (ids, or the latest step) [, from=, logits=true|{rows}, draw={rows},
 * constraint={[row] = matcher}]}: the batch read and the handle allocated
 * (each may run Lua) before the replica and the feeding step are taken for
 * the engine; the constraint's matchers then wait for this step's tokens */
int gptoss_lua_replica_step(lua_State *L) {
    gptoss_check_engine(L, 1); /* first, for the messages' order */
    lua_settop(L, 2);
    gptoss_batch b;
    const char *fed_field = NULL;
    int fed = read_batch(L, 2, &b, &fed_field);
    gptoss_step_request q = {.batch = &b};
    read_keep(L, 2, &q);
    read_draw(L, 2, &q);
    const gptoss_model *model = gptoss_engine_model(gptoss_check_engine(L, 1));
    int constraint = gptoss_lua_read_constraint(L, 2, b.n, model->config.vocab_size, &q);
    lua_step *h = gptoss_lua_new(L, GPTOSS_STEP_MT, sizeof *h, 2);
    h->res.delivered = 1; /* nothing to forget until the engine has it */
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    h->replica = gptoss_lua_check(L, 1, GPTOSS_REPLICA_MT, NULL);
    q.fed_by = fed ? &feeding_step(L, fed, fed_field)->res : NULL;
    char err[GPTOSS_ERR_LEN];
    gptoss_status s = gptoss_engine_step(h->replica->e, &q, &h->res, err);
    if (s)
        return gptoss_raise_status(L, "step", s, err);
    collect_for(L, h->res.logits);
    if (constraint)
        pend_matchers(L, constraint, lua_gettop(L));
    return 1;
}

/* ---- the step handle ---- */

static lua_step *check_step(lua_State *L, int idx) {
    return gptoss_lua_check(L, idx, GPTOSS_STEP_MT, NULL);
}

/* h:logits() -> host tensor {rows, vocab}, allocated before the step's
 * logits are taken */
static int step_logits(lua_State *L) {
    check_step(L, 1);
    lua_tensor *t = gptoss_push_tensor(L);
    lua_step *h = check_step(L, 1);
    char err[GPTOSS_ERR_LEN];
    int copied = !h->res.logits;
    gptoss_status s = gptoss_engine_logits(h->replica->e, &h->res, err);
    if (s == GPTOSS_E_STATE) /* gone from the engine: how to keep them next time */
        return luaL_error(L, "step:logits: %s; pass logits = true (or the rows) to r:step to keep them", err);
    if (s)
        return gptoss_raise_status(L, "step:logits", s, err);
    int64_t shape[2] = {h->res.logits_rows, h->res.vocab};
    gptoss_tensor_view(t, h->res.logits, 0, 2, shape);
    collect_for(L, copied ? h->res.logits : NULL);
    return 1;
}

/* Whether the options table at idx (none: no) says partial = true: a step
 * whose rows could not all be drawn answers with what was drawn. */
static int read_partial(lua_State *L, int idx, const char *fn) {
    if (lua_isnoneornil(L, idx))
        return 0;
    luaL_checktype(L, idx, LUA_TTABLE);
    static const char *const known[] = {"partial", NULL};
    gptoss_opt_known(L, idx, fn, known);
    lua_getfield(L, idx, "partial");
    int partial = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return partial;
}

/* The step at idx with its tokens in, waiting for them; raises (as fn) where
 * a row could not be drawn, unless partial. */
static lua_step *check_delivered(lua_State *L, int idx, const char *fn, int partial) {
    lua_step *h = check_step(L, idx);
    char err[GPTOSS_ERR_LEN];
    gptoss_status s = gptoss_engine_tokens(h->replica->e, &h->res, err);
    if (s && s != GPTOSS_E_DRAW)
        gptoss_raise_status(L, fn, s, err);
    if (!h->settled) /* the rows that drew a token give it to their matchers, whether or not another failed */
        gptoss_lua_step_settle(L, idx);
    if (s && !partial)
        gptoss_raise_status(L, fn, s, err);
    return check_step(L, idx);
}

void gptoss_lua_step_settle(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    lua_step *h = check_step(L, idx);
    if (h->settled)
        return;
    char err[GPTOSS_ERR_LEN];
    gptoss_status s = gptoss_engine_tokens(h->replica->e, &h->res, err);
    if (s && s != GPTOSS_E_DRAW)
        gptoss_raise_status(L, "step", s, err);
    h->settled = 1;
    /* every row's matcher takes its token, so that one failure loses no other's; then the
     * first row whose matcher could not take its own raises */
    int failed = 0, failed_token = -1;
    gptoss_status failure = GPTOSS_OK;
    if (lua_getiuservalue(L, idx, 2) == LUA_TTABLE)
        for (lua_pushnil(L); lua_next(L, -2); lua_pop(L, 1)) {
            int row = (int)lua_tointeger(L, -2), token = check_step(L, idx)->res.tokens[row - 1];
            char why[GPTOSS_ERR_LEN];
            gptoss_status took = gptoss_lua_matcher_took(L, -1, idx, token, why);
            if (took && (!failed || row < failed)) {
                failed = row, failed_token = token, failure = took;
                snprintf(err, sizeof err, "%s", why);
            }
        }
    lua_pop(L, 1);
    if (failure == GPTOSS_E_INVALID)
        luaL_error(L, "step: constraint[%d]: the matcher refuses token %d, drawn under its own mask (a bug): %s",
                   failed, failed_token, err);
    if (failure) /* a limit the grammar's matcher reached (docs/structured.md#limits) */
        luaL_error(L, "step: constraint[%d]: the matcher cannot take token %d: %s", failed, failed_token, err);
}

/* h:logprobs([{partial = true}]) -> per row {id =, logprob =, top = {{id =,
 * logprob =}, ...}} where the row's slot asked (r:sampling's logprobs),
 * false elsewhere (and where no token was drawn). Each row is copied before
 * it is pushed: pushing allocates, and a finaliser may collect the step
 * meanwhile. */
static int step_logprobs(lua_State *L) {
    int partial = read_partial(L, 2, "step:logprobs");
    if (!check_step(L, 1)->res.logprobs)
        return luaL_error(L, "step:logprobs: no row of this step asked for logprobs (r:sampling(slot, "
                             "{logprobs = n}) before the step)");
    int rows = check_delivered(L, 1, "step:logprobs", partial)->res.rows;
    lua_createtable(L, rows, 0);
    for (int i = 0; i < rows; i++) {
        const lua_step *h = check_delivered(L, 1, "step:logprobs", partial);
        gptoss_row_logprobs lp = h->res.logprobs[i];
        int id = h->res.tokens[i];
        if (lp.n_top < 0 || id < 0) {
            lua_pushboolean(L, 0);
        } else {
            lua_createtable(L, 0, 3);
            lua_pushinteger(L, id);
            lua_setfield(L, -2, "id");
            lua_pushnumber(L, lp.logprob);
            lua_setfield(L, -2, "logprob");
            gptoss_push_top_logprobs(L, lp.top_id, lp.top_logprob, lp.n_top);
            lua_setfield(L, -2, "top");
        }
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* Pushes {[row] = why} for the rows of the step at 1 that no token could be
 * drawn for (1-based rows; why without the "row N: " of an error). The step
 * is taken again only after a push, which allocates (a finaliser may run):
 * a step's every row is looked at, each time it is read. */
static void push_failures(lua_State *L) {
    lua_newtable(L);
    const lua_step *h = check_delivered(L, 1, "step:tokens", 1);
    for (int i = 0; i < h->res.rows; i++) {
        char why[GPTOSS_ERR_LEN];
        if (!gptoss_result_row_failed(&h->res, i, why))
            continue;
        lua_pushstring(L, why);
        lua_rawseti(L, -2, i + 1);
        h = check_delivered(L, 1, "step:tokens", 1);
    }
}

/* h:tokens([{partial = true}]) -> the id each row drew: greedy (the first
 * maximum, as the course's argmax) or as its slot's sampling was when the
 * step was taken; false for a row the step was not asked to draw (draw).
 * partial: a row no token could be drawn for is false too, and a second
 * table says why, {[row] = why}, where h:tokens() would raise. */
static int step_tokens(lua_State *L) {
    int partial = read_partial(L, 2, "step:tokens");
    lua_createtable(L, check_delivered(L, 1, "step:tokens", partial)->res.rows, 0);
    const lua_step *h = check_delivered(L, 1, "step:tokens", partial); /* after the allocation */
    for (int i = 0; i < h->res.rows; i++) {
        if (h->res.tokens[i] >= 0)
            lua_pushinteger(L, h->res.tokens[i]);
        else
            lua_pushboolean(L, 0);
        lua_rawseti(L, -2, i + 1);
    }
    if (!partial)
        return 1;
    push_failures(L);
    return 2;
}

/* h:ready() -> true once h:tokens() (and h:logprobs()) would not wait for
 * the device: an event loop polls it between other work. A CPU step is
 * ready when r:step returns. */
static int step_ready(lua_State *L) {
    const lua_step *h = check_step(L, 1);
    lua_pushboolean(L, gptoss_engine_ready(h->replica->e, &h->res));
    return 1;
}

static int step_get(lua_State *L) {
    lua_step *h = check_step(L, 1);
    const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
    if (k && strcmp(k, "rows") == 0) {
        lua_pushinteger(L, h->res.rows);
        return 1;
    }
    return 0;
}

static int step_tostring(lua_State *L) {
    lua_step *h = check_step(L, 1);
    lua_pushfstring(L, "gptoss.step(%d rows, step %I of its replica, tokens %s%s)", h->res.rows,
                    (lua_Integer)h->res.seq, h->res.delivered ? "ready" : "pending",
                    h->res.logits ? ", logits on the host" : "");
    return 1;
}

static int step_gc(lua_State *L) {
    lua_step *h = gptoss_lua_end(L, 1, GPTOSS_STEP_MT, GPTOSS_LUA_COLLECTED);
    if (h)
        gptoss_result_release(h->replica ? h->replica->e : NULL, &h->res);
    return 0;
}

void gptoss_open_step(lua_State *L) {
    static const luaL_Reg step_methods[] = {
        {"logits", step_logits}, {"tokens", step_tokens}, {"logprobs", step_logprobs},
        {"ready", step_ready}, {NULL, NULL}};
    static const luaL_Reg step_meta[] = {{"__gc", step_gc}, {"__tostring", step_tostring}, {NULL, NULL}};
    static const gptoss_lua_class_def step = {GPTOSS_STEP_MT, step_methods, step_get, step_meta};
    gptoss_lua_class(L, &step);
}
