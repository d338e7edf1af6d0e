/* SHA-256 against the FIPS 180-4 / NIST example vectors, incremental
 * updates split at every offset, and the file helper. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sha256.h"
#include "testutil.h"

static void hex_of(const void *d, size_t n, char out[65]) {
    uint8_t h[32];
    sd_sha256(d, n, h);
    sd_sha256_hex(h, out);
}

int main(void) {
    char hex[65];
    hex_of("abc", 3, hex);
    CHECK(strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
    hex_of("", 0, hex);
    CHECK(strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0);
    const char *m2 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    hex_of(m2, strlen(m2), hex);
    CHECK(strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") == 0);
    const char *m3 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                     "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    hex_of(m3, strlen(m3), hex);
    CHECK(strcmp(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1") == 0);

    /* One million 'a' (FIPS 180-4 long message), fed in odd-sized pieces. */
    {
        sd_sha256_ctx c;
        sd_sha256_init(&c);
        char chunk[997];
        memset(chunk, 'a', sizeof chunk);
        size_t left = 1000000;
        while (left) {
            size_t k = left < sizeof chunk ? left : sizeof chunk;
            sd_sha256_update(&c, chunk, k);
            left -= k;
        }
        uint8_t h[32];
        sd_sha256_final(&c, h);
        sd_sha256_hex(h, hex);
        CHECK(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0);
    }

    /* Every split point of a 200-byte message gives the one-shot digest. */
    {
        uint8_t msg[200], ref[32], h[32];
        for (int i = 0; i < 200; i++) msg[i] = (uint8_t)(i * 31 + 7);
        sd_sha256(msg, sizeof msg, ref);
        int all = 1;
        for (size_t cut = 0; cut <= sizeof msg; cut++) {
            sd_sha256_ctx c;
            sd_sha256_init(&c);
            sd_sha256_update(&c, msg, cut);
            sd_sha256_update(&c, msg + cut, sizeof msg - cut);
            sd_sha256_final(&c, h);
            if (memcmp(h, ref, 32) != 0) all = 0;
        }
        CHECK(all);
    }

    /* The CPU-accelerated block function (when this machine has one) and
     * the portable one agree on every length around block boundaries. */
    {
        sd_sha256_ctx probe;
        sd_sha256_init(&probe);
        printf("sha256: accelerated path %s\n", probe.accel ? "in use" : "not available");
        static uint8_t msg[4096 + 3];
        for (size_t i = 0; i < sizeof msg; i++) msg[i] = (uint8_t)(i * 7 + (i >> 8));
        int all = 1;
        for (size_t len = 0; len <= sizeof msg; len += (len < 300 ? 1 : 97)) {
            uint8_t a[32], b[32];
            sd_sha256_ctx c;
            sd_sha256_init(&c);
            sd_sha256_update(&c, msg, len);
            sd_sha256_final(&c, a);
            sd_sha256_init(&c);
            c.accel = 0;
            sd_sha256_update(&c, msg, len / 3);
            sd_sha256_update(&c, msg + len / 3, len - len / 3);
            sd_sha256_final(&c, b);
            if (memcmp(a, b, 32) != 0) all = 0;
        }
        CHECK(all);
        sd_sha256_ctx c;
        sd_sha256_init(&c);
        c.accel = 0;
        sd_sha256_update(&c, "abc", 3);
        uint8_t h[32];
        sd_sha256_final(&c, h);
        sd_sha256_hex(h, hex);
        CHECK(strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
    }

    /* File helper: same digest as the buffer; missing file is NOT_FOUND. */
    {
        const char *dir = sd_test_tmpdir("sha256");
        char path[1024];
        snprintf(path, sizeof path, "%s/f.bin", dir);
        FILE *f = fopen(path, "wb");
        CHECK(f != NULL);
        if (f) {
            fwrite(m3, 1, strlen(m3), f);
            fclose(f);
        }
        uint8_t h[32];
        sd_error err;
        sd_error_clear(&err);
        CHECK_OK(sd_sha256_file(path, h, &err), &err);
        sd_sha256_hex(h, hex);
        CHECK(strcmp(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1") == 0);
        snprintf(path, sizeof path, "%s/missing.bin", dir);
        CHECK(sd_sha256_file(path, h, &err) == SD_ERR_NOT_FOUND);
        CHECK(strstr(err.msg, "missing.bin") != NULL);
    }
    return sd_test_finish();
}
