/* safetensors.h - read (memory-mapped, fully validated) and write safetensors.
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON
 * {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
 * then the data. sd_st_open() validates the whole header before any tensor is
 * touched: JSON well-formed, every dtype known, offsets inside the file and
 * ordered, no two tensors overlapping, byte length == numel * dtype size,
 * metadata values strings. A bad file is an error naming the file and tensor.
 *
 * Ownership: the sd_st_file owns the mapping. Tensors returned by
 * sd_st_tensor() borrow the mapping and keep the file alive, so the file may
 * be closed while tensors are still in use.
 */
#ifndef SD_SAFETENSORS_H
#define SD_SAFETENSORS_H

#include <stdint.h>
#include "core/error.h"
#include "core/tensor.h"

typedef struct sd_st_file sd_st_file;

typedef struct sd_st_entry {
    const char *name;
    sd_dtype dtype;
    int ndim;
    int64_t shape[SD_MAX_DIMS];
    uint64_t offset; /* absolute file offset of the first byte */
    uint64_t nbytes;
} sd_st_entry;

sd_status sd_st_open(const char *path, sd_st_file **out, sd_error *err);
/* Same validation on an in-memory buffer (fuzzing, tests). The buffer must
 * outlive the returned file. */
sd_status sd_st_open_memory(const void *data, size_t size, const char *name,
                            sd_st_file **out, sd_error *err);
void sd_st_close(sd_st_file *f); /* drops the file's own reference */

const char *sd_st_path(const sd_st_file *f);
size_t sd_st_count(const sd_st_file *f);
const sd_st_entry *sd_st_at(const sd_st_file *f, size_t i); /* sorted by name */
const sd_st_entry *sd_st_find(const sd_st_file *f, const char *name);
/* Metadata value or NULL. */
const char *sd_st_metadata(const sd_st_file *f, const char *key);
size_t sd_st_metadata_count(const sd_st_file *f);
void sd_st_metadata_at(const sd_st_file *f, size_t i, const char **key,
                       const char **value);

/* Tensor over the mapped bytes in its stored dtype (no copy). NULL with err
 * set when the name is unknown. */
sd_tensor *sd_st_tensor(sd_st_file *f, const char *name, sd_error *err);
/* Same, converted to F32 (a copy unless already F32). */
sd_tensor *sd_st_tensor_f32(sd_st_file *f, const char *name, sd_error *err);

/* ---- files that change under a run ------------------------------------------
 *
 * A file from sd_st_open stays mapped, so pages are read from it long after
 * opening. If it is truncated or rewritten in place while open, reading it
 * would give a signal (SIGBUS past the new end) or silently mixed contents.
 * Instead (formats/mapguard.h): a read past the new end reads zeros and marks
 * the file, and these checks turn any change into an error naming the file:
 * the size or modification time of the open inode differs from what it was
 * at open, or a read was stopped. A file replaced by renaming a new one over
 * its name is not a change (the open inode is untouched).
 * In-memory and source-backed files never change: SD_OK. */

/* SD_ERR_IO naming the file when it changed since it was opened. */
sd_status sd_st_check(sd_st_file *f, sd_error *err);
/* The same over every open mapped file (the executor calls it after each
 * node and at each progress step): the first changed file's error. Each
 * change is reported once (a later change of the same file again), so an
 * unused old model of a changed file kept in a REPL's memo does not fail
 * every later node; sd_st_check on the file keeps failing. */
sd_status sd_st_check_all(sd_error *err);

/* ---- other containers ------------------------------------------------------ */

/* A file whose tensors are not laid out as safetensors (a PyTorch zip
 * checkpoint, formats/torch_ckpt.h) is presented through the same sd_st_file,
 * so that every loader takes either. Its entries' `offset` is whatever the
 * source uses to find the bytes (its own index, in the order the source
 * lists them), and sd_st_tensor asks the source for a copy:
 * read() fills dst with e->nbytes bytes, row-major contiguous, and is called
 * under the file's lock (one read at a time). */
typedef struct sd_st_source_i {
    sd_status (*read)(void *ctx, const sd_st_entry *e, void *dst, sd_error *err);
    void (*free)(void *ctx);
} sd_st_source_i;

/* Takes ownership of entries (an array of n, names malloc'd) and of ctx,
 * also on failure. Entry names must be unique (SD_ERR_FORMAT naming the
 * first repeated one). Metadata: none. */
sd_status sd_st_open_source(const char *path, sd_st_entry *entries, size_t n,
                            const sd_st_source_i *src, void *ctx, sd_st_file **out,
                            sd_error *err);

/* ---- other containers stored in place ---------------------------------------
 *
 * A file of another format whose tensors lie in it as plain row-major bytes
 * (GGUF, formats/gguf.h) is opened, mapped, guarded and change-checked
 * exactly as a safetensors file; its own parser, the indexer, finds the
 * tensors in the bytes and fills an sd_st_index (everything malloc'd; the
 * index is taken over whether the indexer succeeds or not). Entry offsets
 * are absolute; dtypes may be quantized (core/quant.h), nbytes then being
 * sd_dtype_nbytes of the shape. Each entry is checked again here: inside
 * the file, nbytes matching its dtype and shape, names unique. `other_*`
 * lists valid tensors in types sdflow has no sd_dtype for (static type
 * names): left out of the entries and named in the error sd_st_tensor gives
 * for them. */
typedef struct sd_st_index {
    sd_st_entry *entries;
    size_t n;
    char **meta_keys, **meta_vals;
    size_t n_meta;
    char **other_names;
    const char **other_dtypes;
    size_t n_other;
} sd_st_index;
typedef sd_status (*sd_st_indexer)(void *ctx, const uint8_t *base, size_t size, const char *path,
                                   sd_st_index *out, sd_error *err);

/* ctx is passed to fn (borrowed, for the call only). */
sd_status sd_st_open_indexed(const char *path, sd_st_indexer fn, void *ctx, sd_st_file **out,
                             sd_error *err);
/* The same over a buffer that outlives the file. */
sd_status sd_st_open_memory_indexed(const void *data, size_t size, const char *name,
                                    sd_st_indexer fn, void *ctx, sd_st_file **out, sd_error *err);

/* ---- writing --------------------------------------------------------------- */

typedef struct sd_st_writer sd_st_writer;

sd_st_writer *sd_st_writer_new(void);
/* Adds a tensor (takes a reference). Names must be unique. */
sd_status sd_st_writer_add(sd_st_writer *w, const char *name, sd_tensor *t,
                           sd_error *err);
/* A tensor whose bytes are made while the file is written, so that a file
 * of many gigabytes (sdflow synth's full-size Flux presets) never sits in
 * memory: fill(user, name, offset, buf, n) writes bytes [offset, offset + n)
 * of the tensor's data into buf (the chunks of one tensor come in order,
 * each at most a few MiB, n a multiple of the element size). A non-zero
 * return stops the save with that status (fill sets err). user is
 * borrowed and must outlive the save. */
typedef sd_status (*sd_st_fill_fn)(void *user, const char *name, uint64_t offset, void *buf,
                                   size_t n, sd_error *err);
sd_status sd_st_writer_add_lazy(sd_st_writer *w, const char *name, sd_dtype dtype, int ndim,
                                const int64_t *shape, sd_st_fill_fn fill, void *user,
                                sd_error *err);
sd_status sd_st_writer_meta(sd_st_writer *w, const char *key, const char *value,
                            sd_error *err);
/* Writes atomically (temporary file + rename). */
sd_status sd_st_writer_save(sd_st_writer *w, const char *path, sd_error *err);
/* Serializes into a malloc'd buffer (*out, *size). */
sd_status sd_st_writer_to_memory(sd_st_writer *w, void **out, size_t *size,
                                 sd_error *err);
void sd_st_writer_free(sd_st_writer *w);

#endif
