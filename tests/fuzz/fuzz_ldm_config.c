/* libFuzzer target: the LDM .yaml config reader (formats/ldm_config.h,
 * CheckpointLoader's config_name) on untrusted bytes. Whatever is accepted
 * reports a layer_idx only when one was given; a refusal is an error code
 * with a message, never a crash, leak or hang (libyaml's anchors and aliases
 * included: the document API keeps an alias as a reference, not a copy). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/ldm_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sd_ldm_config c;
    sd_error err;
    sd_error_clear(&err);
    sd_status rc = sd_ldm_config_parse(data, size, "fuzz.yaml", &c, &err);
    if (rc == SD_OK) {
        if (!c.has_layer_idx && c.layer_idx != 0) abort();
        if (c.v_prediction != 0 && c.v_prediction != 1) abort();
    } else if (err.code != rc || !err.msg[0]) {
        abort();
    }
    return 0;
}
