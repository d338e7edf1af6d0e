/* libFuzzer target: the PNG reader (sd_png_read_limited, sd_png_read_info,
 * sd_png_read_text) on untrusted files. The reader takes a path, so each input is written to
 * one temporary file per process. Whatever is accepted must be a well-formed
 * tensor of the size the header declares, within the pixel limit; a refused
 * file must hand out nothing. The limits of formats/png.h keep any single input
 * from allocating more than a few hundred MB. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/png.h"

#define MAX_PIXELS (1u << 22) /* 64 MB of RGBA floats */

static char path[256];

static void remove_file(void) { unlink(path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!path[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/sdflow-fuzz-png-%ld.png", tmp && *tmp ? tmp : "/tmp",
                 (long)getpid());
        atexit(remove_file);
    }
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    if (fclose(f) != 0) abort();

    sd_error err;
    static const sd_png_layout layouts[3] = {SD_PNG_KEEP, SD_PNG_RGB, SD_PNG_RGBA};
    sd_png_layout layout = layouts[size % 3];
    sd_tensor *t = NULL;
    sd_png_info info;
    sd_png_info head;
    sd_status hrc = sd_png_read_info(path, MAX_PIXELS, &head, &err);
    if (sd_png_read_limited(path, layout, MAX_PIXELS, &t, &info, &err) == SD_OK) {
        if (!t || t->ndim != 3 || t->shape[0] != info.height || t->shape[1] != info.width) abort();
        /* a file that decodes has a header saying what it decoded to */
        if (hrc != SD_OK || head.width != info.width || head.height != info.height) abort();
        if ((uint64_t)info.width * (uint64_t)info.height > MAX_PIXELS) abort();
        int64_t c = t->shape[2];
        if (c < 1 || c > 4 || (layout == SD_PNG_RGB && c != 3) || (layout == SD_PNG_RGBA && c != 4)) abort();
        const float *p = sd_tensor_f32(t);
        for (int64_t i = 0; i < t->shape[0] * t->shape[1] * c; i++)
            if (!(p[i] >= 0.0f && p[i] <= 1.0f)) abort();
        sd_tensor_unref(t);
    } else if (t) {
        abort();
    }
    char *text = NULL;
    sd_status rc = sd_png_read_text(path, "prompt", &text, &err);
    if (rc == SD_OK) {
        if (!text) abort();
        (void)strlen(text);
        free(text);
    } else if (text) {
        abort();
    }
    return 0;
}
