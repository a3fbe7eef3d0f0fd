//! README's headline figures are BENCHMARKS.md's: the idle and peak resident memory, the Windows binary's size and
//! the time to serve CSI, each read from the BENCHMARKS.md table row that names it (wherever it is: sections may be
//! added, rewritten or moved), and found in README's sentence with the same number; and a new LUN's first stage per
//! backend and release, read from the "What a user waits for" table by row and column.

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

/// The cell in column `heading` of the row whose first cell is `label`, in the table whose header row's first cell is
/// `first` (the tables of BENCHMARKS.md's "What a user waits for").
fn cell<'a>(text: &'a str, first: &str, label: &str, heading: &str) -> &'a str {
    let mut lines = text
        .lines()
        .skip_while(|l| !l.starts_with(&format!("| {first} |")));
    let header = lines
        .next()
        .unwrap_or_else(|| panic!("no table headed {first:?}"));
    let cells = |l: &'a str| -> Vec<&'a str> {
        l.trim()
            .trim_matches('|')
            .split(" | ")
            .map(str::trim)
            .collect()
    };
    let column = cells(header)
        .iter()
        .position(|h| *h == heading)
        .unwrap_or_else(|| panic!("table {first:?} has no column {heading:?}"));
    lines
        .take_while(|l| l.starts_with("| "))
        .map(cells)
        .find(|c| c[0] == label)
        .and_then(|c| c.get(column).copied())
        .unwrap_or_else(|| panic!("table {first:?} has no row {label:?}"))
}

/// A user_waits cell's parts: the wall time (bold), the calls and the processes: "**1.0 s**, 19 calls, 21 processes"
/// → ("1.0 s", "19", "21").
fn waits(cell: &str) -> (String, String, String) {
    let wall = cell
        .split("**")
        .nth(1)
        .unwrap_or_else(|| panic!("no wall time in {cell:?}"));
    let before = |unit: &str| -> String {
        let words: Vec<&str> = cell.split_whitespace().collect();
        words
            .windows(2)
            .find(|w| w[1].trim_end_matches(',').starts_with(unit))
            .map(|w| w[0].to_owned())
            .unwrap_or_else(|| panic!("no {unit} in {cell:?}"))
    };
    (wall.to_owned(), before("calls"), before("process"))
}

#[test]
fn readme_first_stage_figures_are_the_user_waits_tables() {
    let bench = read("BENCHMARKS.md");
    let readme = read("README.md");
    let readme = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    const TABLE: &str = "Operation (kubelet's view)";
    const RAW: &str = "iSCSI first stage, new (RAW) LUN";
    let at = |label: &str, column: &str| waits(cell(&bench, TABLE, label, column));
    let (wall, calls, _) = at(RAW, "native");
    let (wall_ps, calls_ps, processes_ps) = at(RAW, "csi-proxy v1.1.3");
    let (wall_wmi, calls_wmi, _) = at(RAW, "csi-proxy v1.3.0");
    let (wall_data, _, _) = at("iSCSI first stage, LUN with data (NTFS)", "native");
    let (_, calls_smb, _) = at("SMB first stage", "csi-proxy v1.1.3");
    for want in [
        // The headline.
        format!("{wall} and {calls} host calls on the native backend"),
        format!("{wall_ps} and {calls_ps} calls on csi-proxy v1.1.3"),
        format!("{wall_wmi} and {calls_wmi} calls on csi-proxy v1.3.0"),
        format!("a LUN with data {wall_data}"),
        format!("an SMB share's first stage {calls_smb} calls"),
        // The csi-proxy releases table.
        format!("{wall_ps}, {calls_ps} calls, {processes_ps} PowerShell processes"),
        format!("{wall_wmi}, {calls_wmi} calls"),
        format!("the partition table, {wall})"),
    ] {
        assert!(
            readme.contains(&want),
            "README.md must say {want:?} (BENCHMARKS.md, \"What a user waits for\")"
        );
    }
}

#[test]
fn the_figure_reader_is_not_vacuous() {
    let t = "| Figure | Value |\n| --- | --- |\n| RSS idle (VmRSS) | 6.4 MiB |\n| Start to serving CSI (n = 10) | p50 2.27 ms, max 3.28 ms |\n";
    assert_eq!(number(figure(t, "RSS idle")), "6.4 MiB");
    assert_eq!(number(figure(t, "Start to serving CSI")), "2.27 ms");
    assert!(std::panic::catch_unwind(|| figure(t, "RSS peak")).is_err());
    let w = "| Operation (kubelet's view) | a | native |\n| --- | --- | --- |\n| x | **2.0 s**, 5 calls, 1 process | \
             **1.0 s**, 17 calls (47 WMI/Win32), 0 processes |\n\nafter\n";
    assert_eq!(
        waits(cell(w, "Operation (kubelet's view)", "x", "native")),
        ("1.0 s".to_owned(), "17".to_owned(), "0".to_owned())
    );
    assert_eq!(
        waits(cell(w, "Operation (kubelet's view)", "x", "a")),
        ("2.0 s".to_owned(), "5".to_owned(), "1".to_owned())
    );
    assert!(std::panic::catch_unwind(|| cell(w, "Operation (kubelet's view)", "y", "a")).is_err());
}
