/* text.h - the primitive and string node family: PrimitiveInt,
 * PrimitiveFloat, PrimitiveString, PrimitiveStringMultiline, PrimitiveBoolean
 * (primitives.c, comfy_extras/nodes_primitive.py); StringConcatenate,
 * StringReplace, StringSubstring, StringTrim, StringLength, StringContains,
 * StringCompare, CaseConverter (strings.c) and RegexMatch, RegexExtract,
 * RegexReplace (regex.c) from comfy_extras/nodes_string.py; PreviewAny
 * (preview_any.c, nodes_preview_any.py).
 *
 * Strings follow Python's str (models/text/pystr.h: code points, full case
 * mappings) and re (models/text/pyregex.h, over PCRE2).
 */
#ifndef SD_NODES_TEXT_H
#define SD_NODES_TEXT_H

#include "core/node.h"

/* NULL-terminated table registered by nodes/nodes.c. */
extern const sd_node_def *const sd_nodes_text[];

/* A STRING input (NULL when it is not one: the node's error names it). */
sd_status sd_nodes_in_string(sd_value *const *in, int i, const char *name, const char **out, sd_error *err);
/* *out = a new STRING value taking over s (a malloc'd string; NULL means
 * out of memory). */
sd_status sd_nodes_set_string(sd_value **out, char *s, sd_error *err);

#endif
