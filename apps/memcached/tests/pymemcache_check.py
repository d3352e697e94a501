#!/usr/bin/env python3
"""A second real client against the server: pymemcache (text protocol).

Usage: pymemcache_check.py PORT [SEED [HOST]] (HOST default 127.0.0.1). Exits 0 when every check passed; on the first
failed check prints what was expected and what came, and exits 1.
"""

import random
import sys

from pymemcache.client.base import Client

PORT = int(sys.argv[1])
SEED = int(sys.argv[2]) if len(sys.argv) > 2 else 1
HOST = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1"
rng = random.Random(SEED)
step = "start"


def check(what, got, want):
    if got != want:
        print(f"FAIL at {step}: {what}: got {got!r}, want {want!r}", flush=True)
        sys.exit(1)


def blob(n):
    """Random bytes with CR, LF, CRLF, NUL and protocol words inside."""
    parts = [rng.randbytes(n)]
    parts.insert(rng.randrange(2), b"\r\nEND\r\nVALUE k 0 1\r\n\x00\n\r")
    return b"".join(parts)


def connect():
    return Client(
        (HOST, PORT),
        default_noreply=False,
        connect_timeout=10,
        timeout=10,
        no_delay=True,
        # get/gets answer (value, flags) so the flags are checked too.
        deserializer=lambda key, value, flags: (value, flags),
    )


c = connect()

step = "version"
version = c.version()
check("version is bytes", isinstance(version, bytes) and len(version) > 0, True)

step = "flush_all"
check("flush_all", c.flush_all(), True)

step = "set/get binary-safe values"
values = {}
for i in range(50):
    key = f"bin:{i}"
    value = blob(rng.choice([0, 1, 2, 10, 100, 1000, 5000, 100000]))
    flags = rng.choice([0, 1, 0xFFFFFFFF, rng.randrange(1 << 32)])
    check(f"set {key}", c.set(key, value, flags=flags), True)
    values[key] = (value, flags)
for key, want in values.items():
    check(f"get {key}", c.get(key), want)
check("get missing", c.get("bin:missing"), None)

step = "get_many"
keys = list(values)[:20] + ["nope:1", "nope:2"]
got = c.get_many(keys)
check("get_many keys", sorted(got), sorted(k for k in keys if k in values))
for key in got:
    check(f"get_many {key}", got[key], values[key])

step = "gets/cas"
value, cas = c.gets("bin:0")
check("gets value", value, values["bin:0"])
check("cas id is bytes of digits", cas.isdigit(), True)
check("cas with a stale id", c.cas("bin:0", b"x", b"1" if cas != b"1" else b"2"), False)
check("cas with the right id", c.cas("bin:0", b"new\r\nvalue", cas, flags=7), True)
check("get after cas", c.get("bin:0"), (b"new\r\nvalue", 7))
check("cas again with the old id", c.cas("bin:0", b"y", cas), False)
check("cas on a missing key", c.cas("bin:missing", b"y", cas), None)
_, cas2 = c.gets("bin:0")
check("cas id changed", cas2 != cas, True)

step = "add/replace"
check("add existing", c.add("bin:1", b"zzz"), False)
check("add new", c.add("fresh", b"a\r\nb", flags=3), True)
check("get added", c.get("fresh"), (b"a\r\nb", 3))
check("replace missing", c.replace("nothere", b"zzz"), False)
check("replace existing", c.replace("fresh", b"replaced", flags=4), True)
check("get replaced", c.get("fresh"), (b"replaced", 4))

step = "append/prepend"
check("append", c.append("fresh", b"\r\n+tail"), True)
check("prepend", c.prepend("fresh", b"head+\r\n"), True)
check("append/prepend keep flags", c.get("fresh"), (b"head+\r\nreplaced\r\n+tail", 4))
check("append missing", c.append("nothere", b"x"), False)
check("prepend missing", c.prepend("nothere", b"x"), False)
check("append did not create", c.get("nothere"), None)

step = "incr/decr"
check("set counter", c.set("n", b"10"), True)
check("incr", c.incr("n", 5), 15)
check("decr", c.decr("n", 3), 12)
check("decr below zero stops at 0", c.decr("n", 100), 0)
check("incr huge", c.incr("n", 18446744073709551615), 18446744073709551615)
check("incr wraps", c.incr("n", 2), 1)
check("incr missing", c.incr("nothere", 1), None)
check("decr missing", c.decr("nothere", 1), None)
check("set counter 100", c.set("m", b"100"), True)
check("decr to one digit", c.decr("m", 99), 1)
check("get after decr", int(c.get("m")[0]), 1)
check("set non-numeric", c.set("s", b"abc"), True)
try:
    c.incr("s", 1)
    check("incr non-numeric raised", False, True)
except Exception as e:  # MemcacheClientError: CLIENT_ERROR cannot increment ...
    check("incr non-numeric error", "increment" in str(e) or "CLIENT_ERROR" in str(e), True)

step = "touch"
check("touch existing", c.touch("fresh", 100), True)
check("touch missing", c.touch("nothere", 100), False)
check("touch to expire", c.touch("fresh", -1), True)
check("expired by touch", c.get("fresh"), None)
check("set already expired", c.set("gone", b"x", expire=-1), True)
check("get already expired", c.get("gone"), None)
check("set with expiry", c.set("later", b"x", expire=3600), True)
check("get with expiry", c.get("later"), (b"x", 0))

step = "delete"
check("delete existing", c.delete("bin:2"), True)
check("delete again", c.delete("bin:2"), False)
check("get deleted", c.get("bin:2"), None)

step = "noreply"
check("set noreply", c.set("q", b"1\r\n2", noreply=True), True)
check("add noreply (exists)", c.add("q", b"no", noreply=True), True)
check("replace noreply", c.replace("q", b"7", noreply=True), True)
check("append noreply", c.append("q", b"8", noreply=True), True)
check("prepend noreply", c.prepend("q", b"6", noreply=True), True)
check("incr noreply", c.incr("q", 10, noreply=True), None)
check("decr noreply", c.decr("q", 1, noreply=True), None)
check("touch noreply", c.touch("q", 1000, noreply=True), True)
check("after noreply commands", c.get("q"), (b"687", 0))
_, qcas = c.gets("q")
check("cas noreply", c.cas("q", b"casq", qcas, noreply=True), True)
check("after cas noreply", c.get("q"), (b"casq", 0))
check("delete noreply", c.delete("q", noreply=True), True)
check("after delete noreply", c.get("q"), None)
check("set_many noreply", c.set_many({"m1": b"a", "m2": b"b"}, noreply=True), [])
check("after set_many", c.get_many(["m1", "m2"]), {"m1": (b"a", 0), "m2": (b"b", 0)})
check("delete_many", c.delete_many(["m1", "m2"], noreply=False), True)
check("after delete_many", c.get_many(["m1", "m2"]), {})

step = "stats"
stats = c.stats()
for name in [b"curr_items", b"total_items", b"bytes", b"curr_connections", b"cmd_get", b"get_hits"]:
    check(f"stats has {name!r}", name in stats, True)
check("curr_items counts", stats[b"curr_items"] > 0, True)
check("get_hits counted", stats[b"get_hits"] > 0, True)
settings = c.stats("settings")
check("stats settings has maxbytes", b"maxbytes" in settings, True)

step = "a second client sees the data"
d = connect()
check("other connection get", d.get("bin:3"), values["bin:3"])
d.close()

step = "flush_all empties"
check("flush_all", c.flush_all(), True)
for key in values:
    check(f"get {key} after flush_all", c.get(key), None)
check("flush_all noreply", c.flush_all(noreply=True), True)
check("version still answers", c.version(), version)

c.close()
print("pymemcache checks passed", flush=True)
