#!/bin/sh
# Rebuilds redirect.o from redirect.c (clang and libbpf-dev's headers). The crate does not
# run this: the object is committed and included with include_bytes!, so building ebb-xdp
# needs only rustup. The unit test `program_object_holds_the_expected_names` notices an
# object that no longer has the program and map the device looks up.
set -eu
cd "$(dirname "$0")"
clang -O2 -g -target bpf -I/usr/include/"$(uname -m)"-linux-gnu -c redirect.c -o redirect.o
