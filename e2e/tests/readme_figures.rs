//! README's headline figures are BENCHMARKS.md's: the idle and peak resident memory, the Windows binary's size and
//! the time to serve CSI, each read from the BENCHMARKS.md table row that names it (wherever it is: sections may be
//! added, rewritten or moved), and found in README's sentence with the same number.

use std::path::PathBuf;

fn read(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The second cell of the first table row of `text` whose first cell starts with `label`.
fn figure<'a>(text: &'a str, label: &str) -> &'a str {
    text.lines()
        .filter_map(|l| l.strip_prefix("| "))
        .find(|l| l.starts_with(label))
        .and_then(|l| l.split(" | ").nth(1))
        .map(|cell| cell.trim().trim_end_matches('|').trim())
        .unwrap_or_else(|| panic!("BENCHMARKS.md has no table row named {label:?}"))
}

/// The leading number and unit of a cell: "29.0 MiB (sampled …)" → "29.0 MiB"; "p50 2.27 ms, max …" → "2.27 ms".
fn number(cell: &str) -> String {
    let words: Vec<&str> = cell.trim_start_matches("p50 ").split_whitespace().collect();
    assert!(
        words.len() >= 2 && words[0].parse::<f64>().is_ok(),
        "not a figure: {cell:?}"
    );
    format!("{} {}", words[0], words[1].trim_end_matches(','))
}

#[test]
fn readme_headline_figures_are_benchmarks_figures() {
    let bench = read("BENCHMARKS.md");
    let readme = read("README.md");
    // One paragraph of README (its lines joined), so a re-wrapped sentence still matches.
    let readme = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    for (label, context) in [
        ("RSS idle", "{} resident when idle"),
        (
            "RSS peak during the largest N",
            "{} with 256 volumes staged at once",
        ),
        (
            "Release binary, `x86_64-pc-windows-gnu`",
            "a {} Windows binary",
        ),
        ("Start to serving CSI", "serving CSI {} after start (p50)"),
    ] {
        let value = number(figure(&bench, label));
        let want = context.replace("{}", &value);
        assert!(
            readme.contains(&want),
            "README.md must say {want:?} (BENCHMARKS.md: {label} = {value})"
        );
    }
    // The N of the peak figure is the one README names.
    assert!(
        bench.contains("N = 256"),
        "BENCHMARKS.md's largest N is no longer 256"
    );
}

#[test]
fn the_figure_reader_is_not_vacuous() {
    let t = "| Figure | Value |\n| --- | --- |\n| RSS idle (VmRSS) | 6.4 MiB |\n| Start to serving CSI (n = 10) | p50 2.27 ms, max 3.28 ms |\n";
    assert_eq!(number(figure(t, "RSS idle")), "6.4 MiB");
    assert_eq!(number(figure(t, "Start to serving CSI")), "2.27 ms");
    assert!(std::panic::catch_unwind(|| figure(t, "RSS peak")).is_err());
}
