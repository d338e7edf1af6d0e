/* Recipe meta: contents (files with size and SHA-256, seeds, version),
 * determinism, verification of changed/missing/unlisted files, reading the
 * meta back from recipe text, and merging it into extra_pnginfo. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/env.h"
#include "core/graph.h"
#include "core/sha256.h"
#include "lua/recipe.h"
#include "testutil.h"

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

int main(void) {
    sd_error err;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    const char *tmp = sd_test_tmpdir("lua_recipe");
    char in_dir[4096], a[4200], b[4200];
    snprintf(in_dir, sizeof in_dir, "%s/input", tmp);
    char cmd[8300];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", in_dir);
    CHECK(system(cmd) == 0);
    snprintf(a, sizeof a, "%s/a.png", in_dir);
    snprintf(b, sizeof b, "%s/b.png", in_dir);
    write_file(a, "first file");
    write_file(b, "second");

    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.input_dir, in_dir, &err), &err);

    const char *wf = "{\"1\": {\"class_type\": \"LoadImage\", \"inputs\": {\"image\": \"a.png\"}},"
                     " \"2\": {\"class_type\": \"LoadImage\", \"inputs\": {\"image\": \"b.png\"}},"
                     " \"3\": {\"class_type\": \"Custom\", \"inputs\": {\"seed\": 9007199254740993,"
                     " \"noise_seed\": 5, \"image\": [\"1\", 0]}}}";
    sd_graph *g = NULL;
    CHECK_OK(sd_graph_from_json(wf, "wf", &g, &err), &err);
    if (!g) return sd_test_finish();

    char *meta = NULL, *meta2 = NULL;
    CHECK_OK(sd_recipe_describe(g, &env, NULL, "1.2.3", "opts", &meta, &err), &err);
    CHECK_OK(sd_recipe_describe(g, &env, NULL, "1.2.3", "opts", &meta2, &err), &err);
    CHECK(meta && meta2 && !strcmp(meta, meta2)); /* nothing time- or machine-dependent */
    uint8_t h[32];
    char hex[65];
    sd_sha256("first file", 10, h);
    sd_sha256_hex(h, hex);
    CHECK(meta && strstr(meta, hex) && strstr(meta, "\"size\":10"));
    CHECK(meta && strstr(meta, "\"name\":\"b.png\"") && strstr(meta, "\"folder\":\"input\""));
    CHECK(meta && strstr(meta, "\"seed\":9007199254740993")); /* every digit of a big seed */
    CHECK(meta && strstr(meta, "\"noise_seed\":5"));
    CHECK(meta && strstr(meta, "\"version\":\"1.2.3\"") && strstr(meta, "\"build\":\"opts\""));

    /* unchanged files verify */
    CHECK_OK(sd_recipe_verify(g, &env, meta, &err), &err);
    /* a changed file is named, with both hashes */
    write_file(b, "second!");
    sd_status rc = sd_recipe_verify(g, &env, meta, &err);
    CHECK(rc == SD_ERR_INVALID && strstr(err.msg, "input/b.png differs") && !strstr(err.msg, "a.png"));
    write_file(b, "second");
    CHECK_OK(sd_recipe_verify(g, &env, meta, &err), &err);
    /* a file the graph names that the recipe does not list */
    sd_graph_node *n;
    CHECK_OK(sd_graph_add_node(g, "4", "LoadImage", &n, &err), &err);
    write_file(a, "first file"); /* same content under a new name below */
    char c[4200];
    snprintf(c, sizeof c, "%s/c.png", in_dir);
    write_file(c, "third");
    sd_graph_set_literal(n, "image", sd_value_string("c.png"), &err);
    rc = sd_recipe_verify(g, &env, meta, &err);
    CHECK(rc == SD_ERR_INVALID && strstr(err.msg, "c.png") && strstr(err.msg, "not in the recipe"));
    /* a missing file */
    remove(c);
    rc = sd_recipe_verify(g, &env, meta, &err);
    CHECK(rc == SD_ERR_NOT_FOUND && strstr(err.msg, "c.png"));
    sd_graph_remove_node(g, "4", &err);
    /* a malformed meta */
    CHECK(sd_recipe_verify(g, &env, "{\"files\": 3}", &err) == SD_ERR_FORMAT);
    CHECK(sd_recipe_verify(g, &env, "not json", &err) == SD_ERR_FORMAT);

    /* written recipe: parses as a workflow and gives the meta back */
    char path[4200];
    snprintf(path, sizeof path, "%s/r.json", tmp);
    CHECK_OK(sd_recipe_write(path, g, meta, &err), &err);
    char *text = sd_test_read_file(path, NULL);
    CHECK(text != NULL);
    char *back = NULL;
    if (text) CHECK_OK(sd_recipe_meta_of_text(text, &back, &err), &err);
    /* (cJSON reads numbers as doubles, so compare what matters, not bytes) */
    CHECK(back && strstr(back, hex) && strstr(back, "\"version\":\"1.2.3\""));
    if (back) CHECK_OK(sd_recipe_verify(g, &env, back, &err), &err);
    sd_graph *g2 = NULL;
    if (text) CHECK_OK(sd_graph_from_json(text, "r.json", &g2, &err), &err);
    CHECK(g2 && sd_graph_count(g2) == 3);
    char *none = NULL;
    CHECK_OK(sd_recipe_meta_of_text(wf, &none, &err), &err);
    CHECK(none == NULL);

    /* extra_pnginfo keeps its keys and gains the meta */
    char *merged = sd_recipe_merge_pnginfo("{\"workflow\": {\"x\": 1}}", meta);
    CHECK(merged && strstr(merged, "\"workflow\"") && strstr(merged, "\"sdflow_recipe\"") && strstr(merged, hex));
    char *alone = sd_recipe_merge_pnginfo(NULL, meta);
    CHECK(alone && strstr(alone, "\"sdflow_recipe\""));
    CHECK(sd_recipe_merge_pnginfo("[1]", meta) == NULL);

    free(merged);
    free(alone);
    free(back);
    free(text);
    free(meta);
    free(meta2);
    sd_graph_free(g2);
    sd_graph_free(g);
    sd_env_cleanup(&env);
    return sd_test_finish();
}
