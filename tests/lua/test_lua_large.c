/* test_lua_large.c - a Lua workflow that builds 10,000 nodes in a loop gets
 * them all, with the usual ids (1, 2, 3, ...) and links (it took minutes
 * when each automatic id was probed by scanning the graph), and prints back
 * as a Lua workflow that builds the same graph. Not timed:
 * bench/graph prints the curve. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/graph.h"
#include "core/node.h"
#include "lua/sdlua.h"
#include "testutil.h"

enum { N = 10000 };

int main(void) {
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_nodes_register_all(&err), &err);
    char script[512];
    snprintf(script, sizeof script,
             "local img = LoadImage{image = 'in.png'}.IMAGE\n"
             "for i = 1, %d do img = ImageInvert{image = img} end\n"
             "SaveImage{images = img, filename_prefix = 'big'}\n",
             N);
    sd_graph *g = NULL;
    CHECK_OK(sd_lua_load_graph_string(script, "big.lua", NULL, &g, &err), &err);
    if (!g) return sd_test_finish();
    CHECK_MSG(sd_graph_count(g) == N + 2, "%zu nodes", sd_graph_count(g));
    int ok = 1;
    for (int i = 1; i <= N + 2; i++) {
        char id[16], prev[16];
        snprintf(id, sizeof id, "%d", i);
        snprintf(prev, sizeof prev, "%d", i - 1);
        const sd_graph_node *n = sd_graph_find(g, id);
        if (!n || sd_graph_index_of(g, id) != (size_t)(i - 1)) { ok = 0; break; }
        const char *want = i == 1 ? "LoadImage" : i == N + 2 ? "SaveImage" : "ImageInvert";
        if (strcmp(n->class_type, want)) ok = 0;
        if (i > 1) {
            const sd_graph_input *in = sd_graph_node_input(n, i == N + 2 ? "images" : "image");
            if (!in || !in->is_link || strcmp(in->src_id, prev) || in->src_index != 0) ok = 0;
        }
    }
    CHECK(ok);

    /* printed back as Lua (a table of nodes past 180 locals) and read again:
     * the same graph (the order of the text took O(n^2) finds before) */
    char *text = sd_lua_export(g, "big.lua");
    CHECK(text != NULL);
    sd_graph *back = NULL;
    if (text) CHECK_OK(sd_lua_load_graph_string(text, "export.lua", NULL, &back, &err), &err);
    free(text);
    if (back) {
        CHECK(sd_graph_count(back) == N + 2);
        const sd_graph_node *last = sd_graph_find(back, "10002");
        const sd_graph_input *in = last ? sd_graph_node_input(last, "images") : NULL;
        CHECK(last && !strcmp(last->class_type, "SaveImage") && in && in->is_link && !strcmp(in->src_id, "10001"));
        CHECK(sd_graph_index_of(back, "1") == 0); /* dependency order: the loader first */
    }
    sd_graph_free(back);
    sd_graph_free(g);
    return sd_test_finish();
}
