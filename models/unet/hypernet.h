/* hypernet.h - A1111 hypernetworks, read and applied as ComfyUI's
 * comfy_extras/nodes_hypernetwork.load_hypernetwork_patch does.
 *
 * A hypernetwork file (torch.save of a dict, A1111's layout) maps attention
 * widths (integer keys: 320, 640, 768, 1280, ...) to a pair of small MLPs,
 * the first applied to an attention's key input, the second to its value
 * input, where the input's last dimension equals the width:
 *     k = k + mlp0(k) * strength,   v = v + mlp1(v) * strength.
 * The UNet applies this to the inputs of every transformer block's attn1
 * (k = v = the normed features, width = the block's channels) and attn2
 * (k = v = the text context, width = context_dim), as ComfyUI sets the one
 * patch as both attn1_patch and attn2_patch (SD_UNET_PATCH_HYPERNET,
 * models/unet/unet.h).
 *
 * Each MLP is built from its state dict as ComfyUI builds it: the keys
 * ending in ".weight", in the file's order; each names a Linear (with its
 * ".bias"), followed by the activation unless activation_func is "linear"
 * or it is the last name of the list and activate_output is false; with
 * is_layer_norm, the next name is a LayerNorm (eps 1e-5) after it. Note
 * that "last" counts the LayerNorm names too, as ComfyUI's loop does: with
 * layer norms the last Linear is followed by the activation. Metadata keys
 * are read with Python's truthiness (activation_func: linear, relu,
 * leakyrelu (slope 0.01), elu, swish (torch.nn.Hardswish), tanh, sigmoid,
 * softsign, mish; default linear); a file with "state_dict", or with one
 * key holding a dict, is unwrapped as comfy.utils.load_torch_file does.
 *
 * Where sdflow differs from ComfyUI, on purpose:
 *   - Dropout (use_dropout): ComfyUI builds its torch.nn.Dropout(0.3)
 *     layers and never switches them to eval mode, so its output is random
 *     on every call (30% of the features zeroed, the rest scaled by 1/0.7,
 *     drawn from torch's global generator). sdflow applies no dropout, as
 *     A1111 does at inference.
 *   - An unknown activation_func is an error (ComfyUI logs it and returns
 *     the model without the hypernetwork).
 *   - Shapes are checked at load (each Linear's input the width or the
 *     previous output, the last output the width, LayerNorm sizes): ComfyUI
 *     fails only when a mismatched MLP meets an attention of its width.
 *
 * Ownership: sd_hypernet_load returns one reference (the weights live on
 * the backend given; be NULL only checks: sd_hypernet_probe_file); sd_hypernet_ref / _unref share it between MODEL
 * values (thread-safe counts). The file is closed before load returns.
 */
#ifndef SD_HYPERNET_H
#define SD_HYPERNET_H

#include <stdint.h>

#include "core/error.h"
#include "kernels/backend.h"

typedef struct sd_hypernet sd_hypernet;

typedef enum sd_hn_act {
    SD_HN_LINEAR = 0,
    SD_HN_RELU,
    SD_HN_LEAKYRELU,
    SD_HN_ELU,
    SD_HN_SWISH, /* torch.nn.Hardswish, as ComfyUI maps A1111's "swish" */
    SD_HN_TANH,
    SD_HN_SIGMOID,
    SD_HN_SOFTSIGN,
    SD_HN_MISH
} sd_hn_act;

/* Reads `path` (a torch .pt/.ckpt/.pth/.bin, zip or legacy format, read
 * weights-only: formats/torch_ckpt.h) and uploads its MLPs to be.
 * A file without integer keys (every .safetensors file, whose keys are
 * strings: ComfyUI loads it as a patch that changes nothing) loads as a
 * hypernetwork of no widths (sd_hypernet_widths 0); the caller says so.
 * Errors name the file and the key: SD_ERR_UNSUPPORTED for an unknown
 * activation_func, SD_ERR_FORMAT for what is not A1111's layout (a width
 * that is no pair of state dicts, a missing bias or LayerNorm, shapes
 * that do not chain from the width back to it), and the reader's errors. */
sd_status sd_hypernet_load(sd_backend *be, const char *path, sd_hypernet **out, sd_error *err);
/* The same reading and checks without reading or uploading a weight (the
 * node's file_probe: a file the loader would refuse is refused when the
 * workflow is validated). */
sd_status sd_hypernet_probe_file(const char *path, sd_error *err);
sd_hypernet *sd_hypernet_ref(sd_hypernet *h); /* NULL-safe; returns h */
void sd_hypernet_unref(sd_hypernet *h);       /* NULL-safe */

/* What was read: the widths in file order, the activation and flags. */
int sd_hypernet_widths(const sd_hypernet *h);
int64_t sd_hypernet_width_at(const sd_hypernet *h, int i);
sd_hn_act sd_hypernet_activation(const sd_hypernet *h);
const char *sd_hn_act_name(sd_hn_act a);

/* *out = x + mlp_which(x) * strength (a new tensor) for x [..., C] when the
 * hypernetwork has width C (which 0: the key MLP, 1: the value MLP), else
 * *out = NULL (x is left alone). strength is rounded to float32, as torch
 * multiplies a float32 tensor by a Python float. NULL with the backend's
 * sticky error when an op failed (returns 0 then, 1 otherwise). */
int sd_hypernet_apply(const sd_hypernet *h, int which, sd_bt *x, double strength, sd_bt **out);

#endif
