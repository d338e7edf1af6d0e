/* golden.h - helpers shared by the golden tests (tests that compare against
 * ComfyUI's reference tensors). Linked only into tests whose name has
 * "golden" (see tests/CMakeLists.txt). Failures are recorded with the
 * testutil.h CHECK macros, so a helper never hides a mismatch. */
#ifndef SD_TEST_GOLDEN_H
#define SD_TEST_GOLDEN_H

#include <cjson/cJSON.h>

#include "formats/safetensors.h"
#include "core/tensor.h"
#include "kernels/backend.h"
#include "models/controlnet/controlnet.h"
#include "models/text/text_encode.h"
#include "models/unet/unet.h"
#include "models/vae/vae.h"

/* ---- backend and precision -------------------------------------------------
 *
 * Every golden test creates its backend with sd_golden_backend(): the
 * backend named by $SDFLOW_TEST_BACKEND (cpu, the default, or cuda) in the
 * precision named by $SDFLOW_TEST_PRECISION (f32, the default, bf16, or
 * f16: only the CUDA backend computes it; the CPU skips).
 * ctest registers "<test>.bf16" variants of the model goldens when the build
 * has a bf16 CPU path (tests/CMakeLists.txt).
 *
 * f32 runs use the manifest's tolerances unchanged. bf16 runs add a slack
 * decided from the format, not from results:
 *
 *   |a - e| <= atol + rtol * |e| + T(L) * rms(e),   T(L) = 6 * 2^-8 * sqrt(L)
 *
 * - 2^-8: bf16's unit roundoff taken per rounded input (RNE is within 2^-9
 *   relative; 2^-8 absorbs the cancellation that makes an output smaller than
 *   the sum of its products). A bf16 matrix op rounds both operands and
 *   accumulates in f32 (products of bf16 values are exact in f32), so each
 *   op adds a relative error of that order to its output, measured against
 *   the output's RMS.
 * - sqrt(L): L = the number of bf16 matrix ops (linear, conv, matmul) on the
 *   longest path from the inputs to the tensor; independent rounding errors
 *   of successive layers add in quadrature (norms keep the gain ~1).
 * - 6: the largest of up to ~10^8 roughly Gaussian errors stays within 6
 *   standard deviations.
 * Tensors the manifest requires exactly (atol = rtol = 0: ids, counts) and
 * tensors no bf16 op touches (L = 0: inputs, patched weights) get no slack.
 * L per component, counted on the tiny test models' configs (manifest) and
 * rounded up: SD_GOLDEN_DEPTH_*.
 *
 * End-to-end sampling cases are not compared in bf16: at CFG 7.5 the
 * guided noise estimate amplifies the UNet's error ~sqrt(2)*7.5 times per
 * step and the sampler carries it through every step, so the bound above
 * would exceed the signal itself; the component cases are the bf16 check.
 */
#define SD_GOLDEN_DEPTH_CLIP 20       /* 4 layers x (qkv, out, fc1, fc2), + projection */
#define SD_GOLDEN_DEPTH_UNET 128      /* ~50 convs + ~70 transformer linears, time MLP */
#define SD_GOLDEN_DEPTH_VAE 40        /* decoder: ~35 convs, mid attention; encoder alike */
#define SD_GOLDEN_DEPTH_CONTROLNET 64 /* hint encoder (8 convs) + the UNet's encoder half */
#define SD_GOLDEN_DEPTH_TAESD 40      /* encoder or decoder: ~33 convs */

/* $SDFLOW_TEST_PRECISION: SD_PREC_F32 (unset or "f32"), SD_PREC_BF16
 * ("bf16") or SD_PREC_F16 ("f16"); any other value fails the test (exit 1).
 * f16 uses the bf16 rule below with 2^-10 in place of 2^-8 (fp16's unit
 * roundoff is 2^-11; the same factor 2 for cancellation); an f16 overflow
 * (|x| > 65504, inf) is a failure, not a tolerance question. */
sd_precision sd_golden_precision(void);
/* $SDFLOW_TEST_BACKEND: "cpu" (unset) or "cuda". */
const char *sd_golden_backend_name(void);
/* The backend the golden tests run on (all cores), in sd_golden_precision().
 * Skips the test (exit 77) when the build lacks that backend or precision;
 * records a failed check and returns NULL on any other error. Sets the
 * comparison depth to 0. */
sd_backend *sd_golden_backend(void);
/* The backend of a test that compares sampling (end-to-end) results:
 * sd_golden_backend() at depth 0, skipping (unsupported) in a precision
 * whose sampling results are not compared (sd_golden_e2e_comparable).
 * NULL (a failed check recorded) when the backend cannot be made. */
sd_backend *sd_golden_sampling_backend(void);
/* The L of the tensors compared next (see above); ignored in f32 mode. */
void sd_golden_set_depth(int L);
/* The slack T(L) in force: 0 in f32 mode or at depth 0. */
double sd_golden_slack(void);
/* 1 when end-to-end sampling cases are compared in this precision (f32). */
int sd_golden_e2e_comparable(void);
/* sd_test_allclose with the precision's slack (none when atol = rtol = 0);
 * same outputs. */
int sd_golden_allclose(const sd_tensor *a, const sd_tensor *e, double atol, double rtol,
                       double *max_abs, long *worst);
/* The largest |a - e| / bound of the last sd_golden_allclose (1 = at the
 * bound; NaN when it could not compare): how much of the tolerance a
 * tensor used. */
double sd_golden_used(void);

/* ---- manifest and cases --------------------------------------------------- */

/* The reference data folder: $SDFLOW_TESTDATA, else sd_test_testdata_dir(). */
const char *sd_golden_dir(void);
/* The reference set of another model family ("flux", "sd3", "zimage"):
 * $SDFLOW_TESTDATA_<FAMILY> (upper case) when set, else
 * sd_golden_dir()/<family>. The string lives until the next call. */
const char *sd_golden_family_dir(const char *family);

/* The file a manifest string names (its first word; what follows is a
 * description): "shared/testdata/..." under sd_golden_dir(), "shared/..."
 * under sd_test_shared_dir(), an absolute path as is, else relative to the
 * set's dir. Writes the path to out; 1 when that file exists. */
int sd_golden_resolve_path(const char *dir, const char *ref, char *out, size_t n);

/* The reference set a test keeps in the source tree, tests/data/<topic>,
 * under $SDFLOW_SOURCE_DIR (ctest sets it), else under the tree the test was
 * built from. The string lives until the next call. */
const char *sd_golden_topic_dir(const char *topic);

/* Parses <dir>/manifest.json. Skips the test (exit 77) when the file is
 * absent; when it is there but not valid JSON, records a failed check and
 * ends the test (exit 1): present data that is wrong is a failure, never a
 * skip. Never returns NULL; the caller owns the result (cJSON_Delete). */
cJSON *sd_golden_manifest(const char *dir);
/* The same for a reference JSON file under another name (path). */
cJSON *sd_golden_json(const char *path);

/* Opens the safetensors file the manifest's string `key` names (relative to
 * the set's dir): the set's reference tensors. The manifest being there
 * means its file must be: a missing key or a file that does not open is a
 * failed check that ends the test (exit 1). The caller closes it. */
sd_st_file *sd_golden_open_ref(const char *dir, const cJSON *manifest, const char *key);

/* The CLIP tokenizer folder the node goldens load text encoders with:
 * $SDFLOW_TOKENIZER_DIR, else <shared>/data/clip. The string lives until the
 * next call. */
const char *sd_golden_tokenizer_dir(void);

/* The tiny SD1 checkpoint of the reference data
 * (<testdata>/models/tiny-sd1.safetensors) that the sampling cases of the
 * node goldens load with sd_golden_tokenizer_dir(). Skips the test when the
 * tokenizer folder or the checkpoint is absent, naming both and what did not
 * run (`what`, NULL: nothing said); a skip after a failed check exits 1.
 * The string lives until the next call. */
const char *sd_golden_tiny_sd1(const char *what);

/* 1 when case c's "component" is comp. */
int sd_golden_case_is(const cJSON *c, const char *comp);

/* 1 when case c's reference file (<dir>/<c.file>) can be opened. */
int sd_golden_case_present(const char *dir, const cJSON *c);

/* Counts the cases of component comp the manifest lists, recording a failed
 * check for each whose reference file is absent: what the manifest lists
 * must be there (the manifest present means the data set is; a partial one
 * fails, it never passes or skips). Every golden test calls it for each
 * component it runs before running them. */
int sd_golden_require_cases(cJSON *manifest, const char *dir, const char *comp);
/* sd_golden_require_cases for a test that runs only component comp: a
 * manifest listing none of its cases skips the test (the set is another
 * one), after freeing the manifest. */
int sd_golden_require_cases_or_skip(cJSON *manifest, const char *dir, const char *comp);

/* The CLIP vocabulary folder (<shared>/data/clip) the text paths tokenize
 * with; skips the test when it holds no vocabulary, after freeing
 * `manifest` (NULL: none). The string lives until the next call. */
const char *sd_golden_clip_vocab(cJSON *manifest);

/* Runs one case of the manifest (dir: the data folder). */
typedef void (*sd_golden_case_fn)(sd_backend *be, const char *dir, cJSON *manifest, cJSON *c);

/* Runs fn on every case of component comp, then e2e_fn on every "e2e" case
 * whose settings hold e2e_key (an absent reference file of one is a failed
 * check: the manifest lists it; e2e_fn NULL: no e2e cases). Before each,
 * *case_id is set to the case's id and "case <id>" printed. */
void sd_golden_run_cases(sd_backend *be, const char *dir, cJSON *manifest, const char *comp,
                         sd_golden_case_fn fn, const char *e2e_key, sd_golden_case_fn e2e_fn,
                         const char **case_id);

/* Compares actual with reference tensor `name` of the case (read from g as
 * F32) under the tolerance its manifest entry tensors[name].tolerance gives
 * (atol, rtol; a missing one is a failure): five checks (tolerance present,
 * reference present, actual produced, shape, allclose), one printed line.
 * case_id names the case in messages. Borrows actual. */
void sd_golden_compare(const char *case_id, cJSON *tensors, sd_st_file *g, const char *name,
                       sd_tensor *actual);

/* Marks the entry `name` of the case's tensors object as checked (used[i] for
 * the i-th entry); returns 0 when there is no such entry. */
int sd_golden_mark(cJSON *tensors, int *used, const char *name);

/* ---- activation taps ------------------------------------------------------ */

#define SD_GOLDEN_MAX_TAPS 32

/* The activations one case's manifest names, captured through a model's tap
 * (sd_golden_tap as the callback, the set as its user pointer). keys[i] is
 * the manifest key without the case prefix ("act.<module>", or one of the
 * plain names given to sd_golden_taps_collect); got[i] what the tap passed
 * under that name (the "act." removed), NULL until it does. */
typedef struct sd_golden_taps {
    int n;
    char keys[SD_GOLDEN_MAX_TAPS][128];
    sd_tensor *got[SD_GOLDEN_MAX_TAPS];
} sd_golden_taps;

/* Fills ts from the case's tensors named <pre>act.<module> and <pre><name>
 * for each name of `plain` (NULL-terminated; NULL: none). More than
 * SD_GOLDEN_MAX_TAPS is a failed check naming the case. */
void sd_golden_taps_collect(sd_golden_taps *ts, cJSON *tensors, const char *pre,
                            const char *const *plain, const char *case_id);
/* The model tap callback: copies the activation to the host for the entry
 * whose name it is (first time only). */
void sd_golden_tap(void *user, const char *name, const sd_bt *t);
/* Compares each collected activation with its reference (sd_golden_compare,
 * a tap that never fired fails as "not produced"), marks it checked in used
 * (sd_golden_mark) and frees it. */
void sd_golden_taps_check(sd_golden_taps *ts, const char *case_id, cJSON *tensors, sd_st_file *g,
                          const char *pre, int *used);

/* ---- end-to-end cases ----------------------------------------------------- */

/* Checks (and marks as checked) one reference tensor of the current case. */
typedef void (*sd_golden_cmp_fn)(const char *name, sd_tensor *t);
/* Reads (and marks) one reference input of the current case; NULL when it is
 * missing (the callback has recorded the failure). The caller owns it. */
typedef sd_tensor *(*sd_golden_in_fn)(const char *name);

/* Runs one "e2e" case (component "e2e"): the model-level pipeline the
 * KSampler runs, with the given (possibly patched) models and control chain
 * (link NULL: no control): prompt ids -> CLIP (last layer, final LN) -> euler
 * on the CFG-guided UNet (apply_model: scaled input, discrete timestep,
 * x - eps * sigma) from the stored noise -> latent / latent_scale -> VAE
 * decode. Reads settings.steps/cfg/sampler/scheduler/seed from case c, the
 * inputs pos.l.ids, neg.l.ids and noise through in(), and passes every
 * tensor it makes (intermediates included) to cmp(). Borrows everything. */
void sd_golden_e2e_run(sd_backend *be, cJSON *c, sd_unet *unet, const sd_text_encoder *te, sd_vae *vae,
                       float latent_scale, const sd_control_link *link, sd_golden_cmp_fn cmp,
                       sd_golden_in_fn in);

#endif
