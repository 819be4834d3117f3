/*
 * A slower disk, for benchmarks: every fsync and fdatasync of the process
 * it is preloaded into (and its children) first sleeps SLOW_SYNC_US
 * microseconds (default 5000). docs/performance.md (thirteenth round) used
 * it to see how settle behaves where an fsync costs what it does on an SD
 * card or a network disk:
 *
 *   gcc -shared -fPIC -O2 -o /tmp/slow_fsync.so scripts/slow_fsync.c -ldl
 *   LD_PRELOAD=/tmp/slow_fsync.so SLOW_SYNC_US=2000 \
 *     target/release/examples/bench_scale --tasks 500 --devices 500 --concurrency 1
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static void pause_before_sync(void) {
    const char *text = getenv("SLOW_SYNC_US");
    long us = text ? atol(text) : 5000;
    struct timespec wait = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&wait, 0);
}

int fdatasync(int fd) {
    static int (*real)(int) = 0;
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    pause_before_sync();
    return real(fd);
}

int fsync(int fd) {
    static int (*real)(int) = 0;
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    pause_before_sync();
    return real(fd);
}
