#!/usr/bin/env python3
"""The workspace's crate graph from `cargo metadata`: a Mermaid flowchart of the
dependencies between the workspace's own crates (normal and build dependencies; dev-
dependencies with --dev), the harnesses under bench/ and tests/ left out (--all keeps
them); --text lists each crate's dependencies instead. The pictures in
docs/12-the-tree.md are its output.

Usage (from anywhere in the repository): docs/tools/crate-graph.py [--dev] [--all] [--text]"""
import json
import subprocess
import sys

dev = "--dev" in sys.argv
text = "--text" in sys.argv
meta = json.loads(subprocess.check_output(
    ["cargo", "metadata", "--format-version", "1", "--no-deps"]))
root = meta["workspace_root"]
harness = ("/bench/", "/tests/")
packages = [p for p in meta["packages"]
            if "--all" in sys.argv
            or not any(h in p["manifest_path"][len(root):] for h in harness)]
ours = {p["name"] for p in packages}
edges = set()
for p in packages:
    for d in p["dependencies"]:
        if d["name"] in ours and (dev or d["kind"] != "dev"):
            edges.add((p["name"], d["name"]))
if text:
    for name in sorted(ours):
        deps = sorted(b for a, b in edges if a == name)
        print(f"{name}: {', '.join(deps) if deps else '-'}")
    sys.exit(0)
print("```mermaid")
print("flowchart TD")
for a, b in sorted(edges):
    print(f"  {a.replace('-', '_')}[{a}] --> {b.replace('-', '_')}[{b}]")
print("```")
