/* test_membudget.c - the memory budget module (core/membudget.h): size
 * parsing (suffixes, bad text), overflow-safe tensor byte counts, and the
 * refusal message naming node, input, bytes and limit; no budget (0) and a
 * missing context never refuse. */
#include "testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/membudget.h"

int main(void) {
    sd_error err;
    sd_error_clear(&err);
    struct { const char *s; uint64_t v; } good[] = {
        {"0", 0}, {"123", 123}, {"1K", 1024}, {"64m", 64ull << 20}, {"16G", 16ull << 30},
        {"16GiB", 16ull << 30}, {"2gb", 2ull << 30}, {"1T", 1ull << 40},
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        uint64_t v = 1;
        CHECK_OK(sd_mem_parse(good[i].s, &v, &err), &err);
        CHECK_MSG(v == good[i].v, "'%s' -> %llu", good[i].s, (unsigned long long)v);
    }
    const char *bad[] = {"", "lots", "-5", "1X", "1GiBs", "99999999999999999999", "20000000000T", " 1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        uint64_t v = 7;
        sd_status rc = sd_mem_parse(bad[i], &v, &err);
        CHECK_MSG(rc == SD_ERR_INVALID && v == 7 && strstr(err.msg, bad[i]), "'%s' accepted (%s)", bad[i],
                  err.msg);
    }

    int64_t s[4] = {64, 4, 2048, 2048};
    CHECK(sd_mem_tensor_bytes(4, s, 4) == 4294967296ull);
    int64_t huge[4] = {INT64_MAX, 4, 4, 4};
    CHECK(sd_mem_tensor_bytes(4, huge, 4) == UINT64_MAX);
    int64_t neg[2] = {-1, 4};
    CHECK(sd_mem_tensor_bytes(2, neg, 4) == UINT64_MAX);

    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_MSG(env.max_memory == sd_mem_physical() && env.max_memory > 0,
              "default budget %llu, physical %llu", (unsigned long long)env.max_memory,
              (unsigned long long)sd_mem_physical());
    CHECK_OK(sd_env_set_max_memory(&env, "1G", &err), &err);
    sd_node_ctx ctx = {.env = &env, .node_id = "7", .class_type = "EmptyLatentImage"};
    CHECK_OK(sd_mem_check(&ctx, "batch_size", 1ull << 30, "exactly the limit", &err), &err);
    sd_error_clear(&err);
    sd_status rc = sd_mem_check(&ctx, "batch_size", 4294967296ull, "the latent [64, 4, 2048, 2048] float32", &err);
    CHECK(rc == SD_ERR_NOMEM);
    CHECK_MSG(!strcmp(err.node_id, "7") && !strcmp(err.class_type, "EmptyLatentImage") &&
                  !strcmp(err.input, "batch_size"),
              "node/input not set: '%s' '%s' '%s'", err.node_id, err.class_type, err.input);
    CHECK_MSG(strstr(err.msg, "the latent [64, 4, 2048, 2048] float32 needs 4.0 GiB (4294967296 bytes)") &&
                  strstr(err.msg, "limit of 1.0 GiB") && strstr(err.msg, "--max-memory"),
              "message: %s", err.msg);
    sd_error_clear(&err);
    rc = sd_mem_check(&ctx, NULL, UINT64_MAX, NULL, &err);
    CHECK_MSG(rc == SD_ERR_NOMEM && strstr(err.msg, "more than 16 EiB"), "overflow: %s", err.msg);
    CHECK_OK(sd_env_set_max_memory(&env, "0", &err), &err);
    CHECK_OK(sd_mem_check(&ctx, "x", UINT64_MAX, "anything", &err), &err);
    CHECK_OK(sd_mem_check(NULL, "x", UINT64_MAX, "anything", &err), &err);
    sd_env_cleanup(&env);

    setenv("SDFLOW_MAX_MEMORY", "bogus", 1);
    rc = sd_env_init(&env, &err);
    CHECK_MSG(rc == SD_ERR_INVALID && strstr(err.msg, "SDFLOW_MAX_MEMORY") && strstr(err.msg, "bogus"),
              "bad SDFLOW_MAX_MEMORY: %s", err.msg);
    setenv("SDFLOW_MAX_MEMORY", "3M", 1);
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK(env.max_memory == 3ull << 20);
    sd_env_cleanup(&env);
    return sd_test_finish();
}
