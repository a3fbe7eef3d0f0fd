//! The driver's shape, checked (see ARCHITECTURE.md, "Layers"): every top-level module of `driver/src` depends only
//! on modules of lower layers (so there is no import circle), nothing but the host port and the composition root
//! names a host backend or csi-proxy's client, and no source file outside tests grows past [`MAX_LINES`].
//!
//! Dependencies are read from the source: every `crate::<module>` path in code (comments, strings and test modules
//! are left out). A module this test does not know fails it: place it in [`LAYERS`] and in ARCHITECTURE.md.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a non-test source file may be.
const MAX_LINES: usize = 800;

/// The layers, bottom first. A module may depend on modules of lower layers only; modules of one layer are peers
/// that know nothing of each other.
const LAYERS: &[&[&str]] = &[
    &["error"],
    &["locks", "config"],
    &["metrics"],
    &["logging", "listener", "host", "state"],
    &["lifecycle"],
    &["smb", "iscsi", "ephemeral"],
    &["backend"],
    &["rpc", "check"],
    &["identity", "node", "observability"],
    &["server"],
];

/// The only modules that may name a host backend (`csi_proxy`, `native`) or csi-proxy's client crate.
const BACKEND_AWARE: &[&str] = &["host", "backend"];

// ---- reading the source ----

/// `text` with comments, string and character literals blanked out (newlines kept, so line counts hold).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let keep_newlines = |s: &[u8], out: &mut String| {
        for &c in s {
            out.push(if c == b'\n' { '\n' } else { ' ' });
        }
    };
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            keep_newlines(&rest[..end], &mut out);
            i += end;
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            let mut j = 0;
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            keep_newlines(&rest[..j], &mut out);
            i += j;
        } else if rest[0] == b'r'
            && (rest.get(1) == Some(&b'"') || rest.get(1) == Some(&b'#'))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            // Raw string r"…", r#"…"#.
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let body = 2 + hashes;
            let end = rest[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(rest.len(), |p| body + p + close.len());
            keep_newlines(&rest[..end], &mut out);
            i += end;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(rest.len());
            keep_newlines(&rest[..end], &mut out);
            i += end;
        } else if rest[0] == b'\'' {
            // A character literal ('x', '\n', '\u{1f600}') — or a lifetime, which is kept.
            let lit = if rest.get(1) == Some(&b'\\') {
                rest[2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (rest.get(1 + ch) == Some(&b'\'')).then_some(2 + ch)
            };
            match lit {
                Some(n) => {
                    keep_newlines(&rest[..n], &mut out);
                    i += n;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let ch = text[i..].chars().next().expect("a char");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The part of a source file that is not test code: nothing of a `tests.rs`/`testing.rs`, and a file's trailing
/// `#[cfg(test)] mod tests { … }` cut off.
fn non_test(path: &Path, text: &str) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    if name == "tests.rs" || name == "testing.rs" {
        return None;
    }
    let lines: Vec<&str> = text.lines().collect();
    let cut = lines
        .windows(2)
        .position(|w| w[0].trim() == "#[cfg(test)]" && w[1].trim_start().starts_with("mod tests {"))
        .unwrap_or(lines.len());
    Some(lines[..cut].join("\n"))
}

/// The top-level modules a piece of code names through `crate::` (including `crate::{a::X, b}` groups).
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices("crate::") {
        if at > 0 {
            let before = code[..at].chars().next_back().unwrap_or(' ');
            if before.is_ascii_alphanumeric() || matches!(before, '_' | ':' | '$') {
                continue; // `$crate::`, `other_crate::`, `x::crate::`
            }
        }
        let rest = code[at + "crate::".len()..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item = String::new();
            let mut items = Vec::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => items.push(std::mem::take(&mut item)),
                    _ if depth == 1 => item.push(c),
                    _ => {}
                }
            }
            items.push(item);
            out.extend(items.iter().map(|i| ident(i.trim())));
        } else {
            out.insert(ident(rest));
        }
    }
    // Items re-exported at the crate root (`crate::Error`) and `crate::self` are not modules.
    out.retain(|m| m.chars().next().is_some_and(|c| c.is_ascii_lowercase()) && m != "self");
    out
}

/// Whether code names a host backend or the csi-proxy client crate.
fn names_backend(code: &str) -> Option<&'static str> {
    [
        "csi_proxy::",
        "::csi_proxy",
        "native::",
        "::native",
        "proxy_client::",
    ]
    .into_iter()
    .find(|needle| {
        code.match_indices(needle).any(|(at, _)| {
            let before = code[..at].chars().next_back().unwrap_or(' ');
            needle.starts_with(':') || !(before.is_ascii_alphanumeric() || before == '_')
        })
    })
}

/// One source file: its top-level module and its non-test code.
struct Source {
    path: PathBuf,
    module: String,
    code: String,
}

fn sources(src: &Path) -> Vec<Source> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|path| {
            let rel = path.strip_prefix(src).expect("under src");
            let first = rel.components().next()?.as_os_str().to_str()?.to_owned();
            let module = first.strip_suffix(".rs").unwrap_or(&first).to_owned();
            let text = std::fs::read_to_string(&path).expect("read");
            let code = code_only(&non_test(&path, &text)?);
            Some(Source { path, module, code })
        })
        .collect()
}

// ---- the checks ----

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Edges between top-level modules (`lib` and `main` are the crate's roots, not modules).
fn graph(sources: &[Source]) -> Graph {
    let mut g = Graph::new();
    for s in sources
        .iter()
        .filter(|s| s.module != "lib" && s.module != "main")
    {
        let deps = g.entry(s.module.clone()).or_default();
        deps.extend(crate_refs(&s.code).into_iter().filter(|m| *m != s.module));
    }
    g
}

/// A cycle in `g`, as a path that starts and ends at the same module.
fn find_cycle(g: &Graph) -> Option<Vec<String>> {
    fn visit(
        g: &Graph,
        m: &str,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|s| s == m) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(m.to_owned());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        stack.push(m.to_owned());
        for dep in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(g, dep, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(m.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|m| visit(g, m, &mut Vec::new(), &mut done))
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// Every dependency that does not point to a lower layer, and every module the layer table lacks.
fn layering_violations(g: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    for (m, deps) in g {
        let Some(lm) = layer_of(m) else {
            out.push(format!(
                "module `{m}` is in no layer: add it to LAYERS and to ARCHITECTURE.md"
            ));
            continue;
        };
        for d in deps {
            match layer_of(d) {
                None => out.push(format!("`{m}` names `{d}`, which is in no layer")),
                Some(ld) if ld >= lm => out.push(format!(
                    "`{m}` (layer {lm}) depends on `{d}` (layer {ld}): dependencies point to lower layers only"
                )),
                Some(_) => {}
            }
        }
    }
    out
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn top_level_modules_form_no_cycle() {
    let g = graph(&sources(&src_dir()));
    assert!(
        g.contains_key("lifecycle") && g.contains_key("host"),
        "{g:?}"
    );
    if let Some(cycle) = find_cycle(&g) {
        panic!(
            "import circle between top-level modules: {}",
            cycle.join(" -> ")
        );
    }
}

#[test]
fn modules_depend_on_lower_layers_only() {
    let g = graph(&sources(&src_dir()));
    let bad = layering_violations(&g);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn only_the_host_port_and_the_composition_root_name_a_backend() {
    let bad: Vec<String> = sources(&src_dir())
        .iter()
        .filter(|s| !BACKEND_AWARE.contains(&s.module.as_str()) && s.module != "lib")
        .filter_map(|s| names_backend(&s.code).map(|n| format!("{} names `{n}`", s.path.display())))
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn no_source_file_outside_tests_exceeds_the_limit() {
    let long: Vec<String> = sources(&src_dir())
        .iter()
        .map(|s| (s, s.code.lines().count()))
        .filter(|(_, n)| *n > MAX_LINES)
        .map(|(s, n)| format!("{}: {n} lines (limit {MAX_LINES})", s.path.display()))
        .collect();
    assert!(long.is_empty(), "split these files: {}", long.join("; "));
}

// ---- the checker checks itself, so a broken parser cannot pass everything ----

#[test]
fn references_are_read_from_code_only() {
    let text = r#####"
        use crate::host::{Host, HostPath};
        use crate::{error::Error, locks as l, state};
        // crate::commented
        /* crate::blocked /* nested crate::deeper */ */
        let s = "crate::quoted // not a comment";
        let r = r#"crate::raw"#;
        let c = '"'; let t = crate::lifecycle::X; let _: &'static str = "";
        $crate::macro_only; other_crate::x;
        fn f<'a>(x: &'a crate::paths::P) {}
    "#####;
    let refs = crate_refs(&code_only(text));
    let want: BTreeSet<String> = ["host", "error", "locks", "state", "lifecycle", "paths"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(refs, want);
    assert!(names_backend(&code_only("use crate::host::csi_proxy::X;")).is_some());
    assert!(names_backend(&code_only("use crate::host::native;")).is_some());
    assert_eq!(
        names_backend(&code_only("// host::native::Y\nlet native_x = 1;")),
        None
    );
    assert_eq!(
        names_backend(&code_only("proxy_client::Transport::default()")),
        Some("proxy_client::")
    );
}

#[test]
fn cycles_layers_and_test_code_are_detected() {
    let g: Graph = [
        ("a", &["b"][..]),
        ("b", &["c"][..]),
        ("c", &["a"][..]),
        ("d", &[][..]),
    ]
    .into_iter()
    .map(|(m, d)| (m.to_owned(), d.iter().map(|s| (*s).to_owned()).collect()))
    .collect();
    assert_eq!(
        find_cycle(&g).expect("a cycle"),
        ["a", "b", "c", "a"].map(String::from)
    );
    let acyclic: Graph = [("host".to_owned(), BTreeSet::from(["lifecycle".to_owned()]))].into();
    assert!(find_cycle(&acyclic).is_none());
    assert_eq!(
        layering_violations(&acyclic).len(),
        1,
        "host may not depend on lifecycle"
    );
    let unknown: Graph = [("brand_new".to_owned(), BTreeSet::new())].into();
    assert_eq!(layering_violations(&unknown).len(), 1);
    let text = "use crate::host::X;\n#[cfg(test)]\nmod tests;\nfn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::smb::Y;\n}\n";
    let kept = non_test(Path::new("x.rs"), text).expect("not a test file");
    assert!(kept.contains("fn f()") && !kept.contains("smb"), "{kept}");
    assert!(non_test(Path::new("tests.rs"), text).is_none());
}
