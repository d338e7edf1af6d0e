/* libFuzzer target: the cache value decoder. Anything it accepts must
 * serialize again to a blob that decodes to an equal value (and, since the
 * format has one encoding per value, to the very same bytes). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/value_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sd_value *v = NULL;
    sd_error err;
    if (sd_value_deserialize(data, size, &v, &err) != SD_OK) {
        if (v) abort();
        return 0;
    }
    if (!sd_value_is_data(v)) abort();
    void *blob = NULL;
    size_t n = 0;
    if (sd_value_serialize(v, &blob, &n, &err) != SD_OK) abort();
    if (n != size || memcmp(blob, data, n) != 0) abort();
    sd_value *w = NULL;
    if (sd_value_deserialize(blob, n, &w, &err) != SD_OK) abort();
    if (!sd_value_equal(v, w)) abort();
    sd_value_unref(w);
    sd_value_unref(v);
    free(blob);
    return 0;
}
