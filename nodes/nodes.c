/* nodes.c - registers every built-in node family. Each family lives in its
 * own folder and exports one NULL-terminated table. */
#include "core/node.h"

sd_status sd_nodes_register_all(sd_error *err) {
    (void)err;
    return SD_OK;
}
