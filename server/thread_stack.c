/* thread_stack.c - a floor under the stack size civetweb asks for its threads.
 *
 * Debian's civetweb 1.15 is built with USE_STACK_SIZE=102400: every thread it
 * starts gets a 100 KiB stack through pthread_attr_setstacksize. glibc carves
 * the static TLS of every library loaded at start-up out of each thread's
 * stack, and the CUDA libraries a CUDA build links carry more than that
 * (cuBLASLt alone 94 KiB of TLS), so pthread_create failed with EINVAL and
 * `sdflow serve` could not start at all in a CUDA build ("Cannot create
 * threads"). The stack size is a compile-time constant of the library, so the
 * only place to fix it is the call: this definition interposes on libc's (an
 * executable's definition wins for the shared libraries that call the
 * function) and raises requests below SRV_STACK_FLOOR to it. Larger requests,
 * and every other attribute, pass through unchanged; bigger stacks only cost
 * address space. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>

#include "internal.h"

#define SRV_STACK_FLOOR ((size_t)1 << 20)

typedef int (*setstacksize_fn)(pthread_attr_t *, size_t);

static setstacksize_fn real_setstacksize;
static pthread_once_t real_once = PTHREAD_ONCE_INIT;

static void find_real(void) {
    real_setstacksize = (setstacksize_fn)dlsym(RTLD_NEXT, "pthread_attr_setstacksize");
}

int pthread_attr_setstacksize(pthread_attr_t *attr, size_t size) {
    pthread_once(&real_once, find_real);
    if (!real_setstacksize) return ENOSYS;
    return real_setstacksize(attr, size < SRV_STACK_FLOOR ? SRV_STACK_FLOOR : size);
}

size_t srv_thread_stack_floor(void) { return SRV_STACK_FLOOR; }
