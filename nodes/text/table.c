/* table.c - the primitive and string family's registration table. */
#include "text.h"

extern const sd_node_def sd_node_PrimitiveInt, sd_node_PrimitiveFloat, sd_node_PrimitiveString,
    sd_node_PrimitiveStringMultiline, sd_node_PrimitiveBoolean, sd_node_StringConcatenate, sd_node_StringReplace,
    sd_node_StringSubstring, sd_node_StringTrim, sd_node_StringLength, sd_node_StringContains,
    sd_node_StringCompare, sd_node_CaseConverter, sd_node_RegexMatch, sd_node_RegexExtract, sd_node_RegexReplace,
    sd_node_PreviewAny;

const sd_node_def *const sd_nodes_text[] = {
    &sd_node_PrimitiveInt,     &sd_node_PrimitiveFloat,     &sd_node_PrimitiveString,
    &sd_node_PrimitiveStringMultiline, &sd_node_PrimitiveBoolean, &sd_node_StringConcatenate,
    &sd_node_StringReplace,    &sd_node_StringSubstring,    &sd_node_StringTrim,
    &sd_node_StringLength,     &sd_node_StringContains,     &sd_node_StringCompare,
    &sd_node_CaseConverter,    &sd_node_RegexMatch,         &sd_node_RegexExtract,
    &sd_node_RegexReplace,     &sd_node_PreviewAny,         NULL};
