# test-preload: python3 builds a large dict (like the corpus' pyheap.py),
# prints its pid and a digest of everything in it, waits for a line, and
# prints the digest again, computed after the test evicted it.
import hashlib
import os
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 300000
d = {}
for i in range(n):
    d["key-%d" % i] = ("value %d" % i, i * 7, [str(i)] * 3, {"n": i})


def digest():
    h = hashlib.sha256()
    for k, v in d.items():
        h.update(k.encode())
        h.update(repr(v).encode())
    return h.hexdigest()


print(os.getpid(), digest(), flush=True)
sys.stdin.readline()
print(digest(), flush=True)
