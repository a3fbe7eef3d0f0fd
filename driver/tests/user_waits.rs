//! What a user waits for (issue 39): BENCHMARKS.md's tables are what `driver/examples/user_waits` measures now, and
//! the goals of items 2 and 3 hold on the measurement — the simulated host at its default arrival, the driver's
//! default flags, kubelet's retries, per csi-proxy release and on the native backend. The measurement runs on a paused
//! clock (deterministic, a few seconds); its code is the example's, shared here.

use std::sync::OnceLock;
use std::time::Duration;

// The example uses every item; this test reads the measurement and the rendering only.
#[allow(dead_code)]
#[path = "../examples/user_waits/measure.rs"]
mod measure;
#[allow(dead_code)]
#[path = "../examples/user_waits/report.rs"]
mod report;
#[path = "../examples/common/requests.rs"]
mod requests;

use measure::{Column, Measured, Row};

fn measured() -> &'static Measured {
    static MEASURED: OnceLock<Measured> = OnceLock::new();
    MEASURED.get_or_init(measure::measure_all)
}

fn cell(column: Column, row: Row) -> &'static measure::Cell {
    &measured().table[&(column, row)]
}

/// The releases whose host proves a disk without partitions empty (`ListVolumesOnDisk` fails naming
/// `Get-Partition`'s not-found), and those that cannot (`[]` whatever the disk holds).
const PROVING: [Column; 3] = [
    Column::CsiProxy("v1.1.3"),
    Column::CsiProxy("v1.2.1"),
    Column::Native,
];
const SETTLING: [Column; 2] = [Column::CsiProxy("v1.3.0"), Column::CsiProxy("master")];

#[test]
fn benchmarks_md_holds_what_user_waits_measures() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../BENCHMARKS.md");
    let text = std::fs::read_to_string(&path).expect("BENCHMARKS.md");
    let want = report::render(measured());
    assert_eq!(
        report::section(&text),
        Some(want.as_str()),
        "BENCHMARKS.md's user_waits tables are out of date: cargo run -p wincsi-driver --example user_waits -- \
         --markdown BENCHMARKS.md"
    );
}

/// Item 2: a new (RAW) LUN's first stage takes at most 3 s wherever the host proves the disk empty; where it cannot,
/// the settle time is waited out, and nothing else.
#[test]
fn a_new_lun_is_ready_in_seconds_where_the_host_proves_it_empty() {
    let settle = wincsi::iscsi::IscsiSettings::default().settle;
    for column in PROVING {
        let c = cell(column, Row::IscsiRaw);
        assert!(
            c.wall <= report::FIRST_STAGE_GOAL && c.attempts == 1,
            "{column:?}: {:?} in {} attempts: {}",
            c.wall,
            c.attempts,
            c.sequence.join(" → ")
        );
    }
    for column in SETTLING {
        let c = cell(column, Row::IscsiRaw);
        assert!(
            c.wall >= settle && c.wall <= settle + report::FIRST_STAGE_GOAL,
            "{column:?}: {:?}",
            c.wall
        );
    }
    // A LUN with data is found as soon as its volume shows, on every release.
    for column in Column::all() {
        let c = cell(column, Row::IscsiData);
        assert!(
            c.wall <= report::FIRST_STAGE_GOAL,
            "{column:?}: {:?}",
            c.wall
        );
    }
}

/// Item 3: host calls per operation at the default arrival, waits included. Met: a first iSCSI stage through a
/// PowerShell-era csi-proxy (≤ 20), every repeated stage (≤ 2), every SMB first stage (≤ 3). Missed, within the floors
/// BENCHMARKS.md explains: v1.3.0/master (the settle time's two looks make 19, the four looks between them that find a
/// LUN with data at once 8 more), native (its floor, every arrival at once, plus the disk's arrival: a `Rescan` and a
/// second `GetTargetDisks`).
#[test]
fn host_calls_per_operation_meet_the_goals_or_their_floors() {
    for column in Column::all() {
        let raw = cell(column, Row::IscsiRaw);
        let floor = &measured().floor[&(column, Row::IscsiRaw)];
        let seq = raw.sequence.join(" → ");
        match column {
            Column::CsiProxy("v1.1.3" | "v1.2.1") => {
                assert!(
                    raw.calls <= report::CSI_PROXY_CALLS_GOAL,
                    "{column:?}: {seq}"
                );
                assert!(
                    raw.processes <= 21,
                    "{column:?}: {} processes",
                    raw.processes
                );
            }
            Column::CsiProxy(_) => {
                assert!(
                    raw.calls <= report::CSI_PROXY_CALLS_GOAL - 1 + 2 * 4,
                    "{column:?}: {seq}"
                );
                assert_eq!(raw.processes, 0, "{column:?}");
            }
            Column::Native => {
                assert!(raw.calls <= floor.calls + 2, "{column:?}: {seq}");
                assert_eq!(
                    floor.calls, 15,
                    "{column:?}: the floor BENCHMARKS.md explains"
                );
            }
        }
        for (row, goal) in [
            (Row::IscsiRepeated, report::REPEATED_GOAL),
            (Row::SmbFirst, report::SMB_GOAL),
        ] {
            let c = cell(column, row);
            // Natively an SMB first stage first reads its staging path's link (one FSCTL_GET_REPARSE_POINT) to
            // adopt the driver's own link after a lost state directory (issue 37 item 15): one call over the goal,
            // explained in BENCHMARKS.md.
            let adoption = usize::from(
                row == Row::SmbFirst
                    && column == Column::Native
                    && c.sequence.first().map(String::as_str) == Some("FSCTL_GET_REPARSE_POINT"),
            );
            assert!(
                c.calls <= goal + adoption,
                "{column:?} {row:?}: {}",
                c.sequence.join(" → ")
            );
        }
    }
}

/// kubelet's retry as the harness models it (`pkg/util/goroutinemap/exponentialbackoff`, the volume manager's
/// 100 ms reconciler passes): 500 ms doubling to 2 min 2 s, at the first pass after it.
#[test]
fn kubelet_backoff_is_modelled_as_kubelet_does_it() {
    assert_eq!(measure::backoff(1), Duration::from_millis(500));
    assert_eq!(measure::backoff(2), Duration::from_secs(1));
    assert_eq!(measure::backoff(8), Duration::from_secs(64));
    assert_eq!(measure::backoff(9), Duration::from_secs(122));
    assert_eq!(measure::backoff(30), Duration::from_secs(122));
    let start = tokio::time::Instant::now();
    for (ready_ms, pass_ms) in [(0, 100), (50, 100), (100, 200), (501, 600), (1_999, 2_000)] {
        assert_eq!(
            measure::next_pass(start, start + Duration::from_millis(ready_ms)) - start,
            Duration::from_millis(pass_ms),
            "ready at {ready_ms} ms"
        );
    }
}
