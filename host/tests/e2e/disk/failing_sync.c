/*
 * A disk that stops keeping writes, for the runner's fault tests
 * (host/tests/e2e/faults.rs): preloaded into `settle`, every fsync and
 * fdatasync fails with EIO while the file named by FAILING_SYNC_WHILE
 * exists, as a dying disk's do. Nothing reaches the real call then, so no
 * write is made durable behind the test's back. The tests build it with
 * the system's C compiler (the one Rust links with).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static int failing(void) {
    const char *flag = getenv("FAILING_SYNC_WHILE");
    return flag && access(flag, F_OK) == 0;
}

int fdatasync(int fd) {
    static int (*real)(int) = 0;
    if (failing()) {
        errno = EIO;
        return -1;
    }
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}

int fsync(int fd) {
    static int (*real)(int) = 0;
    if (failing()) {
        errno = EIO;
        return -1;
    }
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real(fd);
}
