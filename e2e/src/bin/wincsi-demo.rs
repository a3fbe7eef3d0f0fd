//! `cargo run -p wincsi-e2e --bin wincsi-demo`: a kubelet stages, publishes, uses and tears down an SMB volume
//! and an iSCSI volume through wincsi on a simulated Windows node, and every step is printed with the host
//! (csi-proxy) calls it caused and the time it took. Needs nothing but the repository and cargo; exits 0 when
//! everything worked and the node is left clean.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Instant;

use wincsi_e2e::fixtures::{
    self, ISCSI_IQN, ISCSI_PORTAL, SMB_DOMAIN, SMB_SERVER, SMB_SHARE, SMB_USER,
};
use wincsi_e2e::inproc::InProcessNode;
use wincsi_e2e::kubelet::CallRecord;
use wincsi_e2e::report::{describe, shorten};
use wincsi_e2e::{Pod, Volume};

/// Collects the account and prints it at the end (one write; stdout may be a pipe).
#[derive(Default)]
struct Out {
    text: String,
    csi_calls: usize,
    host_calls: usize,
    /// Long paths replaced by short names in host-call lines.
    subs: Vec<(String, String)>,
}

impl Out {
    fn line(&mut self, s: impl AsRef<str>) {
        self.text.push_str(s.as_ref());
        self.text.push('\n');
    }

    fn sub(&self, s: &str) -> String {
        let mut s = shorten(s);
        for (long, short) in &self.subs {
            s = s.replace(long.as_str(), short);
        }
        s
    }
}

fn ms(d: std::time::Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// Runs one kubelet step, then prints the CSI calls it made and the host calls those caused.
async fn step<T>(
    out: &mut Out,
    node: &InProcessNode,
    what: &str,
    fut: impl std::future::Future<Output = wincsi_e2e::Result<T>>,
) -> wincsi_e2e::Result<T> {
    let since = node.host().audit(0).last().map_or(0, |e| e.seq);
    let calls_before = node.kubelet().calls().len();
    let started = Instant::now();
    let result = fut.await;
    let elapsed = started.elapsed();
    let calls: Vec<CallRecord> = node
        .kubelet()
        .calls()
        .into_iter()
        .skip(calls_before)
        .collect();
    let host = node.host().audit(since);
    out.line(format!("  {what}  ({})", ms(elapsed)));
    for c in &calls {
        let outcome = match &c.error {
            None => "ok".to_owned(),
            Some((code, msg)) => format!("{code:?}: {}", shorten(msg)),
        };
        out.line(format!(
            "    CSI {:<22} {:>9}  {outcome}",
            c.rpc,
            ms(c.duration)
        ));
    }
    out.csi_calls += calls.len();
    out.host_calls += host.len();
    let lines: Vec<(String, f64)> = host
        .iter()
        .map(|h| (out.sub(&describe(h)), h.duration_us as f64 / 1000.0))
        .collect();
    let mut i = 0;
    while i < lines.len() {
        // A driver waiting for Windows (arrival is asynchronous) repeats a short cycle of looks: shown once, counted.
        let (period, times) = repeats(&lines[i..]);
        for (line, ms) in &lines[i..i + period] {
            out.line(format!("      host {line:<64} {ms:>6.1} ms"));
        }
        if times > 1 {
            let total: f64 = lines[i..i + period * times].iter().map(|(_, ms)| ms).sum();
            out.line(format!(
                "      host … {} {times} times in all ({total:.1} ms): waiting for what Windows has not shown yet",
                if period == 1 { "that call" } else { "those calls" }
            ));
        }
        i += period * times;
    }
    result
}

/// The shortest cycle (1 to 3 calls) that `lines` starts with and how many times it repeats back to back; (1, 1)
/// when nothing repeats.
fn repeats(lines: &[(String, f64)]) -> (usize, usize) {
    for period in 1..=3 {
        let mut times = 1;
        while lines.len() >= period * (times + 1)
            && (0..period).all(|j| lines[j].0 == lines[period * times + j].0)
        {
            times += 1;
        }
        if times > 1 {
            return (period, times);
        }
    }
    (1, 1)
}

async fn lifecycle(
    out: &mut Out,
    node: &InProcessNode,
    pod: &Pod,
    vol: &Volume,
    file: &str,
) -> wincsi_e2e::Result<()> {
    let k = node.kubelet();
    let (staging, target) = (k.staging_path(vol), k.publish_path(pod, vol));
    out.line(format!("  <staging> = {}", shorten(&staging)));
    out.line(format!("  <target>  = {}", shorten(&target)));
    out.subs = vec![
        (shorten(&staging), "<staging>".to_owned()),
        (shorten(&target), "<target>".to_owned()),
    ];
    step(
        out,
        node,
        "kubelet MountDevice (stage once per node)",
        k.mount_device(node.admin(), vol),
    )
    .await?;
    let target = step(
        out,
        node,
        "kubelet SetUp (publish into the pod)",
        k.set_up(node.admin(), pod, vol),
    )
    .await?;
    let path = format!(r"{target}\{file}");
    node.admin()
        .write_file(
            &path,
            &format!("written by pod {}/{}", pod.namespace, pod.name),
        )
        .await?;
    out.line(format!("  pod {} writes {}", pod.name, out.sub(&path)));
    let stats = step(out, node, "kubelet volume metrics", k.stats(pod, vol)).await?;
    let usage = match stats.usage.first() {
        Some(u) if u.total > 0 => format!("{} MiB total, {} bytes used", u.total >> 20, u.used),
        _ => "no byte counts (an SMB share's size is not known to the node)".to_owned(),
    };
    let condition = match &stats.volume_condition {
        Some(c) if c.abnormal => format!("ABNORMAL: {}", c.message),
        Some(_) => "healthy".to_owned(),
        None => "not reported".to_owned(),
    };
    out.line(format!("    → {usage}; condition {condition}"));
    step(
        out,
        node,
        "kubelet TearDown (pod deleted)",
        k.tear_down(node.admin(), pod, vol),
    )
    .await?;
    step(
        out,
        node,
        "kubelet UnmountDevice (no pod uses it)",
        k.unmount_device(node.admin(), vol),
    )
    .await?;
    Ok(())
}

async fn run(out: &mut Out) -> wincsi_e2e::Result<()> {
    let started = Instant::now();
    let node = InProcessNode::start(&fixtures::scenario()).await?;
    out.line("wincsi demo: kubelet ↔ wincsi-node ↔ csi-proxy on a simulated Windows node");
    out.line(format!(
        "  driver   wincsi-node (in this process), CSI endpoint {}",
        node.endpoint()
    ));
    out.line("  host     simulated Windows Server serving the csi-proxy v1 API (real gRPC, secrets redacted)");
    out.line(format!("  storage  SMB \\\\{SMB_SERVER}\\{SMB_SHARE} as {SMB_DOMAIN}\\{SMB_USER}; iSCSI {ISCSI_IQN} LUN 0 via {ISCSI_PORTAL}:3260 (CHAP)"));
    out.line(format!(
        "  paths    <kubelet> = {}",
        wincsi_e2e::kubelet::KUBELET_PATH_ROOT
    ));
    out.line("");

    let pod = Pod::new("demo", "web-0");
    let smb = fixtures::smb_volume(
        "pv-smb-demo",
        "demo",
        "web-content",
        Some("${pvc.metadata.namespace}/${pvc.metadata.name}"),
    );
    out.line("── SMB volume pv-smb-demo (PVC demo/web-content, subDir ${pvc.metadata.namespace}/${pvc.metadata.name})");
    lifecycle(out, &node, &pod, &smb, "index.html").await?;
    let on_share = node
        .admin()
        .read_share_file(SMB_SERVER, SMB_SHARE, "demo/web-content/index.html")
        .await?;
    out.line(format!("  on the file server: \\\\{SMB_SERVER}\\{SMB_SHARE}\\demo\\web-content\\index.html = {on_share:?}"));
    out.line("");

    let lun = fixtures::iscsi_volume("pv-iscsi-demo", "demo", "db-data", 0);
    out.line("── iSCSI volume pv-iscsi-demo (PVC demo/db-data, RAW 1 GiB LUN: initialised, formatted NTFS)");
    lifecycle(out, &node, &pod, &lun, "db.txt").await?;
    out.line("");

    let report = node.host().invariants();
    let ok = report.ok();
    out.line(format!(
        "{} CSI calls, {} host calls, {} data-loss events, {} leftovers (mappings, sessions, mounts, links); {}",
        out.csi_calls,
        out.host_calls,
        report.data_loss.len(),
        report.leftovers.len(),
        ms(started.elapsed())
    ));
    for l in &report.leftovers {
        out.line(format!("  left behind: {l}"));
    }
    node.shutdown().await;
    if ok {
        Ok(())
    } else {
        Err(wincsi_e2e::Error::NotClean(
            "the node was not left clean".into(),
        ))
    }
}

fn main() -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "wincsi-demo: cannot start the runtime: {e}"
            );
            return ExitCode::FAILURE;
        }
    };
    let mut out = Out::default();
    let result = rt.block_on(run(&mut out));
    let mut text = std::mem::take(&mut out.text);
    let code = match result {
        Ok(()) => {
            text.push_str("demo finished: the node is clean.\n");
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = writeln!(text, "demo FAILED: {e}");
            ExitCode::FAILURE
        }
    };
    let _ = std::io::stdout().write_all(text.as_bytes());
    code
}
