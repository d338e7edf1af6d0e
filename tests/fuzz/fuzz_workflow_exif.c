/* libFuzzer target: the EXIF reader for workflows in WebP/JPEG pictures
 * (formats/workflow_file.h): container walk, then the TIFF IFD0 text search on
 * what it finds, and on the raw bytes too. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "formats/workflow_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const unsigned char *exif = NULL;
    size_t n = 0;
    char *out = NULL;
    if (sd_workflow_picture_exif(data, size, &exif, &n, NULL) == SD_OK) {
        if (exif < data || n > size || (size_t)(exif - data) > size - n) abort();
        if (sd_workflow_exif_text(exif, n, "prompt", &out, NULL) == SD_OK) free(out);
    }
    out = NULL;
    if (sd_workflow_exif_text(data, size, "workflow", &out, NULL) == SD_OK) free(out);
    return 0;
}
