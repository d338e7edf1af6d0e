/* sampler_registry.c - the table of ComfyUI sampler names (comfy.samplers.
 * SAMPLER_NAMES order) and what each one needs. */
#include <string.h>
#include "models/sampling/sampler_internal.h"

#define KD SD_SAMPLER_KDIFFUSION
#define UNC SD_SAMPLER_NEEDS_UNCOND
#define DISC SD_SAMPLER_DISCARD_PENULTIMATE_SIGMA
#define N_NONE SD_SAMPLER_NOISE_NONE
#define N_DEF SD_SAMPLER_NOISE_DEFAULT
#define N_BT SD_SAMPLER_NOISE_BROWNIAN

static const sd_sampler k_samplers[] = {
    {"euler", KD, N_NONE, smp_euler},
    {"euler_cfg_pp", KD | UNC, N_DEF, smp_euler_cfg_pp},
    {"euler_ancestral", KD, N_DEF, smp_euler_ancestral},
    {"euler_ancestral_cfg_pp", KD | UNC, N_DEF, smp_euler_ancestral_cfg_pp},
    {"heun", KD, N_NONE, smp_heun},
    {"heunpp2", KD, N_NONE, smp_heunpp2},
    {"exp_heun_2_x0", KD, N_DEF, smp_exp_heun_2_x0},
    {"exp_heun_2_x0_sde", KD, N_DEF, smp_exp_heun_2_x0_sde},
    {"dpm_2", KD | DISC, N_NONE, smp_dpm_2},
    {"dpm_2_ancestral", KD | DISC, N_DEF, smp_dpm_2_ancestral},
    {"lms", KD, N_NONE, smp_lms},
    {"dpm_fast", KD, N_DEF, smp_dpm_fast},
    {"dpm_adaptive", KD, N_DEF, smp_dpm_adaptive},
    {"dpmpp_2s_ancestral", KD, N_DEF, smp_dpmpp_2s_ancestral},
    {"dpmpp_2s_ancestral_cfg_pp", KD | UNC, N_DEF, smp_dpmpp_2s_ancestral_cfg_pp},
    {"dpmpp_sde", KD, N_BT, smp_dpmpp_sde},
    {"dpmpp_sde_gpu", KD, N_BT, smp_dpmpp_sde},
    {"dpmpp_2m", KD, N_NONE, smp_dpmpp_2m},
    {"dpmpp_2m_cfg_pp", KD | UNC, N_NONE, smp_dpmpp_2m_cfg_pp},
    {"dpmpp_2m_sde", KD, N_BT, smp_dpmpp_2m_sde},
    {"dpmpp_2m_sde_gpu", KD, N_BT, smp_dpmpp_2m_sde},
    {"dpmpp_2m_sde_heun", KD, N_BT, smp_dpmpp_2m_sde_heun},
    {"dpmpp_2m_sde_heun_gpu", KD, N_BT, smp_dpmpp_2m_sde_heun},
    {"dpmpp_3m_sde", KD, N_BT, smp_dpmpp_3m_sde},
    {"dpmpp_3m_sde_gpu", KD, N_BT, smp_dpmpp_3m_sde},
    {"ddpm", KD, N_DEF, smp_ddpm},
    {"lcm", KD, N_DEF, smp_lcm},
    {"ipndm", KD, N_NONE, smp_ipndm},
    {"ipndm_v", KD, N_NONE, smp_ipndm_v},
    {"deis", KD, N_NONE, smp_deis},
    {"res_multistep", KD, N_DEF, smp_res_multistep},
    {"res_multistep_cfg_pp", KD | UNC, N_DEF, smp_res_multistep_cfg_pp},
    {"res_multistep_ancestral", KD, N_DEF, smp_res_multistep_ancestral},
    {"res_multistep_ancestral_cfg_pp", KD | UNC, N_DEF, smp_res_multistep_ancestral_cfg_pp},
    {"gradient_estimation", KD, N_NONE, smp_gradient_estimation},
    {"gradient_estimation_cfg_pp", KD | UNC, N_NONE, smp_gradient_estimation_cfg_pp},
    {"er_sde", KD, N_DEF, smp_er_sde},
    {"seeds_2", KD, N_DEF, smp_seeds_2},
    {"seeds_3", KD, N_DEF, smp_seeds_3},
    {"sa_solver", KD, N_DEF, smp_sa_solver},
    {"sa_solver_pece", KD, N_DEF, smp_sa_solver_pece},
    /* SAMPLER_NAMES only: ddim = euler with random inpaint noise (identical
     * without a mask), UniPC from comfy.extra_samplers */
    {"ddim", 0, N_NONE, smp_euler},
    {"uni_pc", DISC, N_NONE, smp_uni_pc},
    {"uni_pc_bh2", DISC, N_NONE, smp_uni_pc_bh2},
};

#define N_SAMPLERS (sizeof k_samplers / sizeof k_samplers[0])

/* Samplers only a SamplerXxx node makes (not in SAMPLER_NAMES, so not in
 * KSampler's list): ComfyUI builds them as KSAMPLER(function). */
static const sd_sampler k_node_samplers[] = {
    {"euler_pp", UNC, N_NONE, smp_euler_pp}, /* SamplerEulerCFGpp "alternative" */
    /* SamplerLCMUpscale: its noise is randn_like on torch's default generator */
    {"lcm_upscale", SD_SAMPLER_RESIZES, N_NONE, smp_lcm_upscale},
};

static const char *const k_names[] = {
    "euler", "euler_cfg_pp", "euler_ancestral", "euler_ancestral_cfg_pp", "heun", "heunpp2",
    "exp_heun_2_x0", "exp_heun_2_x0_sde", "dpm_2", "dpm_2_ancestral", "lms", "dpm_fast",
    "dpm_adaptive", "dpmpp_2s_ancestral", "dpmpp_2s_ancestral_cfg_pp", "dpmpp_sde",
    "dpmpp_sde_gpu", "dpmpp_2m", "dpmpp_2m_cfg_pp", "dpmpp_2m_sde", "dpmpp_2m_sde_gpu",
    "dpmpp_2m_sde_heun", "dpmpp_2m_sde_heun_gpu", "dpmpp_3m_sde", "dpmpp_3m_sde_gpu", "ddpm",
    "lcm", "ipndm", "ipndm_v", "deis", "res_multistep", "res_multistep_cfg_pp",
    "res_multistep_ancestral", "res_multistep_ancestral_cfg_pp", "gradient_estimation",
    "gradient_estimation_cfg_pp", "er_sde", "seeds_2", "seeds_3", "sa_solver", "sa_solver_pece",
    "ddim", "uni_pc", "uni_pc_bh2", NULL};

_Static_assert(sizeof k_names / sizeof k_names[0] == N_SAMPLERS + 1,
               "sampler name list and table out of sync");

const sd_sampler *sd_sampler_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < N_SAMPLERS; i++)
        if (strcmp(k_samplers[i].name, name) == 0)
            return &k_samplers[i];
    for (size_t i = 0; i < sizeof k_node_samplers / sizeof k_node_samplers[0]; i++)
        if (strcmp(k_node_samplers[i].name, name) == 0)
            return &k_node_samplers[i];
    return NULL;
}

const char *const *sd_sampler_names(size_t *count)
{
    if (count)
        *count = N_SAMPLERS;
    return k_names;
}
