/* test_lua_text.c - Lua strings that cannot pass unchanged (a NUL, bytes that
 * are not UTF-8) are refused in every place a string enters the graph:
 * input values (lists too), input names, _id, _title, Node's class_type,
 * link ids and assignments; the error names the node, the input and the byte
 * offset. A PNG whose prompt chunk holds such a string is refused too
 * (sd_lua_load_any, the path of `sdflow run PICTURE.png`). */
#include <stdlib.h>
#include <string.h>
#include "core/graph.h"
#include "core/node.h"
#include "formats/png.h"
#include "lua/sdlua.h"
#include "testutil.h"

/* Lua source; `expect` NULL: must build; else the error must hold every
 * '|'-separated piece of it. Lua escapes ("\0", "\xff") reach the VM as bytes. */
static void run(const char *src, const char *expect) {
    sd_graph *g = NULL;
    sd_error err;
    sd_error_clear(&err);
    sd_status rc = sd_lua_load_graph_string(src, "t.lua", NULL, &g, &err);
    if (!expect) {
        CHECK_OK(rc, &err);
    } else {
        CHECK_MSG(rc != SD_OK, "accepted: %s", src);
        char pieces[512];
        snprintf(pieces, sizeof pieces, "%s", expect);
        for (char *p = strtok(pieces, "|"); p; p = strtok(NULL, "|"))
            CHECK_MSG(strstr(err.msg, p), "%s\n  error '%s' lacks '%s'", src, err.msg, p);
    }
    sd_graph_free(g);
}

static void test_lua(void) {
    const char *ck = "local c = CheckpointLoaderSimple{ckpt_name = 'a.safetensors'}\n";
    char src[1024];
#define WITH(line) (snprintf(src, sizeof src, "%s%s\nSaveImage{images = link('9', 0)}\n", ck, line), src)
    /* a prompt with \0 used to be refused without saying where; now with the offset */
    run(WITH("CLIPTextEncode{clip = c.CLIP, text = 'water\\0mark'}"),
        "t.lua:2:|node 2 (CLIPTextEncode)|input 'text'|NUL character at byte 5");
    run(WITH("CLIPTextEncode{clip = c.CLIP, text = 'caf\\xc3\\xa9 \\xff'}"),
        "node 2 (CLIPTextEncode)|input 'text'|not valid UTF-8 at byte 6");
    run(WITH("CLIPTextEncode{clip = c.CLIP, text = 'ok', extra = {'a', 'b\\xc0\\x80'}}"),
        "input 'extra'|not valid UTF-8 at byte 1");
    run(WITH("CLIPTextEncode{clip = c.CLIP, text = 'x', _id = 'a\\0b'}"), "_id holds a NUL character at byte 1");
    run(WITH("CLIPTextEncode{clip = c.CLIP, text = 'x', _title = '\\xed\\xa0\\x80'}"),
        "_title holds bytes that are not valid UTF-8 at byte 0");
    run(WITH("CLIPTextEncode{clip = c.CLIP, ['te\\0xt'] = 'x'}"), "CLIPTextEncode: an input name holds a NUL");
    run(WITH("Node('Bad\\0Class', {})"), "the class_type holds a NUL character at byte 3");
    run(WITH("CLIPTextEncode{clip = link('1\\0x', 1), text = 'x'}"), "the node id holds a NUL character at byte 1");
    run(WITH("local t = CLIPTextEncode{clip = c.CLIP, text = 'x'}\nt.text = 'y\\0'"),
        "t.lua:3:|node 2 (CLIPTextEncode)|input 'text'|NUL character at byte 1");
    run(WITH("local t = CLIPTextEncode{clip = c.CLIP, text = 'x'}\nt['\\xff'] = 'y'"),
        "an input name holds bytes that are not valid UTF-8 at byte 0");
    /* UTF-8 of every length passes */
    run(WITH("CLIPTextEncode{clip = c.CLIP, text = 'caf\\xc3\\xa9 \\u{20ac} \\u{1F600} \\n\\t', _title = '\\u{263A}'}"),
        NULL);
#undef WITH
}

/* `sdflow run picture.png` reads the prompt chunk: the same refusal, naming
 * node and input (the chunk is iTXt: the text is not Latin-1). */
static void test_png_prompt(void) {
    const char *dir = sd_test_tmpdir("lua_text");
    char path[4096];
    snprintf(path, sizeof path, "%s/bad.png", dir);
    sd_tensor *img = sd_tensor_new4(SD_F32, 4, 1, 2, 2, 3); /* [1, H, W, C] */
    CHECK(img != NULL);
    if (!img) return;
    memset(sd_tensor_f32(img), 0, 12 * sizeof(float));
    sd_png_text texts[] = {{"prompt", "{\"6\": {\"class_type\": \"CLIPTextEncode\", \"inputs\": "
                                      "{\"text\": \"caf\xc3\xa9 \xff\", \"clip\": [\"4\", 1]}}}"}};
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_png_write(path, img, texts, 1, 1, &err), &err);
    sd_graph *g = NULL;
    CHECK(sd_lua_load_any(path, NULL, &g, &err) == SD_ERR_FORMAT && !g);
    CHECK_MSG(!strcmp(err.node_id, "6") && !strcmp(err.input, "text") && strstr(err.msg, "not valid UTF-8 at byte 6"),
              "node '%s' input '%s': %s", err.node_id, err.input, err.msg);
    sd_graph_free(g);

    texts[0].value = "{\"6\": {\"class_type\": \"CLIPTextEncode\", \"inputs\": {\"text\": \"water\\u0000mark\"}}}";
    CHECK_OK(sd_png_write(path, img, texts, 1, 1, &err), &err);
    CHECK(sd_lua_load_any(path, NULL, &g, &err) == SD_ERR_FORMAT && !g);
    CHECK_MSG(!strcmp(err.node_id, "6") && strstr(err.msg, "NUL character at byte 5"), "%s", err.msg);
    sd_graph_free(g);

    /* a JSON file with a raw NUL byte: C would read the text as ending there */
    snprintf(path, sizeof path, "%s/nul.json", dir);
    FILE *f = fopen(path, "wb");
    static const char body[] = "{\"1\": {\"class_type\": \"X\", \"inputs\": {}}}\0{\"2\": 1}";
    fwrite(body, 1, sizeof body - 1, f);
    fclose(f);
    CHECK(sd_lua_load_any(path, NULL, &g, &err) == SD_ERR_FORMAT && !g);
    CHECK_MSG(strstr(err.msg, "NUL byte at byte 40"), "%s", err.msg);
    sd_graph_free(g);
    sd_tensor_unref(img);
}

int main(void) {
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_nodes_register_all(&err), &err);
    test_lua();
    test_png_prompt();
    return sd_test_finish();
}
