/* Line editing at a terminal's prompt, for gptoss.line_input (the terminal chat): editing
 * keys, and a history recalled with the arrows and kept in a file, through libedit (BSD
 * licensed; Debian's libedit2 and, to build this, libedit-dev).
 *
 * Optional twice over: built only where libedit's header is, and the library loaded with
 * dlopen when a program first asks, so that gptoss neither needs it to build nor to run
 * (gptoss.line_input then reads plain lines). libedit's own API (el_*, history), not its
 * readline emulation: Debian's lua5.4 links GNU readline, whose rl_* and history_* names
 * would be found before libedit's. One editor for the process, as there is one terminal. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "binding.h"

/* edit_history's operations, in either build */
static const char *const history_ops[] = {"add", "load", "save", NULL};

#if defined(__has_include) && __has_include(<histedit.h>)
#include <histedit.h>

#define LIBEDIT_SONAME "libedit.so.2" /* Debian 12's libedit2 */
#define HISTORY_SIZE 1000

static struct {
    __typeof__(el_init) *el_init;
    __typeof__(el_end) *el_end;
    __typeof__(el_gets) *el_gets;
    __typeof__(el_set) *el_set;
    __typeof__(el_line) *el_line;
    __typeof__(el_reset) *el_reset;
    __typeof__(el_source) *el_source;
    __typeof__(history_init) *history_init;
    __typeof__(history_end) *history_end;
    __typeof__(history) *history;
} libedit;

static EditLine *editor;
static History *lines;
static const char *prompt; /* edit_line's argument, alive on the Lua stack while it runs */

static const char *editor_prompt(EditLine *e) {
    (void)e;
    return prompt;
}

/* libedit's functions from the shared library; false and why when it is not there */
static int load_libedit(lua_State *L) {
    if (libedit.history)
        return 1;
    void *lib = dlopen(LIBEDIT_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        lua_pushfstring(L, "libedit is not installed (Debian: libedit2): %s", dlerror());
        return 0;
    }
    struct {
        const char *name;
        void **fn;
    } symbols[] = {
        {"el_init", (void **)&libedit.el_init},       {"el_end", (void **)&libedit.el_end},
        {"el_gets", (void **)&libedit.el_gets},       {"el_set", (void **)&libedit.el_set},
        {"el_line", (void **)&libedit.el_line},       {"el_reset", (void **)&libedit.el_reset},
        {"el_source", (void **)&libedit.el_source},   {"history_init", (void **)&libedit.history_init},
        {"history_end", (void **)&libedit.history_end}, {"history", (void **)&libedit.history},
    };
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        *symbols[i].fn = dlsym(lib, symbols[i].name);
        if (!*symbols[i].fn) {
            lua_pushfstring(L, "%s lacks %s", LIBEDIT_SONAME, symbols[i].name);
            memset(&libedit, 0, sizeof libedit);
            dlclose(lib);
            return 0;
        }
    }
    return 1; /* kept loaded: its functions are used until the process ends */
}

/* gptoss.core.edit_open() -> true once the editor is there (reading ~/.editrc, as libedit's
 * programs do); false and why: input or output is not a terminal, or no libedit */
int gptoss_lua_edit_open(lua_State *L) {
    if (editor) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushboolean(L, 0);
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        lua_pushliteral(L, "standard input and output are not both terminals");
        return 2;
    }
    if (!load_libedit(L))
        return 2;
    HistEvent event;
    lines = libedit.history_init();
    editor = libedit.el_init("gptoss", stdin, stdout, stderr);
    if (!lines || !editor) {
        if (lines)
            libedit.history_end(lines);
        lines = NULL, editor = NULL;
        lua_pushliteral(L, "libedit could not start an editor on this terminal");
        return 2;
    }
    libedit.history(lines, &event, H_SETSIZE, HISTORY_SIZE);
    libedit.history(lines, &event, H_SETUNIQUE, 1); /* a line typed twice in a row is kept once */
    libedit.el_set(editor, EL_EDITOR, "emacs");
    /* no handlers of libedit's: a caught SIGINT (gptoss.catch_interrupts) ends el_gets */
    libedit.el_set(editor, EL_SIGNAL, 0);
    libedit.el_set(editor, EL_PROMPT, editor_prompt);
    libedit.el_set(editor, EL_HIST, libedit.history, lines);
    libedit.el_source(editor, NULL); /* ~/.editrc, when there is one */
    lua_pushboolean(L, 1);
    return 1;
}

static void check_open(lua_State *L, const char *fn) {
    if (!editor)
        luaL_error(L, "%s: the line editor is not open (edit_open)", fn);
}

/* gptoss.core.edit_line(prompt) -> the line typed, without its "\n"; nil and "end" (Ctrl-D
 * on an empty line), "interrupt" (SIGINT, caught, where nothing was typed) or "dropped"
 * (SIGINT after typing: the line is dropped) */
int gptoss_lua_edit_line(lua_State *L) {
    const char *text = luaL_checkstring(L, 1);
    check_open(L, "edit_line");
    prompt = text;
    int count;
    const char *line = libedit.el_gets(editor, &count);
    int err = errno;
    if (line && count > 0) {
        lua_pushlstring(L, line, (size_t)count - (line[count - 1] == '\n'));
        return 1;
    }
    if (count == 0) {
        lua_pushnil(L);
        lua_pushliteral(L, "end");
        return 2;
    }
    if (err != EINTR)
        return luaL_error(L, "edit_line: reading the terminal: %s", strerror(err));
    const LineInfo *typed = libedit.el_line(editor);
    int dropped = typed->lastchar > typed->buffer;
    libedit.el_reset(editor); /* the terminal as it was, the line emptied */
    lua_pushnil(L);
    lua_pushstring(L, dropped ? "dropped" : "interrupt");
    return 2;
}

/* gptoss.core.edit_history(op, arg) -> true; nil and why. op "add": arg a line to recall;
 * "load", "save": arg the history file */
int gptoss_lua_edit_history(lua_State *L) {
    static const int codes[] = {H_ENTER, H_LOAD, H_SAVE};
    int op = luaL_checkoption(L, 1, NULL, history_ops);
    const char *arg = luaL_checkstring(L, 2);
    check_open(L, "edit_history");
    HistEvent event;
    if (libedit.history(lines, &event, codes[op], arg) < 0) {
        lua_pushnil(L);
        lua_pushfstring(L, "edit_history: cannot %s '%s': %s", history_ops[op], arg, event.str);
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* gptoss.core.edit_close(): the editor ends, the terminal as it was */
int gptoss_lua_edit_close(lua_State *L) {
    (void)L;
    if (editor) {
        libedit.el_end(editor);
        libedit.history_end(lines);
        editor = NULL, lines = NULL;
    }
    return 0;
}

#else /* built without libedit's header */

int gptoss_lua_edit_open(lua_State *L) {
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "gptoss was built without line editing (Debian: libedit-dev)");
    return 2;
}

static int not_built(lua_State *L, const char *fn) {
    return luaL_error(L, "%s: the line editor is not open (edit_open)", fn);
}
int gptoss_lua_edit_line(lua_State *L) { return not_built(L, "edit_line"); }
int gptoss_lua_edit_history(lua_State *L) {
    luaL_checkoption(L, 1, NULL, history_ops); /* the arguments checked as where it is built */
    luaL_checkstring(L, 2);
    return not_built(L, "edit_history");
}
int gptoss_lua_edit_close(lua_State *L) {
    (void)L;
    return 0;
}

#endif
