/* bench_flops.c - counted FLOPs of the networks the benchmark times.
 *
 * The counts follow the modules each forward actually runs (ComfyUI's
 * openaimodel.UNetModel, the LDM VAE decoder, CLIP's text transformer),
 * read from the detected configuration, so they hold for any checkpoint the
 * loaders accept. Only matrix work is counted (2 FLOP per MAC): convolutions,
 * linear layers and the two attention products. That is >99% of the work
 * and the figure GFLOP/s is meant to compare with a GEMM ceiling.
 */
#include "bench/bench.h"

static double conv(double n, double cin, double cout, double k, double h, double w)
{
    return 2.0 * n * cin * cout * k * k * h * w;
}

static double linear(double tokens, double in, double out) { return 2.0 * tokens * in * out; }

/* QK^T and PV over all heads: 2 * (2 * Lq * Lk * C). */
static double attn(double n, double lq, double lk, double c) { return n * 4.0 * lq * lk * c; }

/* ResBlock in_ch -> out_ch at h x w with the time-embedding projection. */
static double resblock(double n, double in, double out, double h, double w, double emb)
{
    double f = conv(n, in, out, 3, h, w) + conv(n, out, out, 3, h, w);
    if (emb > 0) f += linear(n, emb, out);
    if (in != out) f += conv(n, in, out, 1, h, w); /* skip_connection / nin_shortcut */
    return f;
}

/* SpatialTransformer with `depth` BasicTransformerBlocks (self-attention,
 * cross-attention on ctx_len tokens of ctx_dim, GEGLU feed-forward). */
static double transformer(double n, double ch, double h, double w, int depth, double ctx_len,
                          double ctx_dim)
{
    double L = h * w, f = 2 * linear(n * L, ch, ch); /* proj_in, proj_out */
    for (int d = 0; d < depth; d++) {
        f += 4 * linear(n * L, ch, ch) + attn(n, L, L, ch);                 /* attn1 */
        f += 2 * linear(n * L, ch, ch) + 2 * linear(n * ctx_len, ctx_dim, ch) +
             attn(n, L, ctx_len, ch);                                        /* attn2 */
        f += linear(n * L, ch, 8 * ch) + linear(n * L, 4 * ch, ch);         /* GEGLU ff */
    }
    return f;
}

double sd_bench_unet_flops(const sd_unet_config *c, int batch, int lat_h, int lat_w, int ctx_len)
{
    double n = batch, mc = c->model_channels, ted = c->time_embed_dim, cd = c->context_dim;
    double h = lat_h, w = lat_w;
    double f = linear(n, mc, ted) + linear(n, ted, ted);
    if (c->adm_in_channels > 0) f += linear(n, c->adm_in_channels, ted) + linear(n, ted, ted);

    int chans[2 * SD_UNET_MAX_BLOCKS], nch = 0, res_i = 0;
    double ch = mc;
    f += conv(n, c->in_channels, mc, 3, h, w);
    chans[nch++] = (int)mc;
    for (int l = 0; l < c->num_levels; l++) {
        for (int b = 0; b < c->num_res_blocks[l]; b++) {
            double out = mc * c->channel_mult[l];
            f += resblock(n, ch, out, h, w, ted);
            ch = out;
            int depth = res_i < c->n_input_res ? c->transformer_depth[res_i] : 0;
            res_i++;
            if (depth > 0) f += transformer(n, ch, h, w, depth, ctx_len, cd);
            chans[nch++] = (int)ch;
        }
        if (l != c->num_levels - 1) {
            h /= 2, w /= 2;
            f += conv(n, ch, ch, 3, h, w); /* stride-2 conv: output resolution */
            chans[nch++] = (int)ch;
        }
    }
    f += resblock(n, ch, ch, h, w, ted);
    if (c->transformer_depth_middle >= 0) {
        f += transformer(n, ch, h, w, c->transformer_depth_middle, ctx_len, cd);
        f += resblock(n, ch, ch, h, w, ted);
    }
    int ob = 0;
    for (int l = c->num_levels - 1; l >= 0; l--) {
        for (int b = 0; b <= c->num_res_blocks[l]; b++) {
            double skip = nch > 0 ? chans[--nch] : 0, out = mc * c->channel_mult[l];
            f += resblock(n, ch + skip, out, h, w, ted);
            ch = out;
            int k = c->n_output_blocks - 1 - ob;
            int depth = k >= 0 && k < SD_UNET_MAX_BLOCKS ? c->transformer_depth_output[k] : 0;
            if (depth > 0) f += transformer(n, ch, h, w, depth, ctx_len, cd);
            if (l != 0 && b == c->num_res_blocks[l]) {
                h *= 2, w *= 2;
                f += conv(n, ch, ch, 3, h, w);
            }
            ob++;
        }
    }
    f += conv(n, ch, c->out_channels, 3, h, w);
    return f;
}

double sd_bench_vae_decode_flops(const sd_vae_config *c, int batch, int lat_h, int lat_w)
{
    double n = batch, h = lat_h, w = lat_w, e = c->embed_dim, z = c->z_channels;
    double f = 0;
    if (c->has_quant_conv) f += conv(n, e, z, 1, h, w);
    double ch = c->block_out[c->n_levels - 1];
    f += conv(n, z, ch, 3, h, w);
    f += 2 * resblock(n, ch, ch, h, w, 0);
    f += 4 * conv(n, ch, ch, 1, h, w) + attn(n, h * w, h * w, ch); /* single-head mid attn */
    for (int l = c->n_levels - 1; l >= 0; l--) {
        double out = c->block_out[l];
        for (int b = 0; b <= c->num_res_blocks; b++) {
            f += resblock(n, ch, out, h, w, 0);
            ch = out;
        }
        if (l != 0) {
            h *= 2, w *= 2;
            f += conv(n, ch, ch, 3, h, w);
        }
    }
    f += conv(n, ch, 3, 3, h, w);
    return f;
}

double sd_bench_clip_flops(const sd_clip_config *c, int batch, int len)
{
    double t = (double)batch * len, hd = c->hidden;
    double per = 4 * linear(t, hd, hd) + attn(batch, len, len, hd) + 2 * linear(t, hd, c->mlp);
    return per * c->layers;
}
