/* vm.c - a Lua state with our allocator, a heap limit and the sandboxed
 * standard library (see sdlua.h). */
#include <lualib.h>
#include <stdlib.h>
#include <string.h>
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

sd_status sd_lua_vm_pcall(sd_lua_vm *vm, int nargs, int nres, sd_error *err) {
    lua_State *L = vm->L;
    int rc = lua_pcall(L, nargs, nres, 0);
    if (rc == LUA_OK) return SD_OK;
    const char *msg = lua_tostring(L, -1);
    if (!msg) msg = luaL_typename(L, -1);
    sd_status code = rc == LUA_ERRMEM ? SD_ERR_NOMEM : SD_ERR_INVALID;
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
