//! A read-only look at a Windows node through the facade, for a real-node check of what the native backend assumes:
//! the probe's findings, then (where present) every disk, partition, volume, iSCSI portal, target, session and
//! initiator port, and every SMB global mapping, as the facade decodes them. It executes no WMI method and changes
//! nothing.
//!
//! ```text
//! cargo build --release --target x86_64-pc-windows-gnu -p wincsi-winhost --example probe
//! winhost-probe.exe            (as Administrator/SYSTEM: the Storage and SMB providers require it)
//! ```

#[cfg(windows)]
fn main() {
    use std::time::Duration;

    use winhost::probe::Capability;
    use winhost::win32::{WinHost, WinHostConfig};
    use winhost::{CallContext, Capabilities, IscsiWmi, SmbWmi, StorageWmi, Win32Files};

    let ctx = || CallContext::after(Duration::from_secs(60));
    let host = match WinHost::start(WinHostConfig::default(), &ctx()) {
        Ok(host) => host,
        Err(e) => {
            println!("cannot start: {e}");
            std::process::exit(1);
        }
    };
    let report = host.probe_report();
    println!("probe: {report}");

    fn show<T: std::fmt::Debug>(what: &str, r: winhost::CallResult<Vec<T>>) {
        match r {
            Ok(rows) => {
                println!("{what}: {} row(s)", rows.len());
                for row in rows {
                    println!("  {row:?}");
                }
            }
            Err(e) => println!("{what}: error: {e} (kind {:?})", e.kind()),
        }
    }

    if report.supports(Capability::Disks) {
        show("MSFT_Disk", host.disks(&ctx(), None));
        show("MSFT_Partition", host.partitions(&ctx(), None));
        show("MSFT_Volume", host.volumes(&ctx(), None));
        match host.disks(&ctx(), None) {
            Ok(disks) => {
                for d in disks {
                    let location = d
                        .location
                        .as_deref()
                        .and_then(winhost::location::DiskLocation::parse);
                    println!(
                        "disk {} location {:?} -> {location:?}",
                        d.number, d.location
                    );
                    if let Some(device) = &d.device_path {
                        let ids = host.storage_device_identifiers(&ctx(), device);
                        let page83 = ids
                            .as_ref()
                            .map(|ids| winhost::page83::csi_proxy_page83(ids));
                        println!(
                            "  device number {:?}, page83 {page83:?}, identifiers {ids:?}",
                            host.storage_device_number(&ctx(), device)
                        );
                    }
                }
            }
            Err(e) => println!("disks: {e}"),
        }
    }
    if report.supports(Capability::Iscsi) {
        show("MSFT_InitiatorPort", host.initiator_ports(&ctx()));
        show("MSFT_iSCSITargetPortal", host.target_portals(&ctx(), None));
        show("MSFT_iSCSITarget", host.targets(&ctx()));
        show("MSFT_iSCSISession", host.sessions(&ctx()));
    }
    if report.supports(Capability::Smb) {
        show("MSFT_SmbGlobalMapping", host.global_mappings(&ctx()));
    }
    match host.volume_name_for_mount_point(&ctx(), r"C:\") {
        Ok(v) => println!(
            "C:\\ is {v}; {:?}; {:?}",
            host.volume_information(&ctx(), &v.to_path()),
            host.disk_free_space(&ctx(), r"C:\")
        ),
        Err(e) => println!("C:\\: {e}"),
    }
}

#[cfg(not(windows))]
fn main() {
    println!(
        "winhost's probe example runs on Windows only (build it with --target x86_64-pc-windows-gnu)"
    );
}
