/* t5_tokenizer_internal.h - the T5 tokenizer's structures, shared by
 * t5_tokenizer_load.c (reading tokenizer.json) and t5_tokenizer.c
 * (encoding). Not a public contract: use models/text/t5_tokenizer.h. */
#ifndef SD_T5_TOKENIZER_INTERNAL_H
#define SD_T5_TOKENIZER_INTERNAL_H

#include "models/text/spm_charsmap.h"
#include "models/text/t5_tokenizer.h"

/* A byte trie: node 0 is the root; edges live in one open-addressing table
 * keyed by (node, byte), so a step is one probe whatever the fan-out. */
typedef struct t5_trie_edge { uint32_t node; uint32_t child; uint8_t byte; uint8_t used; } t5_trie_edge;
typedef struct t5_trie {
    int32_t *value;      /* per node: the id stored there, or -1 */
    size_t n_nodes, cap_nodes;
    t5_trie_edge *edges; /* open addressing, cap_edges a power of two */
    size_t n_edges, cap_edges;
    size_t max_depth;    /* longest key */
} t5_trie;

int t5_trie_init(t5_trie *t);
void t5_trie_free(t5_trie *t);
/* Insert key -> value (replacing an earlier value). -1 when out of memory. */
int t5_trie_put(t5_trie *t, const char *key, size_t n, int32_t value);
/* The child of node by byte, or -1. */
int64_t t5_trie_step(const t5_trie *t, uint32_t node, uint8_t byte);
/* The value of an exact key, or -1. */
int32_t t5_trie_get(const t5_trie *t, const char *key, size_t n);

/* One normalizer step, applied in order. */
typedef enum t5_norm_kind { T5_NORM_PRECOMPILED, T5_NORM_STRIP, T5_NORM_REPLACE } t5_norm_kind;
typedef struct t5_norm {
    t5_norm_kind kind;
    sd_spm_charsmap *charsmap; /* PRECOMPILED */
    int strip_left, strip_right; /* STRIP */
    /* REPLACE: a literal string (run_min 0), or runs of one character
     * (`run` as UTF-8) of at least run_min repetitions (regex "c{n,}",
     * "c+"), or exactly run_min (regex "c{n}") when run_exact */
    char *pattern;
    size_t pattern_len;
    int run_min, run_exact;
    char *content;
    size_t content_len;
} t5_norm;

typedef enum t5_prepend { T5_PREPEND_ALWAYS, T5_PREPEND_FIRST, T5_PREPEND_NEVER } t5_prepend;

struct sd_t5_tokenizer {
    char *source;
    /* Unigram model */
    int32_t n_pieces;
    char *arena;          /* piece strings, each NUL-terminated */
    size_t *piece_off;    /* n_pieces + 1 offsets into arena */
    double *score;
    double min_score;
    int32_t unk_id;       /* -1: none */
    int byte_fallback;
    t5_trie pieces;       /* piece -> id (the last of equal pieces, as a hash map keeps) */
    /* added tokens, matched in the raw text */
    t5_trie added;
    /* normalizer */
    t5_norm *norm;
    int n_norm;
    /* Metaspace pre-tokenizer (has_metaspace 0: none) */
    int has_metaspace;
    char meta[8];         /* the replacement character, UTF-8 */
    size_t meta_len;
    t5_prepend prepend;
    int meta_split;
    /* TemplateProcessing "single": ids before and after $A */
    int32_t *pre_ids, *post_ids;
    size_t n_pre, n_post;
};

#endif
