/* test_golden_sd3_sampling.c - SD3's flow-matching sigma tables and their
 * schedules against ComfyUI (the "sampling" cases of the SD3 reference set,
 * sd_golden_family_dir("sd3")/manifest.json).
 *
 * Every reference tensor of a case is named "<group>.<what>":
 *   group  msK         ModelSamplingSD3(shift = settings.shifts[K]):
 *                      ModelSamplingDiscreteFlow + CONST, multiplier 1000
 *                      (sd_model_sampling_init_flow, as the node's patch)
 *          default     an SD3 MODEL without that node
 *                      (sd_model_sampling_init_sd3)
 *   what   shift, multiplier   the schedule's parameters
 *          sigmas      the whole sigma table
 *          S.N         BasicScheduler(scheduler S, N steps, denoise 1)
 *          basic_S_denoiseD  BasicScheduler(S, denoise D) with the step
 *                      count its length gives (steps + 1 sigmas)
 * A name that fits none of these fails the test (nothing is skipped
 * silently), as does a case without tensors. Tolerances are the manifest's.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "models/sampling/model_sampling.h"
#include "models/sampling/schedules.h"
#include "testutil.h"

static sd_tensor *f32_tensor(const float *v, int64_t n) {
    int64_t shape[1] = {n};
    sd_tensor *t = sd_tensor_new(SD_F32, 1, shape);
    if (t) memcpy(t->data, v, (size_t)n * sizeof(float));
    return t;
}

/* The model sampling a group names; 0 when the group is unknown. */
static int group_sampling(const cJSON *settings, const char *group, sd_model_sampling *ms) {
    int k;
    char tail;
    if (strcmp(group, "default") == 0) {
        sd_model_sampling_init_sd3(ms);
        return 1;
    }
    if (sscanf(group, "ms%d%c", &k, &tail) == 1) {
        const cJSON *v = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(settings, "shifts"), k);
        if (!cJSON_IsNumber(v)) return 0;
        sd_model_sampling_init_flow(ms, v->valuedouble, 1000.0);
        return 1;
    }
    return 0;
}

/* The first dimension of a manifest tensor's shape; -1 when absent. */
static int64_t manifest_len(const cJSON *t) {
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
    return cJSON_GetArraySize(sh) == 1 ? (int64_t)cJSON_GetArrayItem(sh, 0)->valuedouble : -1;
}

static void run_case(const char *dir, cJSON *c) {
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "id"));
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file"));
    cJSON *settings = cJSON_GetObjectItemCaseSensitive(c, "settings");
    cJSON *tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    printf("case %s\n", id ? id : "?");
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, file ? file : "");
    sd_error err;
    sd_error_clear(&err);
    sd_st_file *g = NULL;
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    if (!g) return;
    CHECK_MSG(cJSON_GetArraySize(tensors) > 0, "%s: no tensors", id);
    sd_model_sampling *ms = malloc(sizeof *ms);
    const cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        const char *name = t->string;
        const char *dot = strchr(name, '.');
        char group[64];
        if (!dot || dot - name >= (ptrdiff_t)sizeof group) {
            CHECK_MSG(0, "%s: tensor name '%s' is not <group>.<what>", id, name);
            continue;
        }
        memcpy(group, name, (size_t)(dot - name));
        group[dot - name] = 0;
        const char *what = dot + 1;
        if (!group_sampling(settings, group, ms)) {
            CHECK_MSG(0, "%s: tensor '%s': unknown group '%s'", id, name, group);
            continue;
        }
        sd_tensor *actual = NULL;
        char sched[32];
        int steps, used = 0;
        double denoise = 1.0;
        if (strcmp(what, "shift") == 0) {
            float s = (float)ms->shift;
            actual = f32_tensor(&s, 1);
        } else if (strcmp(what, "multiplier") == 0) {
            float s = (float)ms->multiplier;
            actual = f32_tensor(&s, 1);
        } else if (strncmp(what, "basic_", 6) == 0 && strstr(what, "_denoise") &&
                   strstr(what, "_denoise") - (what + 6) < (ptrdiff_t)sizeof sched) {
            /* "basic_sgm_uniform_denoise0.6" */
            const char *dn = strstr(what, "_denoise");
            snprintf(sched, sizeof sched, "%.*s", (int)(dn - (what + 6)), what + 6);
            char *end = NULL;
            denoise = strtod(dn + 8, &end);
            CHECK_MSG(end && *end == 0 && end != dn + 8, "%s: tensor '%s': bad denoise", id, name);
            int64_t len = manifest_len(t);
            CHECK_MSG(len >= 2, "%s: tensor '%s' has no 1-D shape in the manifest", id, name);
            float *sig = NULL;
            int n = 0;
            if (len >= 2) CHECK_OK(sd_basic_scheduler_sigmas(ms, sched, (int)(len - 1), denoise, &sig, &n, &err), &err);
            if (sig) actual = f32_tensor(sig, n);
            free(sig);
        } else if (strcmp(what, "sigmas") == 0) {
            actual = f32_tensor(ms->sigmas, ms->n);
        } else if ((sscanf(what, "%31[a-z_].%d%n", sched, &steps, &used) == 2 && what[used] == 0) ||
                   (sscanf(what, "%31[a-z_].%d_denoise%lf%n", sched, &steps, &denoise, &used) == 3 &&
                    what[used] == 0)) {
            float *sig = NULL;
            int n = 0;
            CHECK_OK(sd_basic_scheduler_sigmas(ms, sched, steps, denoise, &sig, &n, &err), &err);
            if (sig) actual = f32_tensor(sig, n);
            free(sig);
        } else {
            CHECK_MSG(0, "%s: tensor '%s': unknown quantity '%s'", id, name, what);
            continue;
        }
        sd_golden_compare(id, tensors, g, name, actual);
        sd_tensor_unref(actual);
    }
    free(ms);
    sd_st_close(g);
}

int main(void) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s", sd_golden_family_dir("sd3"));
    cJSON *m = sd_golden_manifest(dir);
    int n = sd_golden_require_cases(m, dir, "sampling");
    CHECK_MSG(n > 0, "no sampling case in %s/manifest.json", dir);
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "cases")) {
        if (sd_golden_case_is(c, "sampling")) run_case(dir, (cJSON *)c);
    }
    cJSON_Delete(m);
    return sd_test_finish();
}
