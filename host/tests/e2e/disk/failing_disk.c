/*
 * A disk that stops keeping writes, for the runner's disk tests
 * (host/tests/e2e/disk.rs), preloaded into `settle`:
 * - while the file named by FAILING_SYNC_WHILE exists, every fsync and
 *   fdatasync fails with EIO, as a dying disk's do;
 * - while the file named by FULL_DISK_WHILE exists, every pwrite fails
 *   with ENOSPC, as on a full disk. The store writes its file with pwrite
 *   alone; sockets and the log use other calls and go on working.
 * Nothing reaches the real call then, so no write is made durable behind
 * the test's back. The tests build it with the system's C compiler (the
 * one Rust links with).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

static int while_exists(const char *variable) {
    const char *flag = getenv(variable);
    return flag && access(flag, F_OK) == 0;
}

int fdatasync(int fd) {
    static int (*real)(int) = 0;
    if (while_exists("FAILING_SYNC_WHILE")) {
        errno = EIO;
        return -1;
    }
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}

int fsync(int fd) {
    static int (*real)(int) = 0;
    if (while_exists("FAILING_SYNC_WHILE")) {
        errno = EIO;
        return -1;
    }
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real(fd);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    static ssize_t (*real)(int, const void *, size_t, off_t) = 0;
    if (while_exists("FULL_DISK_WHILE")) {
        errno = ENOSPC;
        return -1;
    }
    if (!real) real = (ssize_t (*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite64");
    return real(fd, buf, count, offset);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    return pwrite64(fd, buf, count, offset);
}
