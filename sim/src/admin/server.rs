use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{AdminAddr, Request, Response};
use crate::error::{Error, Result};
use crate::host::SimHost;

/// A running admin listener.
#[derive(Debug)]
pub struct AdminServer {
    addr: AdminAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl AdminServer {
    /// The bound address (with the real port for `tcp:...:0`).
    pub fn addr(&self) -> &AdminAddr {
        &self.addr
    }

    /// Stops accepting connections.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Binds the admin interface (bound when this returns) and serves it in the background. Must be called inside
/// a tokio runtime.
pub async fn serve_admin(host: SimHost, addr: &AdminAddr) -> Result<AdminServer> {
    let (stop, rx) = watch::channel(false);
    let (bound, task) = match addr {
        AdminAddr::Tcp(a) => {
            let l = TcpListener::bind(a).await.map_err(|source| Error::Serve {
                what: addr.to_string(),
                source,
            })?;
            let local = l.local_addr().map_err(|source| Error::Serve {
                what: addr.to_string(),
                source,
            })?;
            let l = std::sync::Arc::new(l);
            let task = tokio::spawn(accept_loop(rx, host, move || {
                let l = l.clone();
                async move {
                    let (s, _) = l.accept().await?;
                    let (r, w) = s.into_split();
                    Ok((Box::new(r) as BoxRead, Box::new(w) as BoxWrite))
                }
            }));
            (AdminAddr::Tcp(local), task)
        }
        AdminAddr::Unix(p) => {
            let l = super::platform::bind_unix(p).map_err(|source| Error::Serve {
                what: addr.to_string(),
                source,
            })?;
            let task = tokio::spawn(accept_loop(rx, host, move || l.accept()));
            (addr.clone(), task)
        }
    };
    Ok(AdminServer {
        addr: bound,
        stop,
        task,
    })
}

pub(crate) type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
pub(crate) type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

async fn accept_loop<F, Fut>(mut stop: watch::Receiver<bool>, host: SimHost, mut accept: F)
where
    F: FnMut() -> Fut + Send,
    Fut: std::future::Future<Output = std::io::Result<(BoxRead, BoxWrite)>> + Send,
{
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            conn = accept() => match conn {
                Ok((r, w)) => {
                    tokio::spawn(serve_conn(host.clone(), r, w));
                }
                Err(e) => tracing::warn!(error = %e, "admin accept failed"),
            },
        }
    }
}

async fn serve_conn(host: SimHost, r: BoxRead, mut w: BoxWrite) {
    let mut lines = BufReader::new(r).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim().is_empty() {
            continue;
        }
        let resp = match serde_json::from_str::<Request>(&line) {
            Ok(req) => match handle(&host, req).await {
                Ok(result) => Response {
                    ok: true,
                    result,
                    error: None,
                },
                Err(e) => Response {
                    ok: false,
                    result: serde_json::Value::Null,
                    error: Some(e.to_string()),
                },
            },
            Err(e) => Response {
                ok: false,
                result: serde_json::Value::Null,
                error: Some(format!("bad request: {e}")),
            },
        };
        let mut out = serde_json::to_vec(&resp).unwrap_or_else(|_| b"{\"ok\":false}".to_vec());
        out.push(b'\n');
        if w.write_all(&out).await.is_err() || w.flush().await.is_err() {
            return;
        }
    }
}

fn to_json<T: serde::Serialize>(v: T) -> Result<serde_json::Value> {
    serde_json::to_value(v).map_err(|e| Error::Admin(e.to_string()))
}

/// Executes one admin request against the host.
pub(crate) async fn handle(host: &SimHost, req: Request) -> Result<serde_json::Value> {
    use serde_json::Value::Null;
    Ok(match req {
        Request::Ping => "pong".into(),
        Request::State => host.snapshot(),
        Request::Audit { since } => to_json(host.audit(since))?,
        Request::ClearAudit => {
            host.clear_audit();
            Null
        }
        Request::CallCounts => to_json(host.call_counts())?,
        Request::HostProcesses => to_json(host.host_processes())?,
        Request::InjectFault(f) => {
            host.inject_fault(f)?;
            Null
        }
        Request::SetLatency { rpc, millis } => {
            host.set_latency(&rpc, Duration::from_millis(millis))?;
            Null
        }
        Request::Hang { rpc, nth } => {
            host.hang_nth(&rpc, nth)?;
            Null
        }
        Request::ReleaseHangs => {
            host.release_hangs();
            Null
        }
        Request::WaitHung { count } => {
            host.wait_hung(count).await;
            host.hung_calls().into()
        }
        Request::ClearFaults => {
            host.clear_faults();
            Null
        }
        Request::Reboot => {
            host.reboot()?;
            Null
        }
        Request::Invariants => to_json(host.invariants())?,
        Request::DataLoss => to_json(host.data_loss_events())?,
        Request::LoadScenario { scenario } => {
            host.load_scenario(&scenario)?;
            Null
        }
        Request::SetSmbPassword {
            server,
            user,
            password,
        } => {
            host.with_state_mut(|s| s.set_smb_password(&server, &user, password))?;
            Null
        }
        Request::SetSmbReachable { server, reachable } => {
            host.with_state_mut(|s| s.set_smb_reachable(&server, reachable))?;
            Null
        }
        Request::SetDiskSize { disk_id, size } => {
            host.with_state_mut(|s| s.set_disk_size(&disk_id, size))?;
            Null
        }
        Request::WriteFile { path, content } => {
            host.with_state(|s| s.write_file(&path, content.as_bytes()))?;
            Null
        }
        Request::ReadFile { path } => {
            let b = host.with_state(|s| s.read_file(&path))?;
            String::from_utf8_lossy(&b).into_owned().into()
        }
        Request::Lstat { path } => to_json(host.with_state(|s| s.lstat_kind(&path))?)?,
        Request::Mkdir { path } => {
            host.with_state(|s| s.mkdir(&path))?;
            Null
        }
        Request::Remove { path } => {
            host.with_state_mut(|s| s.rmdir(&path, false))?;
            Null
        }
        Request::ReadLink { path } => to_json(host.with_state(|s| s.read_link(&path)))?,
        Request::WriteShareFile {
            server,
            share,
            path,
            content,
        } => {
            host.with_state(|s| s.write_share_file(&server, &share, &path, content.as_bytes()))?;
            Null
        }
        Request::ReadShareFile {
            server,
            share,
            path,
        } => {
            let b = host.with_state(|s| s.read_share_file(&server, &share, &path))?;
            String::from_utf8_lossy(&b).into_owned().into()
        }
        Request::SetCsiProxyVersion { version } => {
            host.set_csi_proxy_version(version)?;
            Null
        }
        Request::CsiProxyStatus => to_json(super::CsiProxyStatus {
            version: host.csi_proxy_version(),
            process: host.csi_proxy_status(),
        })?,
        Request::CrashCsiProxy { reason } => {
            host.crash_csi_proxy(reason.as_deref().unwrap_or("killed by the admin interface"));
            host.wait_endpoints().await;
            Null
        }
        Request::RestartCsiProxy => {
            host.restart_csi_proxy();
            host.wait_endpoints().await;
            Null
        }
        Request::SetHostBehaviour { behaviour } => {
            host.with_state_mut(|s| s.set_behaviour(behaviour))?;
            Null
        }
        Request::SetArrivalDelay {
            disk_id,
            millis,
            volume_millis,
        } => {
            host.with_state_mut(|s| {
                s.set_lun_arrival_delay(
                    &disk_id,
                    Duration::from_millis(millis),
                    Duration::from_millis(volume_millis),
                )
            })?;
            Null
        }
        Request::CompleteArrivals => {
            host.with_state_mut(|s| s.complete_arrivals())?;
            Null
        }
        Request::ReplaceLun { iqn, lun, disk } => host
            .with_state_mut(|s| s.replace_lun(&iqn, lun, &disk))?
            .into(),
        Request::AddTarget {
            address,
            port,
            target,
        } => to_json(host.with_state_mut(|s| s.add_target(&address, port, &target))?)?,
        Request::SetTargetChap { iqn, chap } => {
            host.with_state_mut(|s| s.set_target_chap(&iqn, chap))?;
            Null
        }
        Request::RecoverIscsiSessions { iqn } => {
            to_json(host.with_state_mut(|s| s.recover_iscsi_sessions(iqn.as_deref()))?)?
        }
        Request::DropIscsiPath { iqn, address } => {
            to_json(host.with_state_mut(|s| s.drop_iscsi_path(&iqn, &address))?)?
        }
        Request::RefreshDiscovery { address, port } => {
            host.with_state_mut(|s| s.refresh_discovery(&address, port))?;
            Null
        }
        Request::SetService {
            name,
            start_type,
            status,
        } => {
            host.with_state_mut(|s| s.set_service(&name, start_type, status));
            Null
        }
    })
}
