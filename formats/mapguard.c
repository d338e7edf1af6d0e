/* mapguard.c - SIGBUS on a registered file mapping becomes zero pages and
 * a flag (mapguard.h explains the design). */
#include "mapguard.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SLOTS 1024

/* Read by the handler without locks: a slot is live while base != 0.
 * Writers (add/remove) hold mu; the handler only reads base/len and sets
 * faulted. */
typedef struct slot {
    uintptr_t base;
    size_t len;
    int faulted;
} slot;

static slot slots[SLOTS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct sigaction previous;
static uintptr_t page_size = 4096;
static int installed;

/* Hands a fault that is not ours to what was installed before. With the
 * default action, restoring it and returning re-runs the access, which then
 * ends the process with SIGBUS as it would have without the guard. */
static void chain(int sig, siginfo_t *si, void *uc) {
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction) {
            previous.sa_sigaction(sig, si, uc);
            return;
        }
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    signal(sig, SIG_DFL);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; i < SLOTS; i++) {
        uintptr_t b = __atomic_load_n(&slots[i].base, __ATOMIC_ACQUIRE);
        size_t n = __atomic_load_n(&slots[i].len, __ATOMIC_ACQUIRE);
        if (!b || a < b || a - b >= n) continue;
        uintptr_t lo = a & ~(page_size - 1), hi = (b + n + page_size - 1) & ~(page_size - 1);
        void *r = mmap((void *)lo, hi - lo, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (r == MAP_FAILED) break;
        __atomic_store_n(&slots[i].faulted, 1, __ATOMIC_RELEASE);
        return;
    }
    chain(sig, si, uc);
}

static void install(void) {
    long p = sysconf(_SC_PAGESIZE);
    if (p > 0) page_size = (uintptr_t)p;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    installed = sigaction(SIGBUS, &sa, &previous) == 0;
}

int sd_mapguard_add(const void *base, size_t len) {
    if (!base || !len) return -1;
    pthread_once(&once, install);
    if (!installed) return -1;
    int got = -1;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < SLOTS && got < 0; i++) {
        if (slots[i].base) continue;
        __atomic_store_n(&slots[i].faulted, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&slots[i].len, len, __ATOMIC_RELEASE);
        __atomic_store_n(&slots[i].base, (uintptr_t)base, __ATOMIC_RELEASE);
        got = i;
    }
    pthread_mutex_unlock(&mu);
    return got;
}

void sd_mapguard_remove(int i) {
    if (i < 0 || i >= SLOTS) return;
    pthread_mutex_lock(&mu);
    __atomic_store_n(&slots[i].base, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&slots[i].len, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&mu);
}

int sd_mapguard_faulted(int i) {
    return i >= 0 && i < SLOTS && __atomic_load_n(&slots[i].faulted, __ATOMIC_ACQUIRE);
}
