/* step_schedule_tables.h - published noise-level tables of two table-driven
 * schedulers, generated from ComfyUI's modules by
 * scripts/gen_step_schedule_tables.py (the data lives in
 * step_schedule_tables.c; schedules.c computes with it).
 *
 * GITS (comfy_extras/nodes_gits.py): one table set per coefficient, keyed by
 * the coefficient as Python's round(coeff, 2) prints it ("0.80" ... "1.50");
 * rows[k] holds the k + 3 sigmas of a (k + 2)-step schedule, descending.
 * OptimalSteps (nodes_optimalsteps.py): one descending list per model type. */
#ifndef SD_STEP_SCHEDULE_TABLES_H
#define SD_STEP_SCHEDULE_TABLES_H

#define SD_GITS_ROWS 19 /* 2..20 steps */

typedef struct {
    const char *coeff; /* "%.2f" of the coefficient */
    const double *rows[SD_GITS_ROWS];
} sd_gits_table;

typedef struct {
    const char *model_type; /* "FLUX", "Wan", "Chroma" */
    const double *sigmas;
    int len;
} sd_optimal_steps_table;

extern const sd_gits_table sd_gits_tables[];
extern const int sd_gits_table_count;
extern const sd_optimal_steps_table sd_optimal_steps_tables[];
extern const int sd_optimal_steps_table_count;

#endif
