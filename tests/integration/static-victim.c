/*
 * static-victim: a statically linked program, for test-preload: zswap-run
 * says it cannot manage it and runs it all the same. Prints "static ok".
 */
#include <stdio.h>

int main(void) {
        puts("static ok");
        return 0;
}
