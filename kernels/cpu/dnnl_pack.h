/* dnnl_pack.h - weights packed once for oneDNN's bf16 primitives (internal
 * to kernels/cpu; dnnl_ops.c packs, cpu_backend.c forgets).
 *
 * A weight tensor used by a bf16 linear or conv is rounded to bf16 and
 * reordered into the layout the primitive asks for (oneDNN's blocked
 * formats: AMX and AVX512_BF16 kernels read nothing else) the first time it
 * is used; the packed copy is kept here, keyed by the weight's sd_bt, and
 * reused by every later op until the weight is freed (the backend's release
 * hook forgets it) or asks for another layout (another batch size can make
 * a primitive choose another blocking: the new form replaces the old one).
 *
 * Memory: a packed copy is kept only when it is no larger than the weight as
 * stored, up to a quarter more for the padding of blocked formats (F32, F16
 * and BF16 sources; an fp8 weight would double) and the
 * total stays within the budget (half the physical memory by default). The
 * stored weight is not read by this path again, so its whole pages are then
 * handed back with MADV_PAGEOUT: clean file-backed pages (a checkpoint's
 * mapping) leave the resident set and are read again from the file if
 * anything needs them, anonymous pages stay (or go to swap). So a model in
 * bf16 holds about one copy of its weights, not two. Weights that are not
 * kept (fp8, past the budget) are packed per op into the backend's reused
 * scratch, one layer at a time, as before.
 *
 * The packed copy assumes the weight's contents do not change while the
 * tensor lives (weights are immutable; LoRA patching makes new tensors).
 * Thread-safe: release may come from any thread.
 */
#ifndef SD_CPU_DNNL_PACK_H
#define SD_CPU_DNNL_PACK_H

#include <stddef.h>

#include "kernels/backend.h"

#ifdef SDFLOW_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

typedef struct sd_dnnl_pack sd_dnnl_pack;

/* budget 0: keep nothing. NULL when out of memory. */
sd_dnnl_pack *sd_dnnl_pack_new(size_t budget);
void sd_dnnl_pack_free(sd_dnnl_pack *p); /* NULL-safe; frees every packed copy */

/* w's packed copy in layout md, or NULL. */
void *sd_dnnl_pack_find(sd_dnnl_pack *p, const sd_bt *w, const dnnl_memory_desc_t *md);
/* 1 when a packed copy of `bytes` for w may be kept: at most 5/4 of w as
 * stored, and within the budget (counting w's current copy as freed). */
int sd_dnnl_pack_room(sd_dnnl_pack *p, const sd_bt *w, size_t bytes);
/* Keeps data (malloc'd; owned by the cache from now on) as w's
 * packed copy in layout md, replacing an older one, and pages the stored
 * weight out. 0 when out of memory (data is freed, nothing kept). */
int sd_dnnl_pack_put(sd_dnnl_pack *p, const sd_bt *w, const dnnl_memory_desc_t *md, void *data,
                     size_t bytes);
void sd_dnnl_pack_forget(sd_dnnl_pack *p, const sd_bt *w);
size_t sd_dnnl_pack_held(sd_dnnl_pack *p, size_t *count);
void sd_dnnl_pack_set_budget(sd_dnnl_pack *p, size_t budget);
#endif

struct sd_dnnl;
/* Drops w's packed copy (the CPU backend's release hook); cheap when the
 * cache is empty. NULL-safe. */
void sd_dnnl_forget(struct sd_dnnl *d, const sd_bt *w);
/* Bytes and count of packed copies held (tests and the bench). */
size_t sd_dnnl_packed_bytes(struct sd_dnnl *d, size_t *count);
/* Sets the backend's packing budget in bytes (0: pack per op only); for
 * tests and the bench. Made on first use otherwise. */
void sd_dnnl_set_pack_budget(sd_backend *be, size_t bytes);

#endif
