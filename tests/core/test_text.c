/* test_text.c - strings that cannot pass unchanged are refused where they
 * come in, naming node, input and byte offset: "\u0000" (which cJSON turns
 * into a NUL that cuts the string) and bytes that are not UTF-8, in workflow
 * JSON, the /prompt wrapper, generic JSON and --set; and control characters
 * are escaped wherever error lines are made (core/text.h). */
#include <stdlib.h>
#include <string.h>
#include "core/graph.h"
#include "core/json_util.h"
#include "core/text.h"
#include "testutil.h"

static void test_check(void) {
    size_t at = 99;
    CHECK(sd_text_check("plain ascii", 11, &at) == SD_TEXT_OK);
    CHECK(sd_text_check("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14, &at) == SD_TEXT_OK); /* é € 😀 */
    CHECK(sd_text_check("water\0mark", 10, &at) == SD_TEXT_NUL && at == 5);
    CHECK(sd_text_check("ab\xff", 3, &at) == SD_TEXT_BAD_UTF8 && at == 2);
    CHECK(sd_text_check("x\xc0\x80", 3, &at) == SD_TEXT_BAD_UTF8 && at == 1);          /* overlong NUL */
    CHECK(sd_text_check("\xe0\x80\xaf", 3, &at) == SD_TEXT_BAD_UTF8 && at == 0);       /* overlong '/' */
    CHECK(sd_text_check("\xed\xa0\x80", 3, &at) == SD_TEXT_BAD_UTF8 && at == 0);       /* a surrogate */
    CHECK(sd_text_check("\xf4\x90\x80\x80", 4, &at) == SD_TEXT_BAD_UTF8 && at == 0);   /* past U+10FFFF */
    CHECK(sd_text_check("ok\xe2\x82", 4, &at) == SD_TEXT_BAD_UTF8 && at == 2);         /* cut short */
    CHECK(sd_text_check("\x80", 1, &at) == SD_TEXT_BAD_UTF8 && at == 0);               /* lone continuation */
    CHECK(sd_text_check("\xf4\x8f\xbf\xbf", 4, &at) == SD_TEXT_OK);                    /* U+10FFFF */
}

static void test_escape(void) {
    char buf[256];
    sd_text_escape("red\x1b[31mX\x1b[0m", 0, buf, sizeof buf);
    CHECK_MSG(!strcmp(buf, "red\\e[31mX\\e[0m"), "%s", buf);
    CHECK(!strchr(buf, 0x1b));
    sd_text_escape("a\rb\nc\td\x07", 0, buf, sizeof buf);
    CHECK_MSG(!strcmp(buf, "a\\rb\\nc\\td\\x07"), "%s", buf);
    sd_text_escape("a\rb\nc\td", 1, buf, sizeof buf);
    CHECK_MSG(!strcmp(buf, "a\\rb\nc\td"), "%s", buf);
    sd_text_escape("csi\xc2\x9b" "2J caf\xc3\xa9 \xff!", 0, buf, sizeof buf); /* U+009B is a C1 CSI */
    CHECK_MSG(!strcmp(buf, "csi\\u009b2J caf\xc3\xa9 \\xff!"), "%s", buf);
    sd_text_escape("\x7f", 0, buf, sizeof buf);
    CHECK(!strcmp(buf, "\\x7f"));
    char small[6];
    sd_text_escape("ab\x1b\x1b", 0, small, sizeof small); /* no escape cut in half */
    CHECK_MSG(!strcmp(small, "ab\\e"), "%s", small);
    sd_text_escape(NULL, 0, buf, sizeof buf);
    CHECK(buf[0] == 0);
}

/* sd_graph_from_json refuses; err names node, input and the offset. */
static void expect_refused(const char *json, const char *node, const char *input, const char *what,
                           size_t offset) {
    sd_graph *g = NULL;
    sd_error err;
    sd_error_clear(&err);
    sd_status rc = sd_graph_from_json(json, "wf.json", &g, &err);
    CHECK_MSG(rc == SD_ERR_FORMAT && !g, "accepted: %s", json);
    sd_graph_free(g);
    char want[64];
    snprintf(want, sizeof want, "at byte %zu", offset);
    CHECK_MSG(strstr(err.msg, what) && strstr(err.msg, want), "%s: message '%s'", json, err.msg);
    CHECK_MSG(!strcmp(err.node_id, node ? node : ""), "%s: node '%s'", json, err.node_id);
    CHECK_MSG(!strcmp(err.input, input ? input : ""), "%s: input '%s'", json, err.input);
}

static void test_workflow_json(void) {
    /* the prompt of issue 14: "water\u0000mark" ran as "water" */
    expect_refused("{\"6\": {\"class_type\": \"CLIPTextEncode\", \"inputs\": {\"text\": \"water\\u0000mark\"}}}",
                   "6", "text", "NUL", 5);
    /* a model name with \u0000/../../x loaded the prefix */
    expect_refused("{\"4\": {\"class_type\": \"CheckpointLoaderSimple\", \"inputs\": {\"ckpt_name\": "
                   "\"v1.safetensors\\u0000/../../x\"}}}", "4", "ckpt_name", "NUL", 14);
    /* raw bytes that are not UTF-8, after a 4-byte emoji written as a surrogate pair */
    expect_refused("{\"6\": {\"class_type\": \"CLIPTextEncode\", \"inputs\": {\"text\": \"\\ud83d\\ude00 a \xff\"}}}",
                   "6", "text", "not valid UTF-8", 7);
    /* inside the /prompt wrapper, in a list value */
    expect_refused("{\"prompt\": {\"9\": {\"class_type\": \"X\", \"inputs\": {\"v\": {\"__value__\": [\"ok\", \"b\\u0000\"]}}}}}",
                   "9", "v", "NUL", 1);
    /* the node id itself, the class_type, an input name */
    expect_refused("{\"a\\u0000b\": {\"class_type\": \"X\", \"inputs\": {}}}", "a", NULL, "the node id holds", 1);
    expect_refused("{\"3\": {\"class_type\": \"KSampler\\u0000\", \"inputs\": {}}}", "3", NULL, "the class_type", 8);
    expect_refused("{\"3\": {\"class_type\": \"KSampler\", \"inputs\": {\"se\\u0000ed\": 1}}}", "3", "se",
                   "the input name", 2);
    /* a string elsewhere in the file: no node to name, the path instead */
    expect_refused("{\"extra_data\": {\"note\": \"x\\u0000\"}, \"1\": {\"class_type\": \"X\", \"inputs\": {}}}", NULL,
                   NULL, "/extra_data/note", 1);

    /* what is fine stays fine, escapes and all */
    sd_graph *g = NULL;
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_graph_from_json("{\"6\": {\"class_type\": \"CLIPTextEncode\", \"inputs\": {\"text\": "
                                "\"caf\xc3\xa9 \\u00e9 \\ud83d\\ude00 \\\\u0000 \\\"q\\\" \\n\"}}}", "wf.json", &g, &err),
             &err);
    const sd_graph_node *n = g ? sd_graph_find(g, "6") : NULL;
    const sd_graph_input *in = n ? sd_graph_node_input(n, "text") : NULL;
    CHECK(in && !strcmp(sd_value_as_string(in->literal), "caf\xc3\xa9 \xc3\xa9 \xf0\x9f\x98\x80 \\u0000 \"q\" \n"));
    sd_graph_free(g);
}

static void test_generic_json(void) {
    cJSON *j = NULL;
    sd_error err;
    sd_error_clear(&err);
    CHECK(sd_json_parse("{\"a\": [\"x\", \"y\\u0000\"]}", "meta", &j, &err) == SD_ERR_FORMAT && !j);
    CHECK_MSG(strstr(err.msg, "meta:1:") && strstr(err.msg, "/a/[1]") && strstr(err.msg, "at byte 1"), "%s", err.msg);
    CHECK(sd_json_parse("[\"\xc3\"]", "meta", &j, &err) == SD_ERR_FORMAT && !j);
    CHECK_MSG(strstr(err.msg, "/[0]") && strstr(err.msg, "not valid UTF-8"), "%s", err.msg);
    CHECK_OK(sd_json_parse("{\"k\": \"\\u0001 fine\"}", "meta", &j, &err), &err);
    cJSON_Delete(j);
}

static void test_set(void) {
    sd_graph *g = NULL;
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_graph_from_json("{\"6\": {\"class_type\": \"CLIPTextEncode\", \"inputs\": {\"text\": \"a\"}}}",
                                "wf.json", &g, &err), &err);
    if (!g) return;
    /* a quoted JSON string with \u0000 used to fall back to the text taken literally */
    CHECK(sd_graph_apply_set(g, "6.text=\"water\\u0000mark\"", &err) == SD_ERR_INVALID);
    CHECK_MSG(strstr(err.msg, "NUL") && strstr(err.msg, "byte 5") && !strcmp(err.node_id, "6") &&
              !strcmp(err.input, "text"), "%s", err.msg);
    sd_error_clear(&err);
    CHECK(sd_graph_apply_set(g, "6.text=bad \xfe byte", &err) == SD_ERR_INVALID);
    CHECK_MSG(strstr(err.msg, "UTF-8") && strstr(err.msg, "byte 4"), "%s", err.msg);
    const sd_graph_input *in = sd_graph_node_input(sd_graph_find(g, "6"), "text");
    CHECK(in && !strcmp(sd_value_as_string(in->literal), "a")); /* unchanged */
    CHECK_OK(sd_graph_apply_set(g, "6.text=caf\xc3\xa9", &err), &err);
    sd_graph_free(g);
}

/* Error lines: ids and messages from a workflow never carry raw control
 * characters to the terminal. */
static void test_error_format(void) {
    sd_error err;
    sd_error_clear(&err);
    sd_error_set(&err, SD_ERR_INVALID, "file '\x1b]0;pwned\x07' not found\nsecond line");
    sd_error_at(&err, "7\x1b[2J", "Evil\x1b[31m", "in\rput");
    char buf[1024];
    sd_error_format(&err, buf, sizeof buf);
    CHECK_MSG(!strchr(buf, 0x1b) && !strchr(buf, 0x07) && !strchr(buf, '\r'), "%s", buf);
    CHECK_MSG(strstr(buf, "node 7\\e[2J (Evil\\e[31m) input 'in\\rput': file '\\e]0;pwned\\x07' not found\nsecond line"),
              "%s", buf);
}

int main(void) {
    test_check();
    test_escape();
    test_workflow_json();
    test_generic_json();
    test_set();
    test_error_format();
    return sd_test_finish();
}
