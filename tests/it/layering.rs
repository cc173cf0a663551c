//! Each crate's source tree has no module circles (issue 17): among the
//! modules of one parent, no file reaches a sibling that reaches back, directly or
//! around a longer loop. A module's subtree counts as the module (a file
//! under `cloud/` reaching `alloc` is `cloud` reaching `alloc`); a parent
//! and its own children may use each other (that is what `mod.rs` is for).
//!
//! References are read from the text: `crate::`, `super::` and `self::`
//! paths and the names inside a `use ...::{...}` list, outside comments
//! and test modules. A new circle fails here with the loop it makes.
//!
//! Which crate may use which is what their Cargo.toml files say
//! ([`the_crates_depend_as_the_architecture_says`]): the daemon never
//! depends on the emulator, the shared crates on no program's.
//!
//! And one meaning per file name: a name two source files share is in
//! [`SHARED_NAMES`], with what it means in each place.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `src/...rs` by module path (`alloc::actor`), binaries left out.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.first().is_some_and(|f| f == "bin") {
                continue;
            }
            if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
                parts.pop();
            }
            out.insert(parts.join("::"), p);
        }
    }
    out
}

/// The file's code: comments dropped, and the inline test module (at the
/// end of a file, after `#[cfg(test)]`) left out.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let test_module = line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|n| n.starts_with("mod ") && n.trim_end().ends_with('{'));
        if test_module {
            break;
        }
        out.push_str(line.split("//").next().unwrap_or(""));
        out.push('\n');
    }
    out
}

/// The longest module `path` names, seen from module `at`.
fn resolve(mods: &BTreeMap<String, PathBuf>, at: &str, path: &[&str]) -> Option<String> {
    let mut base: Vec<&str> = if at.is_empty() {
        Vec::new()
    } else {
        at.split("::").collect()
    };
    let mut rest = path;
    match rest.first() {
        Some(&"crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some(&"self") => rest = &rest[1..],
        Some(&"super") => {
            while rest.first() == Some(&"super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    let full: Vec<&str> = base.iter().chain(rest).copied().collect();
    (1..=full.len())
        .rev()
        .map(|n| full[..n].join("::"))
        .find(|m| mods.contains_key(m))
}

/// The modules each module's code reaches.
fn references(mods: &BTreeMap<String, PathBuf>) -> BTreeMap<String, BTreeSet<String>> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = BTreeMap::new();
    for (m, p) in mods {
        let text = code(&std::fs::read_to_string(p).unwrap());
        let mut to = BTreeSet::new();
        let mut add = |path: Vec<&str>| {
            if let Some(t) = resolve(mods, m, &path).filter(|t| t != m) {
                to.insert(t);
            }
        };
        // Every `crate::`/`super::`/`self::` path.
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        for (k, &(i, _)) in chars.iter().enumerate() {
            let starts = ["crate::", "super::", "self::"]
                .iter()
                .any(|s| text[i..].starts_with(s));
            let at_word_start = k == 0 || !is_word(chars[k - 1].1);
            if !starts || !at_word_start {
                continue;
            }
            let end = text[i..]
                .find(|c: char| !(is_word(c) || c == ':'))
                .map_or(text.len(), |e| i + e);
            let path: Vec<&str> = text[i..end].split("::").filter(|s| !s.is_empty()).collect();
            add(path.clone());
            // `use super::x::{a, b::c}`: each name in the list too.
            if text[end..].starts_with('{') {
                let close = text[end..].find('}').map_or(text.len(), |c| end + c);
                for item in text[end + 1..close].split(',') {
                    let mut p = path.clone();
                    p.extend(item.trim().split("::").map(str::trim));
                    add(p);
                }
            }
        }
        out.insert(m.clone(), to);
    }
    out
}

/// The child of `parent` that `m` is, or is under.
fn child_of(parent: &str, m: &str) -> Option<String> {
    let rest = if parent.is_empty() {
        m
    } else {
        m.strip_prefix(parent)?.strip_prefix("::")?
    };
    let first = rest.split("::").next().filter(|s| !s.is_empty())?;
    Some(if parent.is_empty() {
        first.to_string()
    } else {
        format!("{parent}::{first}")
    })
}

/// A loop through `graph` back to `start`, if there is one.
fn loop_from(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    let mut stack = vec![vec![start.to_string()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap();
        for next in graph.get(last).into_iter().flatten() {
            if next == start {
                let mut l = path.clone();
                l.push(start.to_string());
                return Some(l);
            }
            if seen.insert(next.clone()) {
                let mut p = path.clone();
                p.push(next.clone());
                stack.push(p);
            }
        }
    }
    None
}

/// The workspace's crates: their folders under `crates/`.
fn crate_dirs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    dirs.sort();
    dirs
}

/// The module circles inside one crate's `src`.
fn circles_in(src: &Path) -> (usize, Vec<String>) {
    let mods = modules(src);
    let refs = references(&mods);
    let parents: BTreeSet<String> = mods
        .keys()
        .map(|m| {
            m.rsplit_once("::")
                .map_or(String::new(), |(p, _)| p.to_string())
        })
        .collect();
    let mut circles = Vec::new();
    for parent in &parents {
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, targets) in &refs {
            let Some(ca) = child_of(parent, a) else {
                continue;
            };
            for b in targets {
                if let Some(cb) = child_of(parent, b).filter(|cb| *cb != ca) {
                    graph.entry(ca.clone()).or_default().insert(cb);
                }
            }
        }
        for start in graph.keys() {
            if let Some(l) = loop_from(&graph, start) {
                // One report per loop, from its smallest member.
                if l.iter().all(|m| m >= start) {
                    circles.push(format!("{}: {}", src.display(), l.join(" -> ")));
                }
            }
        }
    }
    (mods.len(), circles)
}

#[test]
fn no_module_reaches_a_sibling_that_reaches_back() {
    let mut read = 0;
    let mut circles = Vec::new();
    for dir in crate_dirs() {
        let (n, c) = circles_in(&dir.join("src"));
        read += n;
        circles.extend(c);
    }
    assert!(read > 50, "read only {read} modules");
    assert!(
        circles.is_empty(),
        "module circles:\n{}",
        circles.join("\n")
    );
}

/// The workspace crates a crate's Cargo.toml names, in any dependency
/// table (normal, dev, build).
fn workspace_deps(manifest: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    text.lines()
        .filter_map(|l| {
            let name = l.split(['.', ' ', '=']).next()?.trim();
            (name.starts_with("eniip-") || name.starts_with("eniipd-")).then(|| name.to_string())
        })
        .collect()
}

/// Which crate may use which: the architecture, as Cargo.toml must say it.
/// A crate missing from a list may not be used by that crate, directly or
/// through another.
const MAY_USE: [(&str, &[&str]); 8] = [
    ("eniip-util", &[]),
    ("eniip-httpd", &["eniip-util"]),
    ("eniip-protocol", &["eniip-util"]),
    ("eniip-datapath", &["eniip-util"]),
    ("eniip-cloud", &["eniip-util", "eniip-protocol"]),
    (
        "eniip-cni",
        &["eniip-util", "eniip-protocol", "eniip-datapath"],
    ),
    (
        "eniip-sim",
        &[
            "eniip-util",
            "eniip-httpd",
            "eniip-protocol",
            "eniip-datapath",
            "eniip-cloud",
        ],
    ),
    (
        "eniipd-daemon",
        &[
            "eniip-util",
            "eniip-httpd",
            "eniip-protocol",
            "eniip-datapath",
            "eniip-cloud",
        ],
    ),
];

#[test]
fn the_crates_depend_as_the_architecture_says() {
    let deps: BTreeMap<String, BTreeSet<String>> = crate_dirs()
        .iter()
        .map(|d| {
            let name = d.file_name().unwrap().to_string_lossy().into_owned();
            (name, workspace_deps(&d.join("Cargo.toml")))
        })
        .collect();
    let listed: BTreeSet<String> = MAY_USE.iter().map(|(c, _)| c.to_string()).collect();
    let present: BTreeSet<String> = deps.keys().cloned().collect();
    assert_eq!(listed, present, "MAY_USE lists the crates under crates/");
    let mut wrong = Vec::new();
    for (krate, allowed) in MAY_USE {
        // Everything it reaches, through any path of dependencies.
        let mut reach = BTreeSet::new();
        let mut todo: Vec<&String> = deps[krate].iter().collect();
        while let Some(d) = todo.pop() {
            if reach.insert(d.clone()) {
                todo.extend(deps.get(d).into_iter().flatten());
            }
        }
        for r in reach.iter().filter(|r| !allowed.contains(&r.as_str())) {
            wrong.push(format!("{krate} reaches {r}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "crates used against the architecture:\n{}",
        wrong.join("\n")
    );
    // The checker reads the tables it must: the daemon's names the cloud.
    assert!(deps["eniipd-daemon"].contains("eniip-cloud"));
}

#[test]
fn the_checker_sees_a_circle() {
    let mods: BTreeMap<String, PathBuf> = ["a", "a::x", "a::y", "b"]
        .iter()
        .map(|m| (m.to_string(), PathBuf::new()))
        .collect();
    assert_eq!(
        resolve(&mods, "a::x", &["super", "y", "Thing"]),
        Some("a::y".into())
    );
    assert_eq!(resolve(&mods, "a::x", &["crate", "b"]), Some("b".into()));
    assert_eq!(resolve(&mods, "a::x", &["std", "fmt"]), None);
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a::x".to_string(), BTreeSet::from(["a::y".to_string()])),
        ("a::y".to_string(), BTreeSet::from(["a::x".to_string()])),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        loop_from(&graph, "a::x"),
        Some(vec!["a::x".into(), "a::y".into(), "a::x".into()])
    );
    assert_eq!(child_of("a", "a::x::z"), Some("a::x".into()));
    assert_eq!(child_of("", "a::x"), Some("a".into()));
    assert_eq!(child_of("a", "b"), None);
}

/// File names shared by more than one source file, each with what it
/// means in every place it stands: the same thing in parallel places.
const SHARED_NAMES: [(&str, &str); 7] = [
    ("mod.rs", "a folder's module: what it owns, its parts"),
    ("lib.rs", "a crate's root: its job, its parts"),
    ("tests.rs", "the unit tests of the folder's module"),
    (
        "error.rs",
        "the folder's error type (CloudError, DaemonError)",
    ),
    (
        "views.rs",
        "read-only views of the folder's state (the pool's, the actor's)",
    ),
    (
        "metadata.rs",
        "the instance metadata service: its client (cloud) and its emulation (sim)",
    ),
    (
        "sg_sets.rs",
        "security-group sets per pod: the groups pods may ask (config), each ENI's set (pool), \
         the choices by set (alloc) and their tests (alloc/tests)",
    ),
];

/// Every `.rs` file under `root`'s `dir`, by file name (paths from `root`).
fn rust_files(root: &Path, dir: &Path, out: &mut BTreeMap<String, BTreeSet<String>>) {
    for e in std::fs::read_dir(root.join(dir)).unwrap() {
        let p = dir.join(e.unwrap().file_name());
        if root.join(&p).is_dir() {
            rust_files(root, &p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            out.entry(name).or_default().insert(p.display().to_string());
        }
    }
}

/// One meaning per file name (STYLE.md): a search for a file finds the
/// one thing it names, or the same thing in parallel places.
#[test]
fn a_file_name_means_one_thing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = BTreeMap::new();
    for dir in ["src", "tests", "benches", "crates"] {
        rust_files(root, Path::new(dir), &mut files);
    }
    let shared: Vec<String> = files
        .iter()
        .filter(|(name, paths)| paths.len() > 1 && !SHARED_NAMES.iter().any(|(n, _)| n == name))
        .map(|(name, paths)| {
            let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
            format!("{name}: {}", paths.join(", "))
        })
        .collect();
    assert!(
        shared.is_empty(),
        "file names that stand for more than one thing (rename one, or add \
         the name to SHARED_NAMES with what it means in every place):\n{}",
        shared.join("\n")
    );
    // Every name listed is still shared: the list says what the tree is.
    for (name, _) in SHARED_NAMES {
        assert!(
            files.get(name).is_some_and(|p| p.len() > 1),
            "{name} is in SHARED_NAMES but no longer shared"
        );
    }
}
