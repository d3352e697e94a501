#!/usr/bin/env python3
"""Issue 21's second reproduction against a memcached on 127.0.0.1:PORT (default 11211):
20,000 sets of 10 KB values under distinct keys, then 400 sets of 300 KB values, one
connection, each reply awaited; prints the replies counted per phase and the `stats`
that matter (natively also the heap: heap_bytes, heap_free_bytes, heap_reserve_bytes).
Exits 1 if a reply is neither STORED nor SERVER_ERROR out of memory, or the connection
breaks. Usage: mc-large-after-small.py [PORT]"""
import socket
import sys

port = int(sys.argv[1]) if len(sys.argv) > 1 else 11211
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(60)
f = s.makefile("rb")
OK = (b"STORED\r\n", b"SERVER_ERROR out of memory storing object\r\n")


def stats():
    s.sendall(b"stats\r\n")
    while True:
        line = f.readline()
        if not line or line.startswith(b"END"):
            return
        if any(x in line for x in (b"evictions", b"outofmemory", b"curr_items", b" bytes ", b"heap")):
            print("  " + line.decode().strip())


def phase(name, count, size, key):
    replies = {}
    for i in range(count):
        value = (b"%08d" % i) * (size // 8)
        s.sendall(b"set %s%d 0 0 %d\r\n" % (key, i, len(value)) + value + b"\r\n")
        reply = f.readline()
        replies[reply] = replies.get(reply, 0) + 1
        if reply not in OK:
            print(f"{name}: set {i}: unexpected reply {reply!r}")
            sys.exit(1)
    print(f"{name}: " + ", ".join(f"{r.decode().strip()} {n}" for r, n in replies.items()))
    stats()


phase("10 KB", 20000, 10000, b"small")
phase("300 KB", 400, 300000, b"big")
