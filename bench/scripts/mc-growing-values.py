#!/usr/bin/env python3
"""Issue 21's first reproduction against a memcached on 127.0.0.1:PORT (default 11211):
values of growing size under distinct keys, 1 KiB, 3 KiB, 5 KiB, ... in 2 KiB steps up to
the 1 MiB item limit, one connection, each reply awaited; prints how many were stored
and refused. Exits 1 on any other reply or a broken connection.
Usage: mc-growing-values.py [PORT]"""
import socket
import sys

port = int(sys.argv[1]) if len(sys.argv) > 1 else 11211
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(60)
f = s.makefile("rb")
stored = refused = 0
for i in range(1, 2048, 2):
    n = i * 1024
    if n + 100 > 1024 * 1024:
        break
    s.sendall(b"set grow%d 0 0 %d\r\n" % (i, n) + bytes([i % 251]) * n + b"\r\n")
    line = f.readline()
    if line == b"STORED\r\n":
        stored += 1
    elif line == b"SERVER_ERROR out of memory storing object\r\n":
        refused += 1
    else:
        print(f"set of {n} bytes: unexpected reply {line!r}")
        sys.exit(1)
print(f"stored {stored}, out of memory {refused}")
