/*
 * replay.c: a main() for the fuzzers, so that each is also an ordinary
 * program (systemd's src/fuzz/fuzz-main.c). Every argument is a file or a
 * directory; every regular file in a directory (not recursively, in name
 * order) is read into a buffer of exactly its size, as libFuzzer would hand
 * it over, and given to LLVMFuzzerTestOneInput() once. A failed check
 * aborts with the fuzzer's message; the name of the input comes first.
 *
 * Finding no input at all is a failure: a test that replays an empty or
 * misnamed corpus would pass while checking nothing.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fuzz.h"
#include "macro.h"

static int read_all(const char *path, uint8_t **ret, size_t *ret_size) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        _cleanup_free_ uint8_t *buf = NULL;
        struct stat st;
        size_t done = 0;

        if (fd < 0 || fstat(fd, &st) < 0)
                return -errno;
        /* exactly the input's size, so that ASan sees a read past its end */
        buf = malloc(st.st_size ? (size_t)st.st_size : 1);
        if (!buf)
                return -ENOMEM;
        while (done < (size_t)st.st_size) {
                ssize_t k = read(fd, buf + done, (size_t)st.st_size - done);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return k < 0 ? -errno : -EIO;
                done += (size_t)k;
        }
        *ret = TAKE_PTR(buf);
        *ret_size = done;
        return 0;
}

static int run_file(const char *path) {
        uint8_t *buf = NULL;
        size_t size = 0;
        int r = read_all(path, &buf, &size);

        if (r < 0) {
                fprintf(stderr, "%s: %s\n", path, strerror(-r));
                return r;
        }
        fprintf(stderr, "%s (%zu bytes)\n", path, size);
        LLVMFuzzerTestOneInput(buf, size);
        free(buf);
        return 0;
}

static int is_input(const struct dirent *d) {
        return d->d_name[0] != '.';
}

/* Returns the number of inputs run, or -errno. */
static int run_dir(const char *dir) {
        struct dirent **list = NULL;
        int n = scandir(dir, &list, is_input, alphasort), count = 0, r = 0;

        if (n < 0) {
                fprintf(stderr, "%s: %s\n", dir, strerror(errno));
                return -errno;
        }
        for (int i = 0; i < n; i++) {
                _cleanup_free_ char *p = NULL;
                struct stat st;

                if (r == 0 && asprintf(&p, "%s/%s", dir, list[i]->d_name) < 0)
                        r = -ENOMEM;
                if (r == 0 && stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
                        r = run_file(p);
                        count++;
                }
                free(list[i]);
        }
        free(list);
        return r < 0 ? r : count;
}

int main(int argc, char **argv) {
        struct timespec t0, t1;
        int total = 0;

        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 1; i < argc; i++) {
                struct stat st;
                int r;

                if (stat(argv[i], &st) < 0) {
                        fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
                        return EXIT_FAILURE;
                }
                r = S_ISDIR(st.st_mode) ? run_dir(argv[i]) : (run_file(argv[i]) < 0 ? -EIO : 1);
                if (r < 0)
                        return EXIT_FAILURE;
                total += r;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (total == 0) {
                fprintf(stderr, "no inputs: usage: %s FILE|DIR...\n", argv[0]);
                return EXIT_FAILURE;
        }
        printf("%d inputs in %.3f s\n", total,
               (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
        return EXIT_SUCCESS;
}
