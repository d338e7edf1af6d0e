/* golden.h - helpers shared by the golden tests (tests that compare against
 * ComfyUI's reference tensors). Linked only into tests whose name has
 * "golden" (see tests/CMakeLists.txt). Failures are recorded with the
 * testutil.h CHECK macros, so a helper never hides a mismatch. */
#ifndef SD_TEST_GOLDEN_H
#define SD_TEST_GOLDEN_H

#include <cjson/cJSON.h>

#include "core/safetensors.h"
#include "core/tensor.h"
#include "kernels/backend.h"
#include "models/controlnet.h"
#include "models/text_encode.h"
#include "models/unet.h"
#include "models/vae.h"

/* ---- manifest and cases --------------------------------------------------- */

/* The reference data folder: $SDFLOW_TESTDATA, else sd_test_testdata_dir(). */
const char *sd_golden_dir(void);

/* Parses <dir>/manifest.json. Skips the test (exit 77) when the file is
 * absent; records a failed check and returns NULL when it is not valid JSON.
 * The caller owns the result (cJSON_Delete). */
cJSON *sd_golden_manifest(const char *dir);

/* 1 when case c's "component" is comp. */
int sd_golden_case_is(const cJSON *c, const char *comp);

/* 1 when case c's reference file (<dir>/<c.file>) can be opened. */
int sd_golden_case_present(const char *dir, const cJSON *c);

/* Counts the cases of component comp; skips the test (exit 77, after
 * freeing manifest) as soon as one of them lacks its reference file, so a
 * test never passes on partial data. */
int sd_golden_require_cases(cJSON *manifest, const char *dir, const char *comp);

/* Runs one case of the manifest (dir: the data folder). */
typedef void (*sd_golden_case_fn)(sd_backend *be, const char *dir, cJSON *manifest, cJSON *c);

/* Runs fn on every case of component comp, then e2e_fn on every "e2e" case
 * whose settings hold e2e_key and whose reference file is present (an
 * absent one is reported and not run: the component's own cases were
 * required by sd_golden_require_cases). Before each, *case_id is set to the
 * case's id and "case <id>" printed. */
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
