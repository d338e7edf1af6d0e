/* qwen_tokenizer_internal.h - the loaded Qwen2 tokenizer, shared by its
 * reader (qwen_tokenizer_load.c) and encoder (qwen_tokenizer.c). */
#ifndef SD_QWEN_TOKENIZER_INTERNAL_H
#define SD_QWEN_TOKENIZER_INTERNAL_H

#include "core/hashmap.h"
#include "models/text/qwen_tokenizer.h"

/* Added tokens longer than this are refused (Qwen's longest is 22 bytes):
 * matching costs this many steps per text byte at worst. */
#define QWEN_MAX_ADDED_BYTES 256

typedef struct qwen_added {
    const char *s; /* content, in the arena */
    size_t n;
    int32_t id;
} qwen_added;

struct sd_qwen_tokenizer {
    char *source;      /* the directory or name the files came from */
    char *arena;       /* every token string, NUL-terminated */
    int32_t n_ids;     /* largest id + 1 */
    size_t *id_off;    /* id -> arena offset + 1 (0: no token has the id) */
    sd_hashmap *vocab; /* vocab.json: token bytes (in the arena) -> id */
    int32_t byte_id[256]; /* the id of each byte's byte-level character, -1 when absent */
    /* merges.txt in rank order: (left, right) -> result, found by key */
    int32_t *merge_pair; /* 2 per merge: left id, right id (the map's keys) */
    int32_t *merge_result;
    size_t n_merges;
    sd_hashmap *merges; /* 8-byte (left, right) key -> rank */
    qwen_added *added;  /* sorted by content bytes */
    size_t n_added;
};

/* The rank and result of merging (a, b); 0 when no merge has them. */
int qwen_merge_find(const sd_qwen_tokenizer *t, int32_t a, int32_t b, size_t *rank, int32_t *result);

/* GPT-2's bytes_to_unicode: the code point standing for byte b. */
uint32_t qwen_byte_char(uint8_t b);

#endif
