/* torch_ckpt.h - PyTorch checkpoints (.ckpt .pt .pth .bin) read weights-only.
 *
 * torch.save (PyTorch >= 1.6) writes a zip archive (read here with libzip):
 *   <archive>/data.pkl      the pickled object (formats/pickle.h reads it without
 *                           running anything)
 *   <archive>/data/<key>    one entry per storage, raw little-endian elements
 *   <archive>/byteorder     "little" (absent in older files: little assumed)
 *   <archive>/version, .data/version, ...   ignored
 * The pickle's tensors become the entries of an sd_st_file (formats/safetensors.h),
 * so every model loader takes a .ckpt exactly as it takes a .safetensors:
 *   - when the top object is a dict with a dict under "state_dict" (Lightning
 *     checkpoints), that dict is used, as ComfyUI's load_torch_file does;
 *   - tensors at the top level keep their key; tensors in nested dicts get
 *     dotted keys ("string_to_param.*" in a textual-inversion .pt);
 *   - other values (step counters, names, lists, None) are skipped.
 *
 * Checked at open, before any tensor is read: every storage's declared size
 * (numel x element size) fits its zip entry; every tensor's shape, strides
 * and offset stay inside its storage; at most SD_MAX_DIMS dimensions; no two
 * tensors with the same key. Tensors are read on demand (a copy, through
 * libzip, also for compressed entries). Non-contiguous tensors (a transposed
 * or sliced view saved as it was) are materialised: the copy is row-major
 * with the tensor's logical shape, as .contiguous() would give.
 *
 * The legacy format (torch < 1.6, or _use_new_zipfile_serialization=False):
 * a stream of pickles (magic number, protocol 1001, sys_info, the object,
 * the storage keys) followed by each storage as an int64 element count and
 * its bytes. The file is memory-mapped; every listed storage must be
 * declared in the object pickle with that element count and fit the file.
 * Big-endian files and storage views (view_metadata) are refused; a bare
 * pickle without torch's magic number is refused as not a checkpoint.
 */
#ifndef SD_TORCH_CKPT_H
#define SD_TORCH_CKPT_H

#include <stddef.h>
#include "safetensors.h"

/* Open a torch checkpoint (zip or legacy). Errors name the file and, where it applies,
 * the tensor key, storage or pickle opcode (SD_ERR_FORMAT for a damaged or
 * inconsistent file, SD_ERR_UNSUPPORTED for content refused on purpose). */
sd_status sd_torch_open(const char *path, sd_st_file **out, sd_error *err);
/* Same on a buffer, which must outlive the returned file. */
sd_status sd_torch_open_memory(const void *data, size_t size, const char *name,
                               sd_st_file **out, sd_error *err);

/* What the first bytes of a file are: 1 a zip archive ("PK\3\4"), 2 a bare
 * pickle (0x80 <protocol>, torch's legacy format), 0 neither. */
int sd_torch_sniff(const void *head, size_t n);

/* Open a weights file of either format, chosen by its first bytes (not its
 * name): a zip archive or torch's legacy magic number through sd_torch_open,
 * anything else (a bare 0x80 byte may start a safetensors header length)
 * through sd_st_open. Safetensors stays the preferred format; this is what loaders
 * that accept .ckpt/.pt/.pth/.bin call. */
sd_status sd_torch_open_any(const char *path, sd_st_file **out, sd_error *err);

/* ---- the whole pickled object ---------------------------------------------------
 * Files that are not a flat dict of tensors, such as A1111 hypernetworks
 * ({320: (state_dict, state_dict), ..., "activation_func": "relu",
 * "layer_structure": [1.0, 2.0, 1.0], ...}: integer keys, tuples of dicts,
 * scalars), are read as the typed object tree of formats/pickle.h. The
 * checks are those of sd_torch_open (both formats, the same limits and
 * refusals); every tensor reachable from the root through dicts, tuples and
 * lists is checked against its storage at open, and read on demand. The
 * root is the object torch.save was given (no "state_dict" unwrapping:
 * that is the caller's reading of it). */
typedef struct sd_torch_tree sd_torch_tree;
struct sd_pk_obj;

sd_status sd_torch_open_tree(const char *path, sd_torch_tree **out, sd_error *err);
/* Same on a buffer, which must outlive the tree. */
sd_status sd_torch_open_tree_memory(const void *data, size_t size, const char *name, sd_torch_tree **out,
                                    sd_error *err);
void sd_torch_tree_free(sd_torch_tree *t); /* NULL-safe */
/* The root object (owned by the tree). */
const struct sd_pk_obj *sd_torch_tree_root(const sd_torch_tree *t);
/* The tensor object o (an SD_PK_TENSOR reachable from the root) as a new
 * row-major tensor in its stored dtype, or NULL with err set (naming the
 * file and the tensor's path; SD_ERR_INVALID for an object that is no
 * tensor of this tree). */
sd_tensor *sd_torch_tree_tensor(sd_torch_tree *t, const struct sd_pk_obj *o, sd_error *err);
/* Where o was found, for messages: keys and indices joined with '.'
 * ("320.0.linear.0.weight"); "?" for an object that is no tensor of it. */
const char *sd_torch_tree_path(const sd_torch_tree *t, const struct sd_pk_obj *o);

#endif
