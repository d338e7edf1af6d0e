/* workflow_file.h - the workflow a file holds, found as ComfyUI finds it
 * when a file is dropped on its editor.
 *
 *   JSON text   as it is (API or UI form; graph_json.c tells them apart)
 *   PNG         the "prompt" text chunk (the API form), else the "workflow"
 *               chunk (the UI form); a PNG with both runs its prompt, as
 *               ComfyUI does
 *   WebP, JPEG  the same two entries in EXIF (IFD0 ASCII "prompt:<json>",
 *               "workflow:<json>"), where ComfyUI's SaveAnimatedWEBP puts them
 *
 * Any other picture or a model file (zip/pickle, safetensors, GGUF) is
 * refused naming what it is, and text holding a NUL byte naming its offset;
 * neither is parsed as JSON.
 */
#ifndef SD_WORKFLOW_FILE_H
#define SD_WORKFLOW_FILE_H

#include <signal.h>
#include <stddef.h>
#include "core/error.h"

typedef struct sd_workflow_file {
    char *text;        /* the workflow's JSON text, for sd_graph_from_json */
    char *ui_workflow; /* the UI-form workflow to carry into saved pictures
                          (ComfyUI's extra_pnginfo "workflow"), or NULL */
    const char *from;  /* where text came from, for messages: "JSON", "PNG prompt chunk", ... */
} sd_workflow_file;

/* Read the workflow of `path` ("-": standard input, JSON only). On success
 * the caller frees *out with sd_workflow_file_free. SD_ERR_NOT_FOUND /
 * SD_ERR_IO when the file cannot be read; SD_ERR_NOT_FOUND also for a
 * picture without an embedded workflow; SD_ERR_FORMAT for a file that is not
 * a workflow (message says what it is) or a malformed picture. */
sd_status sd_workflow_file_read(const char *path, sd_workflow_file *out, sd_error *err);
/* The same; while standard input is read, a set *interrupt (Ctrl-C; may be
 * NULL) ends the wait at once with SD_ERR_CANCELLED, even when the writer
 * never delivers. */
sd_status sd_workflow_file_read_ex(const char *path, volatile sig_atomic_t *interrupt, sd_workflow_file *out,
                                   sd_error *err);
void sd_workflow_file_free(sd_workflow_file *f);

/* The text after "<key>:" of the first IFD0 text entry of TIFF (EXIF) data
 * that starts so; the data may begin with "Exif\0\0". *out is malloc'd.
 * SD_ERR_NOT_FOUND when no entry matches, SD_ERR_FORMAT when the data is
 * malformed. Every offset is checked against n: safe on any bytes. */
sd_status sd_workflow_exif_text(const unsigned char *data, size_t n, const char *key, char **out,
                                sd_error *err);

/* The EXIF block of a WebP (RIFF "EXIF" chunk) or JPEG (APP1 "Exif") file
 * image: a pointer into `data` and its size. SD_ERR_NOT_FOUND when the
 * picture has none, SD_ERR_FORMAT when its structure is broken. */
sd_status sd_workflow_picture_exif(const unsigned char *data, size_t n, const unsigned char **exif,
                                   size_t *exif_n, sd_error *err);

#endif
