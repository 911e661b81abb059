/* gptoss.sender(opts): a thread that writes bytes to sockets, so that gptoss serve's
 * Lua thread hands a step's stream chunks over in one pass instead of a send() a stream
 * (docs/api.md#sockets-written-from-a-thread). A socket is attached as a duplicate of its
 * descriptor, owned here until detached: the connection's own may close and its number be
 * reused without these bytes reaching another connection. A socket's bytes go out in order;
 * it fails when no byte went out for `timeout` seconds, when more than `max_queued` would
 * wait, or when a send fails (the client closed, reset): s:send and s:pending say why. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "binding.h"

#define SENDER_MT "gptoss.sender"

/* how long the thread waits on blocked sockets before it looks at deadlines again */
enum { BLOCKED_POLL_MS = 10 };

typedef struct {
    char *data;
    size_t len, cap;
} byte_buffer;

/* One attached socket. The Lua thread appends to `in`; the sending thread
 * swaps it with the drained `out` (under the lock) and sends from `out`
 * without it, so no send reads memory the Lua thread may move. */
typedef struct {
    int fd;        /* the duplicate; -1: a free entry */
    byte_buffer in, out;
    size_t out_sent;
    double progress; /* when a byte last went out, or the first waited */
    int failed;      /* the errno that ended it, 0 while it works */
    int blocked;     /* its last send would have blocked: poll it first */
    int busy;        /* the thread sends from it now, without the lock */
    int detached;    /* let go while busy: the thread frees it */
} outlet;

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t work;
    pthread_t thread;
    outlet *outlets; /* handle h is outlets[h - 1] */
    int n;
    struct pollfd *polled; /* the blocked sockets of a poll, and their entries: kept for the next */
    int *polled_index;     /* inside polled's block */
    int polled_cap;
    int polling;    /* the thread is in poll(): s:flush writes to wake_pipe */
    int wake_pipe[2];
    int stopping;
    double timeout;
    size_t max_queued;
    lua_Integer bytes_sent;
} sender_state;

typedef struct {
    gptoss_lua_object obj;
    sender_state *s;
} lua_sender;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Room for size bytes in b; false when memory is short (b unchanged). */
static int grow_to(byte_buffer *b, size_t size) {
    if (size <= b->cap)
        return 1;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < size)
        cap *= 2;
    char *grown = realloc(b->data, cap);
    if (!grown)
        return 0;
    b->data = grown, b->cap = cap;
    return 1;
}

static size_t unsent(const outlet *o) {
    return o->in.len + o->out.len - o->out_sent;
}

static void free_outlet(outlet *o) {
    close(o->fd);
    free(o->in.data);
    free(o->out.data);
    memset(o, 0, sizeof *o);
    o->fd = -1;
}

/* Whether o has bytes the thread may send now: out refilled from in when drained. */
static int ready_to_send(sender_state *s, outlet *o, double now) {
    if (o->fd < 0 || o->failed || o->detached)
        return 0;
    if (o->out_sent == o->out.len && o->in.len > 0) {
        byte_buffer drained = o->out;
        o->out = o->in, o->in = drained;
        o->in.len = 0, o->out_sent = 0;
    }
    if (o->out_sent == o->out.len)
        return 0;
    if (now - o->progress > s->timeout) {
        o->failed = ETIMEDOUT;
        return 0;
    }
    return 1;
}

/* One send of outlet i's bytes, the lock released around it. */
static void send_some(sender_state *s, int i) {
    outlet *o = &s->outlets[i];
    int fd = o->fd;
    const char *from = o->out.data + o->out_sent;
    size_t len = o->out.len - o->out_sent;
    o->busy = 1;
    pthread_mutex_unlock(&s->lock);
    ssize_t sent = send(fd, from, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    int err = errno;
    pthread_mutex_lock(&s->lock);
    o = &s->outlets[i]; /* attach may have moved the array */
    o->busy = 0;
    if (o->detached) {
        free_outlet(o);
    } else if (sent > 0) {
        o->out_sent += (size_t)sent, o->progress = now_s();
        s->bytes_sent += sent;
    } else if (sent == 0 || err == EAGAIN || err == EWOULDBLOCK) {
        o->blocked = 1;
    } else if (err != EINTR) {
        o->failed = err;
    }
}

/* Room for count polled sockets (the lock held), their entries' indices after them in one
 * block; false when memory is short. */
static int poll_room(sender_state *s, int count) {
    if (count <= s->polled_cap)
        return 1;
    struct pollfd *block = realloc(s->polled, (sizeof *block + sizeof(int)) * (size_t)count);
    if (!block)
        return 0;
    s->polled = block, s->polled_index = (int *)(block + count), s->polled_cap = count;
    return 1;
}

/* Waits (the lock released) until one of the count blocked sockets can take bytes, s:flush
 * gives new ones (wake_pipe: the other sockets' bytes must not wait for a slow client), or
 * wait_ms pass; clears blocked where it can. Short of memory, it only waits, and
 * every socket is tried again. */
static void poll_blocked(sender_state *s, int count, int wait_ms) {
    int k = 0, polled = 0; /* the blocked sockets, and all polled (the wake pipe after them) */
    if (poll_room(s, count + 1)) {
        for (int i = 0; i < s->n && k < count; i++) {
            if (s->outlets[i].fd >= 0 && s->outlets[i].blocked && !s->outlets[i].failed)
                s->polled[k] = (struct pollfd){.fd = s->outlets[i].fd, .events = POLLOUT}, s->polled_index[k++] = i;
        }
        s->polled[k] = (struct pollfd){.fd = s->wake_pipe[0], .events = POLLIN};
        polled = k + 1;
    }
    struct pollfd *fds = s->polled; /* only this thread grows it */
    s->polling = 1;
    pthread_mutex_unlock(&s->lock);
    poll(polled ? fds : NULL, (nfds_t)polled, wait_ms);
    char drained[64];
    while (read(s->wake_pipe[0], drained, sizeof drained) > 0)
        continue;
    pthread_mutex_lock(&s->lock);
    s->polling = 0;
    /* blocked is a hint: an entry detached (or reused) during the poll gets it wrong for a round */
    for (int j = 0; j < k; j++)
        s->outlets[s->polled_index[j]].blocked = fds[j].revents == 0;
    if (!k) {
        for (int i = 0; i < s->n; i++)
            s->outlets[i].blocked = 0;
    }
}

/* Wakes the thread (the lock held): from its wait for work, or from its poll. */
static void wake_thread(sender_state *s) {
    pthread_cond_signal(&s->work);
    if (s->polling)
        (void)!write(s->wake_pipe[1], "", 1); /* refused when full: a wake is pending already */
}

static void *send_loop(void *arg) {
    sender_state *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!s->stopping) {
        double now = now_s();
        int ready = 0, blocked = 0;
        for (int i = 0; i < s->n; i++) {
            if (!ready_to_send(s, &s->outlets[i], now))
                continue;
            if (s->outlets[i].blocked) {
                blocked++;
            } else {
                ready++;
                send_some(s, i);
            }
        }
        if (blocked) /* looked at without waiting while others take bytes: never starved */
            poll_blocked(s, blocked, ready ? 0 : BLOCKED_POLL_MS);
        else if (!ready)
            pthread_cond_wait(&s->work, &s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* Why outlet o failed, in a client's terms. */
static const char *failure(const sender_state *s, const outlet *o, char *buf, size_t size) {
    if (o->failed == ETIMEDOUT)
        snprintf(buf, size, "the client read nothing for %g s", s->timeout);
    else if (o->failed == EMSGSIZE)
        snprintf(buf, size, "the client reads too slowly (more than %zu bytes wait for it)", s->max_queued);
    else if (o->failed == ENOMEM)
        snprintf(buf, size, "out of host memory for the bytes it waits for");
    else
        snprintf(buf, size, "the connection failed: %s", strerror(o->failed));
    return buf;
}

static sender_state *check_sender(lua_State *L) {
    return ((lua_sender *)gptoss_lua_check(L, 1, SENDER_MT, NULL))->s;
}

/* The outlet of the handle at idx (the lock held: it is released before an error). */
static outlet *check_outlet(lua_State *L, sender_state *s, int idx, const char *fn) {
    int ok;
    lua_Integer h = lua_tointegerx(L, idx, &ok);
    if (ok && h >= 1 && h <= s->n && s->outlets[h - 1].fd >= 0 && !s->outlets[h - 1].detached)
        return &s->outlets[h - 1];
    pthread_mutex_unlock(&s->lock);
    luaL_error(L, "sender:%s: %s is not an attached socket's handle", fn, luaL_tolstring(L, idx, NULL));
    return NULL;
}

/* s:attach(fd) -> a handle: a duplicate of the socket's descriptor, sent to from now on */
static int sender_attach(lua_State *L) {
    sender_state *s = check_sender(L);
    lua_Integer fd = luaL_checkinteger(L, 2);
    int in_range = fd >= 0 && fd <= INT_MAX;
    int dup = in_range ? fcntl((int)fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (dup < 0)
        return luaL_error(L, "sender:attach: descriptor %I: %s", fd, strerror(in_range ? errno : EBADF));
    pthread_mutex_lock(&s->lock);
    int h = 0;
    while (h < s->n && s->outlets[h].fd >= 0)
        h++;
    if (h == s->n) {
        outlet *grown = realloc(s->outlets, sizeof *grown * (size_t)(s->n + 1));
        if (!grown) {
            pthread_mutex_unlock(&s->lock);
            close(dup);
            return luaL_error(L, "sender:attach: out of host memory");
        }
        s->outlets = grown, s->n++;
    }
    memset(&s->outlets[h], 0, sizeof s->outlets[h]);
    s->outlets[h].fd = dup;
    pthread_mutex_unlock(&s->lock);
    lua_pushinteger(L, h + 1);
    return 1;
}

/* s:send(h, text, ...) -> true: the texts queued in order; false and why once the socket
 * failed (nothing queued) */
static int sender_send(lua_State *L) {
    sender_state *s = check_sender(L);
    int top = lua_gettop(L);
    size_t len = 0;
    for (int i = 3; i <= top; i++) {
        size_t n;
        luaL_checklstring(L, i, &n);
        len += n;
    }
    pthread_mutex_lock(&s->lock);
    outlet *o = check_outlet(L, s, 2, "send");
    if (!o->failed && unsent(o) + len > s->max_queued)
        o->failed = EMSGSIZE;
    if (!o->failed && !grow_to(&o->in, o->in.len + len))
        o->failed = ENOMEM; /* this socket's bytes are lost: it fails alone */
    if (o->failed) { /* pushed once the lock is released: a push may raise (out of memory) */
        char why[160];
        failure(s, o, why, sizeof why);
        pthread_mutex_unlock(&s->lock);
        lua_pushboolean(L, 0);
        lua_pushstring(L, why);
        return 2;
    }
    byte_buffer *in = &o->in;
    if (unsent(o) == 0)
        o->progress = now_s(); /* the deadline runs from the first byte that waits */
    for (int i = 3; i <= top; i++) {
        size_t n;
        const char *text = lua_tolstring(L, i, &n);
        memcpy(in->data + in->len, text, n);
        in->len += n;
    }
    pthread_mutex_unlock(&s->lock);
    lua_pushboolean(L, 1);
    return 1;
}

/* s:flush(): the thread sends what was given since */
static int sender_flush(lua_State *L) {
    sender_state *s = check_sender(L);
    pthread_mutex_lock(&s->lock);
    wake_thread(s);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

/* s:pending(h) -> bytes not sent yet; nil and why once the socket failed */
static int sender_pending(lua_State *L) {
    sender_state *s = check_sender(L);
    pthread_mutex_lock(&s->lock);
    outlet *o = check_outlet(L, s, 2, "pending");
    char why[160];
    int failed = o->failed != 0;
    lua_Integer left = (lua_Integer)unsent(o);
    if (failed)
        failure(s, o, why, sizeof why);
    pthread_mutex_unlock(&s->lock); /* before the pushes, which may raise (out of memory) */
    if (!failed) {
        lua_pushinteger(L, left);
        return 1;
    }
    lua_pushnil(L);
    lua_pushstring(L, why);
    return 2;
}

/* s:detach(h): the duplicate closed, what was not sent dropped; the handle is free */
static int sender_detach(lua_State *L) {
    sender_state *s = check_sender(L);
    pthread_mutex_lock(&s->lock);
    outlet *o = check_outlet(L, s, 2, "detach");
    if (o->busy)
        o->detached = 1;
    else
        free_outlet(o);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

/* s.bytes: bytes sent so far; s.closed */
static int sender_get(lua_State *L) {
    const char *key = lua_tostring(L, 2);
    if (key && strcmp(key, "closed") == 0) {
        lua_pushboolean(L, gptoss_lua_life_of(L, 1, SENDER_MT) != GPTOSS_LUA_OPEN);
        return 1;
    }
    if (key && strcmp(key, "bytes") == 0) {
        sender_state *s = check_sender(L);
        pthread_mutex_lock(&s->lock);
        lua_pushinteger(L, s->bytes_sent);
        pthread_mutex_unlock(&s->lock);
        return 1;
    }
    return 0;
}

static int sender_end(lua_State *L, gptoss_lua_life how) {
    lua_sender *ls = gptoss_lua_end(L, 1, SENDER_MT, how);
    if (!ls || !ls->s)
        return 0;
    sender_state *s = ls->s;
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    wake_thread(s);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    close(s->wake_pipe[0]);
    close(s->wake_pipe[1]);
    for (int i = 0; i < s->n; i++) {
        if (s->outlets[i].fd >= 0)
            free_outlet(&s->outlets[i]);
    }
    free(s->outlets);
    free(s->polled);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->lock);
    free(s);
    ls->s = NULL;
    return 0;
}

static int sender_close(lua_State *L) { return sender_end(L, GPTOSS_LUA_CLOSED); }
static int sender_gc(lua_State *L) { return sender_end(L, GPTOSS_LUA_COLLECTED); }

/* gptoss.core.sender{timeout = seconds, max_queued = bytes} -> a sender, its thread started */
int gptoss_lua_sender(lua_State *L) {
    static const char *const known[] = {"timeout", "max_queued", NULL};
    if (!lua_isnoneornil(L, 1)) {
        luaL_checktype(L, 1, LUA_TTABLE);
        gptoss_opt_known(L, 1, "sender", known);
    }
    double timeout = lua_isnoneornil(L, 1) ? 30 : gptoss_opt_number(L, 1, "sender", "timeout", 30);
    lua_Integer max_queued = lua_isnoneornil(L, 1) ? 16 << 20 : gptoss_opt_integer(L, 1, "sender", "max_queued", 16 << 20);
    if (!(timeout > 0 && timeout <= 86400))
        return luaL_error(L, "sender: timeout must be seconds in (0, 86400] (got %f)", timeout);
    if (max_queued < 1)
        return luaL_error(L, "sender: max_queued must be at least 1 byte (got %I)", max_queued);
    lua_sender *ls = gptoss_lua_new(L, SENDER_MT, sizeof *ls, 0);
    sender_state *s = calloc(1, sizeof *s);
    if (!s)
        return luaL_error(L, "sender: out of host memory");
    s->timeout = timeout, s->max_queued = (size_t)max_queued;
    if (pipe(s->wake_pipe) != 0) {
        int err = errno;
        free(s);
        return luaL_error(L, "sender: cannot make its wake pipe: %s", strerror(err));
    }
    for (int end = 0; end < 2; end++) {
        fcntl(s->wake_pipe[end], F_SETFL, O_NONBLOCK);
        fcntl(s->wake_pipe[end], F_SETFD, FD_CLOEXEC);
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    int err = pthread_create(&s->thread, NULL, send_loop, s);
    if (err) {
        pthread_cond_destroy(&s->work);
        pthread_mutex_destroy(&s->lock);
        close(s->wake_pipe[0]);
        close(s->wake_pipe[1]);
        free(s);
        return luaL_error(L, "sender: cannot start its thread: %s", strerror(err));
    }
    ls->s = s;
    return 1;
}

void gptoss_open_sender(lua_State *L) {
    static const luaL_Reg methods[] = {{"attach", sender_attach}, {"send", sender_send},     {"flush", sender_flush},
                                       {"pending", sender_pending}, {"detach", sender_detach}, {"close", sender_close},
                                       {NULL, NULL}};
    static const luaL_Reg meta[] = {{"__gc", sender_gc}, {"__close", sender_close}, {NULL, NULL}};
    static const gptoss_lua_class_def sender = {SENDER_MT, methods, sender_get, meta};
    gptoss_lua_class(L, &sender);
}
