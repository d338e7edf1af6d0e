/* test_lua_budget.c - a Lua workflow script cannot run forever: an
 * instruction budget and a wall-time budget stop it with an error naming the
 * script and line, a pcall inside the script cannot swallow that error, and
 * the Ctrl-C flag stops it as SD_ERR_CANCELLED (sdlua.h). No timing is
 * asserted: the wall-time case only needs to end. */
#include <limits.h>
#include <string.h>
#include "core/node.h"
#include "lua/sdlua.h"
#include "testutil.h"

static sd_status load(const char *src, const sd_lua_opts *o, sd_error *err) {
    sd_graph *g = NULL;
    sd_error_clear(err);
    sd_status rc = sd_lua_load_graph_string(src, "wf.lua", o, &g, err);
    sd_graph_free(g);
    return rc;
}

int main(void) {
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_nodes_register_all(&err), &err);
    const char *endless = "local x = 0\nwhile true do x = x + 1 end\n";
    const char *stubborn = "EmptyImage{}\nwhile true do\n  pcall(function() while true do end end)\nend\n";

    sd_lua_opts o = {.max_instructions = 2000000};
    CHECK(load(endless, &o, &err) == SD_ERR_INVALID);
    CHECK_MSG(strstr(err.msg, "wf.lua:2: the script ran past its budget of 2000000 Lua instructions") &&
              strstr(err.msg, "--lua-max-instructions"), "%s", err.msg);
    CHECK(load(stubborn, &o, &err) == SD_ERR_INVALID);
    CHECK_MSG(strstr(err.msg, "wf.lua:3: the script ran past its budget"), "%s", err.msg);

    /* wall time only (no instruction limit) */
    sd_lua_opts t = {.max_instructions = ULLONG_MAX, .max_seconds = 0.2};
    CHECK(load(stubborn, &t, &err) == SD_ERR_INVALID);
    CHECK_MSG(strstr(err.msg, "wf.lua:3: the script ran longer than its budget of 0.2 s") &&
              strstr(err.msg, "--lua-timeout"), "%s", err.msg);

    /* Ctrl-C: the flag stops the script as cancelled */
    volatile sig_atomic_t flag = 1;
    sd_lua_opts c = {.max_instructions = ULLONG_MAX, .interrupt = &flag};
    CHECK(load(endless, &c, &err) == SD_ERR_CANCELLED);
    CHECK_MSG(strstr(err.msg, "wf.lua:2: interrupted"), "%s", err.msg);

    /* a script within its budget is not disturbed; the budget is per run */
    sd_lua_opts small = {.max_instructions = 200000};
    const char *busy = "local s = 0\nfor i = 1, 10000 do s = s + i end\nlocal img = EmptyImage{}\n"
                       "SaveImage{images = img}\n";
    CHECK_OK(load(busy, &small, &err), &err);
    CHECK_OK(load(busy, &small, &err), &err);
    flag = 0;
    CHECK_OK(load(busy, &c, &err), &err);
    return sd_test_finish();
}
