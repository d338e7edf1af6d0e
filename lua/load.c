/* load.c - running a Lua workflow into a graph; loading any workflow file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "formats/workflow_file.h"
#include "lua_internal.h"

sd_status sd_lua_read_file(const char *path, char **out, size_t *len, sd_error *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return sd_error_set(err, errno == ENOENT ? SD_ERR_NOT_FOUND : SD_ERR_IO, "cannot open '%s': %s", path,
                            strerror(errno));
    size_t cap = 1 << 14, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *b = realloc(buf, cap * 2);
            if (!b) { free(buf); buf = NULL; break; }
            buf = b;
            cap *= 2;
        }
        size_t k = fread(buf + n, 1, cap - n - 1, f);
        n += k;
        if (k == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) return sd_error_set(err, SD_ERR_NOMEM, "out of memory reading '%s'", path);
    if (bad) { free(buf); return sd_error_set(err, SD_ERR_IO, "cannot read '%s'", path); }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return SD_OK;
}

/* Runs `text` in a fresh sandboxed state whose constructors add to a new graph. */
static sd_status run_chunk(const char *text, size_t len, const char *chunkname, const sd_lua_opts *opts,
                           sd_graph **out, sd_error *err) {
    *out = NULL;
    sd_lua_vm *vm;
    sd_status rc = sd_lua_vm_new(opts, &vm, err);
    if (rc) return rc;
    sd_graph *g = sd_graph_new();
    if (!g) { sd_lua_vm_free(vm); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    vm->graph = g;
    /* "@name" makes Lua report the name itself in messages and origins */
    size_t cn = strlen(chunkname) + 2;
    char *at = malloc(cn);
    if (!at) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    else snprintf(at, cn, "@%s", chunkname);
    if (!rc) {
        /* text only: a precompiled chunk could crash the VM */
        int lrc = luaL_loadbufferx(vm->L, text, len, at, "t");
        if (lrc != LUA_OK) {
            rc = sd_error_set(err, lrc == LUA_ERRMEM ? SD_ERR_NOMEM : SD_ERR_INVALID, "%s",
                              lua_tostring(vm->L, -1) ? lua_tostring(vm->L, -1) : "cannot load");
            lua_pop(vm->L, 1);
        } else {
            sd_lua_vm_budget(vm, opts, chunkname);
            rc = sd_lua_vm_pcall(vm, 0, 0, err);
        }
    }
    free(at);
    sd_lua_vm_free(vm);
    if (rc) { sd_graph_free(g); return rc; }
    if (sd_graph_count(g) == 0) {
        sd_graph_free(g);
        return sd_error_set(err, SD_ERR_INVALID, "%s: the Lua workflow created no node", chunkname);
    }
    *out = g;
    return SD_OK;
}

sd_status sd_lua_load_graph_string(const char *text, const char *chunkname, const sd_lua_opts *opts,
                                   sd_graph **out, sd_error *err) {
    return run_chunk(text, strlen(text), chunkname ? chunkname : "workflow.lua", opts, out, err);
}

sd_status sd_lua_load_graph(const char *path, const sd_lua_opts *opts, sd_graph **out, sd_error *err) {
    *out = NULL;
    char *text;
    size_t len;
    sd_status rc = sd_lua_read_file(path, &text, &len, err);
    if (rc) return rc;
    /* skip a "#!" line as the lua interpreter does, keeping line numbers */
    if (len >= 2 && text[0] == '#' && text[1] == '!') text[0] = text[1] = '-';
    rc = run_chunk(text, len, path, opts, out, err);
    free(text);
    return rc;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcasecmp(s + a - b, suffix) == 0;
}

sd_status sd_lua_load_any(const char *path, const sd_lua_opts *opts, sd_graph **out, sd_error *err) {
    *out = NULL;
    if (ends_with(path, ".lua")) return sd_lua_load_graph(path, opts, out, err);
    /* JSON in either form, or a picture's embedded workflow */
    sd_workflow_file wf;
    sd_status rc = sd_workflow_file_read(path, &wf, err);
    if (!rc) rc = sd_graph_from_json(wf.text, path, out, err);
    sd_workflow_file_free(&wf);
    return rc;
}
