/* savepath.h - where output nodes write, named the way ComfyUI names them,
 * and the metadata they embed.
 *
 * Naming follows folder_paths.get_save_image_path: the prefix may contain
 * %width%, %height%, %year%, %month%, %day%, %hour%, %minute%, %second%; its
 * directory part becomes a subfolder of the root; files are
 * "<filename>_<counter:05>_.<ext>" where the counter continues after the
 * highest number found among the folder's files named "<filename>_<digits>...".
 * A prefix that would leave the root (absolute, or climbing with "..") is
 * refused. Files are created exclusively (core/outfile.h): when two runs
 * race for one counter, the later one moves on to the next.
 *
 * Metadata follows SaveImage/SaveLatent: "prompt" = the workflow JSON and one
 * entry per key of extra_pnginfo, each value serialized as Python's
 * json.dumps does (", " and ": " separators, non-ASCII escaped).
 */
#ifndef SD_NODES_SAVEPATH_H
#define SD_NODES_SAVEPATH_H

#include <stdint.h>
#include <cjson/cJSON.h>
#include "core/node.h"
#include "core/outfile.h"

typedef struct sd_savepath {
    sd_outdir dir;   /* the open folder (core/outfile.h) */
    char *folder;    /* absolute path of root/subfolder (created) */
    char *filename;  /* file name part of the prefix, after substitutions */
    char *subfolder; /* "" when the prefix has no directory part */
    int64_t counter; /* first free counter (advanced by sd_savepath_publish) */
    int stale_removed; /* temporaries of killed runs removed by the scan */
    const sd_env *claim_env; /* set by sd_savepath_claim_names */
    const char *claim_type;
} sd_savepath;

/* Resolve `prefix` under `root` (created when missing; a subfolder that is a
 * symbolic link is refused, see core/outfile.h). width/height feed
 * %width%/%height%. On success fill *sp (free with sd_savepath_free). */
sd_status sd_savepath_begin(const char *root, const char *prefix, int64_t width,
                            int64_t height, sd_savepath *sp, sd_error *err);
void sd_savepath_free(sd_savepath *sp);

/* "<filename with %batch_num% = batch>_<counter:05>_.<ext>" into buf. */
const char *sd_savepath_file(const sd_savepath *sp, int64_t batch, int64_t counter,
                             const char *ext, char *buf, size_t n);

/* Names must also be free in env->claim_name's registry (several machines
 * saving under one name space, core/node.h); `type` is the folder type
 * ("output", "temp"). No effect when the env has no claim_name. */
void sd_savepath_claim_names(sd_savepath *sp, const sd_env *env, const char *type);

/* Publish the finished file `of` (sd_outfile_create(&sp->dir, ...)) as
 * sd_savepath_file(sp, batch, sp->counter, ext), moving on to the next counter
 * while the name is taken (another run got there first): no file is ever
 * replaced. The name used goes to file[n]; sp->counter ends one past it. */
sd_status sd_savepath_publish(sd_savepath *sp, sd_outfile *of, int64_t batch, const char *ext,
                              char *file, size_t n, sd_error *err);

/* Key/value metadata owned by the struct. */
typedef struct sd_save_meta {
    size_t n;
    char **keys;
    char **values;
} sd_save_meta;

/* Build the metadata of an output node: "prompt" (when ctx->prompt_json is
 * set, or always with `prompt_always`, "" standing in for a missing prompt,
 * as SaveLatent does) then each key of ctx->extra_pnginfo_json. */
sd_status sd_save_meta_build(const sd_node_ctx *ctx, int prompt_always, sd_save_meta *m,
                             sd_error *err);
void sd_save_meta_free(sd_save_meta *m);

/* Python json.dumps(obj) of a cJSON tree: malloc'd string, NULL on no memory.
 * Integral numbers print as integers (cJSON does not keep "1.0"). */
char *sd_pyjson_dumps(const cJSON *j);

/* Append {"filename", "subfolder", "type"} to ui[list_key], the absolute
 * path to ui["files"] and the hex SHA-256 of the file's bytes to
 * ui["sha256"] (the executor checks a cached result's files against it, see
 * core/executor.h), creating *ui (a dict) and the lists on first use.
 * list_key NULL: only the path and hash (a file ComfyUI's node writes
 * without reporting it, as LoraSave: no output the clients see). */
sd_status sd_save_ui_add(sd_value **ui, const char *list_key, const char *filename,
                         const char *subfolder, const char *type, const char *abs_path,
                         const uint8_t sha256[32], sd_error *err);

#endif
