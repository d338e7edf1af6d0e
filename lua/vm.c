/* vm.c - a Lua state with our allocator, a heap limit and the sandboxed
 * standard library (see sdlua.h). */
#include <limits.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "lua_internal.h"

#define DEFAULT_LIMIT ((size_t)1 << 30)

/* lua_Alloc with accounting: a workflow that runs away with memory gets a Lua
 * "not enough memory" error instead of taking the process down. */
static void *vm_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    sd_lua_vm *vm = ud;
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        free(ptr);
        vm->used -= old;
        return NULL;
    }
    if (nsize > old && vm->used - old + nsize > vm->limit) return NULL;
    void *p = realloc(ptr, nsize);
    if (p) vm->used = vm->used - old + nsize;
    return p;
}

sd_lua_vm *sd_lua_vm_of(lua_State *L) { return *(sd_lua_vm **)lua_getextraspace(L); }

/* os functions that only read the clock. */
static void open_safe_os(lua_State *L) {
    luaL_requiref(L, LUA_OSLIBNAME, luaopen_os, 0); /* the full table, not global */
    lua_newtable(L);
    static const char *const keep[] = {"clock", "time", "date", "difftime", NULL};
    for (int i = 0; keep[i]; i++) {
        lua_getfield(L, -2, keep[i]);
        lua_setfield(L, -2, keep[i]);
    }
    lua_setglobal(L, LUA_OSLIBNAME);
    lua_pop(L, 1);
}

static int open_libs(lua_State *L) {
    int unsafe = (int)lua_toboolean(L, 1);
    if (unsafe) {
        luaL_openlibs(L);
    } else {
        static const luaL_Reg libs[] = {
            {LUA_GNAME, luaopen_base},         {LUA_TABLIBNAME, luaopen_table},
            {LUA_STRLIBNAME, luaopen_string},  {LUA_MATHLIBNAME, luaopen_math},
            {LUA_UTF8LIBNAME, luaopen_utf8},   {LUA_COLIBNAME, luaopen_coroutine},
            {NULL, NULL}};
        for (const luaL_Reg *l = libs; l->name; l++) {
            luaL_requiref(L, l->name, l->func, 1);
            lua_pop(L, 1);
        }
        open_safe_os(L);
        /* loaders reach the file system, and load() would accept bytecode */
        static const char *const drop[] = {"dofile", "loadfile", "load", "require", NULL};
        for (int i = 0; drop[i]; i++) {
            lua_pushnil(L);
            lua_setglobal(L, drop[i]);
        }
    }
    sd_lua_bind_open(L);
    return 0;
}

/* ---- the run budget -------------------------------------------------------- */

#define HOOK_EVERY 10000 /* instructions between checks */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void budget_hook(lua_State *L, lua_Debug *ar) {
    sd_lua_vm *vm = sd_lua_vm_of(L);
    if (!vm->stop) {
        vm->executed += HOOK_EVERY;
        if (vm->interrupt && *vm->interrupt) vm->stop = VM_STOP_INTERRUPT;
        else if (vm->max_instructions && vm->executed > vm->max_instructions) vm->stop = VM_STOP_INSTRUCTIONS;
        else if (vm->deadline > 0 && now_s() > vm->deadline) vm->stop = VM_STOP_TIME;
        if (!vm->stop) return;
        /* from now on at every instruction: a pcall in the script may catch
         * the error once, but the next instruction outside raises it again */
        lua_sethook(L, budget_hook, LUA_MASKCOUNT, 1);
    }
    int line = lua_getinfo(L, "l", ar) && ar->currentline > 0 ? ar->currentline : 0;
    char where[64] = "";
    if (line) snprintf(where, sizeof where, ":%d", line);
    const char *name = vm->chunkname ? vm->chunkname : "the Lua workflow";
    switch (vm->stop) {
    case VM_STOP_INTERRUPT: lua_pushfstring(L, "%s%s: interrupted", name, where); break;
    case VM_STOP_INSTRUCTIONS:
        lua_pushfstring(L, "%s%s: the script ran past its budget of %I Lua instructions (endless loop?); "
                        "raise it with --lua-max-instructions or SDFLOW_LUA_MAX_INSTRUCTIONS (0 = no limit)",
                        name, where, (lua_Integer)vm->max_instructions);
        break;
    default:
        lua_pushfstring(L, "%s%s: the script ran longer than its budget of %f s (endless loop?); "
                        "raise it with --lua-timeout or SDFLOW_LUA_TIMEOUT (0 = no limit)",
                        name, where, (lua_Number)vm->max_seconds);
        break;
    }
    lua_error(L);
}

void sd_lua_vm_budget(sd_lua_vm *vm, const sd_lua_opts *opts, const char *chunkname) {
    unsigned long long max = opts ? opts->max_instructions : 0;
    vm->max_instructions = max == 0 ? SD_LUA_DEFAULT_MAX_INSTRUCTIONS : max == ULLONG_MAX ? 0 : max;
    vm->max_seconds = opts && opts->max_seconds > 0 ? opts->max_seconds : 0;
    vm->deadline = vm->max_seconds > 0 ? now_s() + vm->max_seconds : 0;
    vm->interrupt = opts ? opts->interrupt : NULL;
    vm->chunkname = chunkname;
    vm->executed = 0;
    vm->stop = VM_STOP_NONE;
    lua_sethook(vm->L, budget_hook, LUA_MASKCOUNT, HOOK_EVERY);
}

sd_status sd_lua_vm_pcall(sd_lua_vm *vm, int nargs, int nres, sd_error *err) {
    lua_State *L = vm->L;
    int rc = lua_pcall(L, nargs, nres, 0);
    if (rc == LUA_OK) return SD_OK;
    const char *msg = lua_tostring(L, -1);
    if (!msg) msg = luaL_typename(L, -1);
    sd_status code = rc == LUA_ERRMEM ? SD_ERR_NOMEM : vm->stop == VM_STOP_INTERRUPT ? SD_ERR_CANCELLED : SD_ERR_INVALID;
    sd_error_set(err, code, "%s", rc == LUA_ERRMEM ? "Lua ran out of memory (heap limit reached)" : msg);
    lua_pop(L, 1);
    return code;
}

sd_status sd_lua_vm_new(const sd_lua_opts *opts, sd_lua_vm **out, sd_error *err) {
    *out = NULL;
    sd_lua_vm *vm = calloc(1, sizeof *vm);
    if (!vm) return sd_error_set(err, SD_ERR_NOMEM, "out of memory creating the Lua state");
    vm->limit = opts && opts->mem_limit ? opts->mem_limit : DEFAULT_LIMIT;
    vm->L = lua_newstate(vm_alloc, vm);
    if (!vm->L) {
        free(vm);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory creating the Lua state");
    }
    *(sd_lua_vm **)lua_getextraspace(vm->L) = vm;
    lua_pushcfunction(vm->L, open_libs);
    lua_pushboolean(vm->L, opts && opts->allow_unsafe);
    sd_status rc = sd_lua_vm_pcall(vm, 1, 0, err);
    if (rc) {
        sd_lua_vm_free(vm);
        return rc;
    }
    *out = vm;
    return SD_OK;
}

void sd_lua_vm_free(sd_lua_vm *vm) {
    if (!vm) return;
    if (vm->L) lua_close(vm->L);
    free(vm);
}
