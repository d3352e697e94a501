//! Import circles between the files of one crate, and what the guest's driver names.
//!
//! A file's imports are the module paths it names: `use` trees (`use crate::a::{b, c::d}`,
//! `use super::x`, `use child::y`) and paths spelled inline (`crate::a::f()`,
//! `super::T`). Each names the deepest source file whose module is a prefix of the path.
//! A file naming its own enclosing modules (a `mod.rs` or the crate root) is not an
//! import: a parent module is the namespace its children share. Everything else is an
//! arrow from one file to another, and two files that reach each other through arrows are
//! a circle: neither can be read, changed or tested without the other.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A source file and the module path it defines (`src/tcp/send.rs` → `["tcp", "send"]`).
struct SourceFile {
    path: PathBuf,
    module: Vec<String>,
}

/// The files of one crate: every `.rs` under `src/` except test modules (`tests.rs`,
/// anything under a `tests/` folder) and, beside a `lib.rs`, the binaries.
fn crate_files(src: &Path) -> Vec<SourceFile> {
    let has_lib = src.join("lib.rs").exists();
    let mut files = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let rel: Vec<String> = path
                .strip_prefix(src)
                .unwrap()
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if path.is_dir() {
                if rel.last().is_some_and(|n| n != "tests") && !(has_lib && rel == ["bin"]) {
                    stack.push(path);
                }
                continue;
            }
            let Some(stem) = rel.last().and_then(|n| n.strip_suffix(".rs")) else {
                continue;
            };
            if stem == "tests" || (has_lib && stem == "main" && rel.len() == 1) {
                continue;
            }
            let mut module = rel[..rel.len() - 1].to_vec();
            if !(matches!(stem, "mod" | "lib" | "main") && (stem == "mod" || rel.len() == 1)) {
                module.push(stem.to_string());
            }
            files.push(SourceFile { path, module });
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}

/// Tokens of Rust source with comments, strings and character literals removed: words,
/// `::` and single punctuation characters.
fn tokens(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == 'r' && matches!(next, Some('"') | Some('#')) && !prev_is_word(&chars, i) {
            // A raw string: r"…" or r#…#"…"#…#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push("r".into());
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{1F600}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == ':' && next == Some(':') {
            out.push("::".into());
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push(c.to_string());
            }
            i += 1;
        }
    }
    out
}

fn prev_is_word(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

fn is_word(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// `tokens` without the items marked `#[cfg(test)]` (a test module, a test-only `use`),
/// and the names of the test-only modules declared in other files (`#[cfg(test)] mod x;`).
fn without_test_items(tokens: &[String]) -> (Vec<String>, Vec<String>) {
    const CFG_TEST: [&str; 7] = ["#", "[", "cfg", "(", "test", ")", "]"];
    let mut kept = Vec::new();
    let mut test_modules = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i..].iter().take(7).map(String::as_str).eq(CFG_TEST) {
            i += 7;
            // Further attributes, then the item up to its `;` or its closing brace.
            while tokens.get(i).is_some_and(|t| t == "#") {
                let mut depth = 0;
                while i < tokens.len() {
                    match tokens[i].as_str() {
                        "[" => depth += 1,
                        "]" => {
                            depth -= 1;
                            if depth == 0 {
                                i += 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
            }
            if let Some(k) = tokens[i..].iter().position(|t| t == "mod")
                && k <= 4
                && tokens.get(i + k + 2).is_some_and(|t| t == ";")
            {
                test_modules.push(tokens[i + k + 1].clone());
            }
            let mut depth = 0;
            while i < tokens.len() {
                match tokens[i].as_str() {
                    "{" => depth += 1,
                    "}" => {
                        depth -= 1;
                        if depth == 0 {
                            i += 1;
                            break;
                        }
                    }
                    ";" if depth == 0 => {
                        i += 1;
                        break;
                    }
                    _ => {}
                }
                i += 1;
            }
        } else {
            kept.push(tokens[i].clone());
            i += 1;
        }
    }
    (kept, test_modules)
}

/// Every path a file names: the leaves of its `use` trees and its inline `crate::`,
/// `super::` and `self::` paths, as lists of segments.
fn named_paths(tokens: &[String]) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i] == "use" {
            let end = tokens[i..]
                .iter()
                .position(|t| t == ";")
                .map_or(tokens.len(), |p| i + p);
            use_tree(&tokens[i + 1..end], &[], &mut paths);
            i = end + 1;
        } else if matches!(tokens[i].as_str(), "crate" | "super" | "self")
            && tokens.get(i + 1).is_some_and(|t| t == "::")
            && !(i > 0 && tokens[i - 1] == "::")
        {
            let mut path = vec![tokens[i].clone()];
            let mut j = i + 1;
            while tokens.get(j).is_some_and(|t| t == "::")
                && tokens.get(j + 1).is_some_and(|t| is_word(t))
            {
                path.push(tokens[j + 1].clone());
                j += 2;
            }
            paths.push(path);
            i = j;
        } else {
            i += 1;
        }
    }
    paths
}

/// Expands one `use` tree (the tokens between `use` and `;`) under `prefix`.
fn use_tree(tokens: &[String], prefix: &[String], out: &mut Vec<Vec<String>>) {
    // Split at top-level commas when the tree is a group's contents.
    let mut depth = 0;
    let mut start = 0;
    let mut parts = Vec::new();
    for (k, t) in tokens.iter().enumerate() {
        match t.as_str() {
            "{" => depth += 1,
            "}" => depth -= 1,
            "," if depth == 0 => {
                parts.push(&tokens[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&tokens[start..]);
    for part in parts {
        let mut path = prefix.to_vec();
        let mut k = 0;
        while k < part.len() {
            let t = part[k].as_str();
            if t == "{" {
                let close = part.len() - 1 - part.iter().rev().position(|t| t == "}").unwrap_or(0);
                use_tree(&part[k + 1..close.max(k + 1)], &path, out);
                path.clear();
                break;
            } else if t == "as" {
                break;
            } else if is_word(t) && t != "pub" {
                path.push(t.to_string());
            } else if t == "*" {
                break;
            }
            k += 1;
        }
        // A leaf, or a glob (`a::*`) naming the module itself.
        let glob = part.iter().any(|t| t == "*");
        if !path.is_empty() && (path.len() > prefix.len() || glob) {
            out.push(path);
        }
    }
}

/// `path` as named in the file of module `here`, made absolute (from the crate root);
/// `None` for a path into another crate or std.
fn absolute(
    here: &[String],
    path: &[String],
    by_module: &BTreeMap<&[String], usize>,
) -> Option<Vec<String>> {
    Some(match path[0].as_str() {
        "crate" => path[1..].to_vec(),
        "self" => here.iter().chain(&path[1..]).cloned().collect(),
        "super" => {
            // A `foo.rs` or `foo/mod.rs` file is module `foo`; its `super` is foo's parent.
            let ups = path.iter().take_while(|s| *s == "super").count();
            if ups > here.len() {
                return None;
            }
            here[..here.len() - ups]
                .iter()
                .chain(&path[ups..])
                .cloned()
                .collect()
        }
        first => {
            let child: Vec<String> = here.iter().cloned().chain([first.to_string()]).collect();
            if !by_module.contains_key(child.as_slice()) {
                return None; // another crate, std, or an item of this module
            }
            here.iter().chain(path).cloned().collect()
        }
    })
}

/// The leaves of a file's `pub use` (and `pub(crate) use`, …) trees.
fn reexported_paths(tokens: &[String]) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        let public = i > 0
            && (tokens[i - 1] == "pub"
                || (tokens[i - 1] == ")"
                    && tokens[..i].iter().rev().nth(3).is_some_and(|t| t == "pub")));
        if t == "use" && public {
            let end = tokens[i..]
                .iter()
                .position(|t| t == ";")
                .map_or(tokens.len(), |p| i + p);
            use_tree(&tokens[i + 1..end], &[], &mut paths);
        }
    }
    paths
}

/// The circles of one crate: groups of two or more files that reach each other, each
/// with the arrows between its files.
fn circles(src: &Path) -> Vec<Vec<(String, String)>> {
    let mut files = crate_files(src);
    // Test-only modules (declared `#[cfg(test)] mod x;`) are left out with their files.
    let mut texts = Vec::new();
    let mut test_only: BTreeSet<Vec<String>> = BTreeSet::new();
    for file in &files {
        let (kept, test_modules) =
            without_test_items(&tokens(&fs::read_to_string(&file.path).unwrap()));
        for name in test_modules {
            test_only.insert(file.module.iter().cloned().chain([name]).collect());
        }
        texts.push(kept);
    }
    let keep: Vec<bool> = files
        .iter()
        .map(|f| !test_only.iter().any(|t| f.module.starts_with(t)))
        .collect();
    let mut k = 0;
    files.retain(|_| (keep[k], k += 1).0);
    let mut k = 0;
    texts.retain(|_| (keep[k], k += 1).0);
    let by_module: BTreeMap<&[String], usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.module.as_slice(), i))
        .collect();
    // What each file re-exports (`pub use a::b::Name;`): Name → the absolute path, so a
    // path through a re-export (`crate::boot_info`, re-exported from `entry`) is an
    // arrow to the file that defines it, not to the module that re-exports it.
    let reexports: Vec<BTreeMap<String, Vec<String>>> = files
        .iter()
        .enumerate()
        .map(|(i, file)| {
            reexported_paths(&texts[i])
                .into_iter()
                .filter_map(|p| {
                    let name = p.last()?.clone();
                    Some((name, absolute(&file.module, &p, &by_module)?))
                })
                .collect()
        })
        .collect();
    let mut arrows: BTreeSet<(usize, usize)> = BTreeSet::new();
    for (from, file) in files.iter().enumerate() {
        let here = &file.module;
        for path in named_paths(&texts[from]) {
            let Some(mut target_path) = absolute(here, &path, &by_module) else {
                continue;
            };
            let mut to = None;
            for _ in 0..8 {
                let Some((n, file)) = (0..=target_path.len())
                    .rev()
                    .find_map(|n| Some((n, *by_module.get(&target_path[..n])?)))
                else {
                    break;
                };
                to = Some(file);
                match target_path
                    .get(n)
                    .and_then(|name| reexports[file].get(name))
                {
                    Some(origin) if origin.as_slice() != &target_path[..=n] => {
                        target_path = origin
                            .iter()
                            .chain(&target_path[n + 1..])
                            .cloned()
                            .collect();
                    }
                    _ => break,
                }
            }
            let Some(to) = to else { continue };
            let target = &files[to].module;
            if to != from && !here.starts_with(target) {
                arrows.insert((from, to));
            }
        }
    }
    // Reachability by depth-first search from every file; a circle is a set of files
    // that all reach each other.
    let n = files.len();
    let reach: Vec<BTreeSet<usize>> = (0..n)
        .map(|start| {
            let mut seen = BTreeSet::new();
            let mut stack = vec![start];
            while let Some(f) = stack.pop() {
                for &(a, b) in arrows.range((f, 0)..(f + 1, 0)) {
                    debug_assert_eq!(a, f);
                    if seen.insert(b) {
                        stack.push(b);
                    }
                }
            }
            seen
        })
        .collect();
    let mut placed = BTreeSet::new();
    let mut out = Vec::new();
    for a in 0..n {
        if placed.contains(&a) || !reach[a].contains(&a) {
            continue;
        }
        let group: BTreeSet<usize> = (0..n)
            .filter(|&b| reach[a].contains(&b) && reach[b].contains(&a))
            .collect();
        placed.extend(group.iter().copied());
        let name = |i: usize| files[i].path.display().to_string();
        out.push(
            arrows
                .iter()
                .filter(|(x, y)| group.contains(x) && group.contains(y))
                .map(|&(x, y)| (name(x), name(y)))
                .collect(),
        );
    }
    out
}

/// The source folders of the workspace's crates, relative to the repository.
fn workspace_sources(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for group in ["crates", "apps"] {
        let mut dirs: Vec<PathBuf> = fs::read_dir(root.join(group))
            .unwrap()
            .flatten()
            .map(|e| e.path().join("src"))
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        out.extend(dirs);
    }
    out.extend(
        [root.join("bench/src"), root.join("bench/net/src")]
            .into_iter()
            .filter(|p| p.is_dir()),
    );
    out
}

#[test]
fn no_crate_has_an_import_circle() {
    let root = crate::repository_root();
    let mut found = Vec::new();
    for src in workspace_sources(&root) {
        for circle in circles(&src) {
            let arrows: Vec<String> = circle.iter().map(|(a, b)| format!("{a} -> {b}")).collect();
            found.push(arrows.join("\n    "));
        }
    }
    assert!(
        found.is_empty(),
        "{} import circles:\n  {}",
        found.len(),
        found.join("\n  ")
    );
}

/// The crates a folder's files name (`ebb_net::…`, `use ebb_core::…`): every word that
/// starts a path and names one of the workspace's crates.
fn crates_named(dir: &Path) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let toks = tokens(&fs::read_to_string(&path).unwrap());
                for (k, t) in toks.iter().enumerate() {
                    let starts_path = toks.get(k + 1).is_some_and(|n| n == "::")
                        && !(k > 0 && toks[k - 1] == "::");
                    if starts_path && t.starts_with("ebb") {
                        named.insert(t.clone());
                    }
                }
            }
        }
    }
    named
}

#[test]
fn the_guests_virtio_driver_names_only_the_driver_crate_the_abi_and_ebb_core() {
    let root = crate::repository_root();
    let named = crates_named(&root.join("crates/ebb-native/src/virtio"));
    let extra: Vec<&String> = named
        .iter()
        .filter(|c| !["ebb_core", "ebb_abi", "ebb_net_driver"].contains(&c.as_str()))
        .collect();
    assert!(
        extra.is_empty(),
        "crates/ebb-native/src/virtio names {extra:?}"
    );
}
