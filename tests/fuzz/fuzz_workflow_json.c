/* libFuzzer target: API-format workflow JSON (sd_graph_from_json). A graph
 * it accepts is serialized back, and that text must parse again. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/graph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    sd_graph *g = NULL;
    sd_error err;
    if (sd_graph_from_json(text, "fuzz.json", &g, &err) == SD_OK && g) {
        char *back = sd_graph_to_json(g, 0);
        if (back) {
            sd_graph *h = NULL;
            if (sd_graph_from_json(back, "fuzz-roundtrip.json", &h, &err) != SD_OK) abort();
            if (sd_graph_count(h) != sd_graph_count(g)) abort();
            sd_graph_free(h);
            free(back);
        }
        sd_graph_free(g);
    }
    free(text);
    return 0;
}
