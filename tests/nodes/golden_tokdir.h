/* golden_tokdir.h - a --tokenizer-dir for node tests that load text
 * encoders: the CLIP vocabulary (../shared/data/clip), the T5 tokenizer of the
 * Flux set (t5_tokenizer/tokenizer.json) and the Qwen2 tokenizer files of
 * the Z-Image set (qwen25_tokenizer/), each linked under ComfyUI's folder
 * name from what the sets' manifests list; an absent set links nothing. Not
 * a test on its own. */
#ifndef SD_TEST_GOLDEN_TOKDIR_H
#define SD_TEST_GOLDEN_TOKDIR_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "golden.h"
#include "models/checkpoint/checkpoint.h"
#include "testutil.h"

static inline void gt_link(const char *target, const char *dir, const char *rel) {
    char src[4200], dst[4200], cmd[8600], cwd[2048];
    if (target[0] == '/' || !getcwd(cwd, sizeof cwd)) snprintf(src, sizeof src, "%s", target);
    else snprintf(src, sizeof src, "%s/%s", cwd, target);
    if (access(src, R_OK) != 0) return;
    snprintf(dst, sizeof dst, "%s/%s", dir, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", dst);
    CHECK(system(cmd) == 0);
    unlink(dst);
    CHECK_MSG(symlink(src, dst) == 0, "symlink %s", dst);
}

/* Fills dir (created) with the tokenizers the reference sets hold. */
static inline void gt_tokenizer_dir(const char *dir) {
    char path[4400], fdir[4096];
    static const char *const clip[] = {"vocab.json", "merges.txt"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/data/clip/%s", sd_test_shared_dir(), clip[i]);
        gt_link(path, dir, clip[i]);
    }
    snprintf(fdir, sizeof fdir, "%s", sd_golden_family_dir("flux"));
    snprintf(path, sizeof path, "%s/manifest.json", fdir);
    cJSON *m = access(path, R_OK) == 0 ? sd_golden_manifest(fdir) : NULL;
    const char *t5 = m ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                             cJSON_GetObjectItemCaseSensitive(m, "tokenizer"), "file"))
                       : NULL;
    if (t5) {
        snprintf(path, sizeof path, "%s/%s", fdir, t5);
        gt_link(path, dir, "t5_tokenizer/tokenizer.json");
    }
    cJSON_Delete(m);
    snprintf(fdir, sizeof fdir, "%s", sd_golden_family_dir("zimage"));
    snprintf(path, sizeof path, "%s/manifest.json", fdir);
    m = access(path, R_OK) == 0 ? sd_golden_manifest(fdir) : NULL;
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "tokenizer"), "files")) {
        const char *rel = cJSON_GetStringValue(f), *base = rel ? strrchr(rel, '/') : NULL;
        char to[300];
        snprintf(to, sizeof to, "qwen25_tokenizer/%s", base ? base + 1 : rel ? rel : "");
        snprintf(path, sizeof path, "%s/%s", fdir, rel ? rel : "");
        if (rel) gt_link(path, dir, to);
    }
    cJSON_Delete(m);
}

static inline int gt_cfg_int(const cJSON *models, const char *model, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(models, model), "config"), key);
    return cJSON_IsNumber(v) ? v->valueint : 0;
}

/* What a reference set's tiny text encoders need beyond their shapes, from
 * its manifest's model configs (ComfyUI's clip_l_model_config /
 * clip_g_model_config / the Qwen3-4B width override): fills the unset
 * fields of *o. */
static inline void gt_model_defaults(const cJSON *set_manifest, sd_checkpoint_opts *o) {
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(set_manifest, "models");
    int v;
    if (!o->clip_l_heads && (v = gt_cfg_int(ms, "clip_l", "num_attention_heads"))) o->clip_l_heads = v;
    if (!o->clip_g_heads && (v = gt_cfg_int(ms, "clip_g", "num_attention_heads"))) o->clip_g_heads = v;
    if (!o->qwen3_4b_width && (v = gt_cfg_int(ms, "qwen3_4b", "hidden_size"))) o->qwen3_4b_width = v;
}

#endif
