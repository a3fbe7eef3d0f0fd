#![cfg_attr(not(windows), allow(missing_docs))]
#![cfg(windows)]
//! The named-pipe transport end to end (runs under Wine in CI): a fake csi-proxy in ANOTHER
//! process serves all six groups on real named pipes `\\.\pipe\wincsi-test-<pid>-csi-proxy-*`,
//! and the client calls every RPC through them.
//!
//! The server process is this same test executable, re-run with only the `child_pipe_server`
//! test selected and `WINCSI_PIPE_SERVER_PREFIX` set (cargo offers no `CARGO_BIN_EXE_*` for test
//! helpers, and this works unchanged under a cargo runner such as `.ci/wine-run.sh`). The child
//! prints a ready marker once every pipe exists and serves until its stdin closes.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use proxy_client::{ApiGroup, ErrorKind, ProxyClient, SmbCredentials, Transport, listen};
use support::*;

const CHILD_ENV: &str = "WINCSI_PIPE_SERVER_PREFIX";
/// Printed by the child once all pipes exist (libtest may put other text before it on the line).
const READY: &str = "wincsi-pipe-server-ready";
/// Printed by the child before it exits, followed by the number of RPCs that arrived intact.
const CALLS: &str = "wincsi-pipe-server-calls=";

/// The server side. A no-op unless started by [`PipeServerProcess::spawn`].
#[test]
fn child_pipe_server() {
    let Some(prefix) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let prefix = prefix.into_string().expect("prefix is UTF-8");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let fake = FakeProxy::default();
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::new();
        for group in ApiGroup::ALL {
            // The first instance of each pipe exists when this returns.
            let incoming = listen::named_pipe_for_group(&prefix, group).expect("create pipe");
            let router = fake.router(group);
            let mut stop = stop_rx.clone();
            tasks.push(tokio::spawn(async move {
                router
                    .serve_with_incoming_shutdown(incoming, async move {
                        let _ = stop.wait_for(|s| *s).await;
                    })
                    .await
                    .expect("serve");
            }));
        }
        println!("\n{READY}");
        std::io::stdout().flush().unwrap();
        // Serve until the parent closes our stdin.
        tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        })
        .await
        .unwrap();
        println!("\n{CALLS}{}", fake.calls().len());
        std::io::stdout().flush().unwrap();
        let _ = stop_tx.send(true);
        for task in tasks {
            task.await.unwrap();
        }
    });
}

struct PipeServerProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl PipeServerProcess {
    fn spawn(prefix: &str) -> Self {
        let exe = std::env::current_exe().unwrap();
        let mut child = Command::new(exe)
            .args([
                "--exact",
                "child_pipe_server",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, prefix)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the pipe server process");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut server = PipeServerProcess {
            child,
            stdin,
            stdout,
        };
        server.read_until(READY);
        server
    }

    /// Reads the child's stdout up to a line containing `marker`; returns what follows it.
    fn read_until(&mut self, marker: &str) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.stdout.read_line(&mut line).unwrap();
            assert!(n > 0, "pipe server process exited before printing {marker}");
            if let Some(at) = line.find(marker) {
                return line[at + marker.len()..].trim_end().to_owned();
            }
        }
    }

    /// Stops the child and returns how many distinct RPCs it saw arrive intact.
    fn finish(mut self) -> usize {
        drop(self.stdin.take());
        let calls = self.read_until(CALLS);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "pipe server process failed: {status}");
        calls.parse().unwrap()
    }
}

impl Drop for PipeServerProcess {
    fn drop(&mut self) {
        // Only reached with the child still running if the test failed.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn every_group_over_named_pipes_in_another_process() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let prefix = format!(r"\\.\pipe\wincsi-test-{}-", std::process::id());
    let server = PipeServerProcess::spawn(&prefix);

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let proxy =
            ProxyClient::new(Transport::named_pipes(&prefix)).with_timeout(Duration::from_secs(60));
        exercise_all(&proxy).await;

        // Errors travel over the pipe unchanged and are classified.
        let err = proxy
            .smb()
            .new_global_mapping(
                SMB_REMOTE_CONFLICT,
                None,
                &SmbCredentials::new(SMB_USER, SMB_PASSWORD),
            )
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::SmbMultipleConnections, "{err:?}");
        assert_eq!(err.message(), SMB_1219_TEXT);

        // Many clients at once: each opens its own pipe instance; the server must always have
        // a next instance ready (or the client retries on ERROR_PIPE_BUSY).
        let calls = (0..24).map(|_| {
            let prefix = prefix.clone();
            tokio::spawn(async move {
                let client = ProxyClient::new(Transport::named_pipes(prefix));
                client.system().bios_serial().await
            })
        });
        for call in calls {
            assert_eq!(call.await.unwrap().unwrap(), BIOS_SERIAL);
        }
    });
    drop(rt);

    assert_eq!(server.finish(), ALL_RPCS.len());
}

#[test]
fn a_missing_pipe_names_the_pipe_and_the_usual_causes() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let prefix = format!(r"\\.\pipe\wincsi-test-{}-nobody-", std::process::id());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let err = rt.block_on(async {
        let proxy = ProxyClient::new(Transport::named_pipes(&prefix));
        proxy.volume().is_formatted(VOLUME_ID).await.unwrap_err()
    });
    assert_eq!(err.kind(), ErrorKind::PipeMissing, "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("{prefix}csi-proxy-volume-v1")),
        "{text}"
    );
    assert!(text.contains("IsVolumeFormatted"), "{text}");
    assert!(text.contains("not running"), "{text}");
    assert!(text.contains("hostPath"), "{text}");
}

#[test]
fn unix_sockets_are_unsupported_on_windows() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let err = rt.block_on(async {
        let proxy = ProxyClient::new(Transport::unix_sockets(r"C:\var\run\wincsi-sim"));
        proxy.system().bios_serial().await.unwrap_err()
    });
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err:?}");
}

#[test]
fn a_pipe_that_stays_busy_is_retried_then_reported() {
    use tokio::net::windows::named_pipe::{ClientOptions, ServerOptions};

    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let prefix = format!(r"\\.\pipe\wincsi-test-{}-busy-", std::process::id());
    let name = proxy_client::pipe_name(&prefix, ApiGroup::System);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // A single pipe instance, already taken: every further open fails with ERROR_PIPE_BUSY.
        let server = ServerOptions::new()
            .first_pipe_instance(true)
            .max_instances(1)
            .create(&name)
            .unwrap();
        let _holder = ClientOptions::new().open(&name).unwrap();
        server.connect().await.unwrap();

        let proxy = ProxyClient::new(Transport::named_pipes(&prefix));
        let err = proxy.system().bios_serial().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ProxyUnavailable, "{err:?}");
        let text = err.to_string();
        assert!(text.contains(&name) && text.contains("busy"), "{text}");
    });
}

/// A csi-proxy pipe instance that accepts the client and never answers (as the real csi-proxy's first instances did
/// under Wine after a restart) must not wedge the group: after the call's deadline the next call opens a new
/// instance and is answered there, and the silent instance is closed once no call uses it.
#[test]
fn a_pipe_instance_that_never_answers_is_left_for_a_new_one() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::StreamExt;
    use tokio::io::AsyncReadExt;
    use tokio::time::Instant;

    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let prefix = format!(r"\\.\pipe\wincsi-test-{}-silent-", std::process::id());
    let name = proxy_client::pipe_name(&prefix, ApiGroup::System);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let fake = FakeProxy::default();
        let router = fake.router(ApiGroup::System);
        let mut incoming = listen::named_pipe(&name).expect("create pipe");
        let accepted = Arc::new(AtomicUsize::new(1));
        let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            // The first instance a client opens is a black hole: read and discard until the client closes it.
            let first = incoming.next().await.expect("a client").expect("connected");
            tokio::spawn(async move {
                let mut pipe = first.into_inner();
                let mut buf = [0u8; 4096];
                while pipe.read(&mut buf).await.is_ok_and(|n| n > 0) {}
                let _ = closed_tx.send(());
            });
            // Every later one is served.
            let incoming = incoming.inspect(move |_| {
                count.fetch_add(1, Ordering::SeqCst);
            });
            router.serve_with_incoming(incoming).await.expect("serve");
        });

        let proxy = ProxyClient::new(Transport::named_pipes(&prefix));
        let err = proxy
            .with_deadline(Instant::now() + Duration::from_millis(300))
            .system()
            .bios_serial()
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::DeadlineExceeded, "{err:?}");
        let serial = proxy
            .with_deadline(Instant::now() + Duration::from_secs(30))
            .system()
            .bios_serial()
            .await;
        assert_eq!(
            serial.expect("answered on a new pipe instance"),
            BIOS_SERIAL
        );
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        tokio::time::timeout(Duration::from_secs(30), closed_rx)
            .await
            .expect("the silent instance is closed")
            .expect("closed");
        assert_eq!(proxy.system().bios_serial().await.unwrap(), BIOS_SERIAL);
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            2,
            "the new instance is kept"
        );
    });
}
