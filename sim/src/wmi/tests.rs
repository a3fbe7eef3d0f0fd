//! The Windows view against the host model: each documented answer, the arrival waits, the shared audit, faults,
//! hangs and reboots, and both views of one host.

use std::time::Duration;

use serde_json::json;
use winhost::codes::{
    IscsiStatus, PartitionStyle as WmiStyle, SmbMappingStatus, StorageMethod, StorageReturn,
    Win32Error,
};
use winhost::model::{
    AuthenticationType, ChapCredentials, ConnectTarget, CreatePartition, DiskAttributes,
    FormatVolume, NewTargetPortal, SmbGlobalMappingCreate, SymlinkFlags,
};
use winhost::paths::VolumeGuidPath;
use winhost::reparse::{IO_REPARSE_TAG_MOUNT_POINT, IO_REPARSE_TAG_SYMLINK, ReparsePoint};
use winhost::{
    CallContext, CallError, Capabilities, ErrorKind, IscsiWmi, SmbReturn, SmbWmi, StorageWmi,
    Win32Files,
};

use super::{TestBackend, WindowsView};
use crate::{HostOptions, Scenario, SimHost};

const CHAP: &str = "Chap-Secret-12";
const DISC: &str = "Discovery-Pw1";
const PW: &str = "Bob-Sm8-S3cret!";
const IQN: &str = "iqn.2026-01.io.wincsi:vol1";
const K: &str = r"C:\var\lib\kubelet";

fn scenario() -> Scenario {
    Scenario::from_json(
        &json!({
            // The disk arrives at once, volumes a minute after they are due (a test moves time on with
            // `complete_arrivals`); the cache never lags.
            "host": {"csi_proxy_version": "v1.3.0",
                     "behaviour": {"arrival": {"disk_ms": 0, "volumes_after_online_ms": 60_000,
                                               "volume_after_partition_ms": 60_000, "cache_lag_ms": 0}}},
            "disks": [{"id": "os", "number": 0, "size": 137_438_953_472u64, "partition_style": "gpt",
                       "partitions": [{"kind": "basic", "size": 0,
                                       "volume": {"filesystem": "NTFS", "drive_letter": "C"}}]}],
            "smb": {"servers": [
                {"name": "fs1", "accounts": [{"user": "bob", "password": PW, "domain": "CORP"},
                                             {"user": "eve", "password": PW, "domain": "CORP"}],
                 "shares": [{"name": "data", "files": {"hello.txt": "hi"}}, {"name": "apps"}]}]},
            "iscsi": {"portals": [
                {"address": "10.0.0.5", "targets": [
                    {"iqn": IQN, "chap": {"mode": "one_way", "username": "node", "secret": CHAP},
                     "luns": [{"lun": 0, "id": "lun0", "size": 1_073_741_824u64, "partition_style": "raw"}]}]},
                {"address": "10.0.0.9", "discovery_chap": {"username": "disc", "secret": DISC},
                 "targets": [{"iqn": "iqn.2026-01.io.wincsi:secret", "luns": [{"lun": 0, "size": 1_073_741_824u64}]}]}
            ]}
        })
        .to_string(),
    )
    .expect("scenario")
}

/// A host, its Windows view and the runtime that runs the view's calls (the test thread is not a runtime thread,
/// as the native backend's blocking pool is not).
struct Fixture {
    rt: tokio::runtime::Runtime,
    host: SimHost,
    view: WindowsView,
    _dir: tempfile::TempDir,
}

fn fixture() -> Fixture {
    fixture_of(&scenario())
}

/// A fixture over `scenario`.
fn fixture_of(scenario: &Scenario) -> Fixture {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tmp");
    let host = SimHost::new(scenario, dir.path(), HostOptions::default()).expect("host");
    let view = WindowsView::with_handle(host.clone(), rt.handle().clone());
    Fixture {
        rt,
        host,
        view,
        _dir: dir,
    }
}

/// Provider failures as `ReturnValue`s (`host.behaviour.wmi_failures = return_value`) instead of raised ones (the
/// default): the tests that read the codes from outcomes.
fn return_values(f: &Fixture) {
    f.host
        .with_state_mut(|s| {
            let mut b = *s.behaviour();
            b.wmi_failures = Some(crate::profile::WmiFailureReport::ReturnValue);
            s.set_behaviour(b)
        })
        .unwrap();
}

fn ctx() -> CallContext {
    CallContext::after(Duration::from_secs(60))
}

fn win32_code<T: std::fmt::Debug>(r: Result<T, CallError>) -> u32 {
    match r {
        Err(e) => e
            .win32_code()
            .map(Win32Error::code)
            .unwrap_or_else(|| panic!("{e}")),
        Ok(v) => panic!("expected a Win32 error, got {v:?}"),
    }
}

impl Fixture {
    /// Log in to the LUN's target through the view (portal, then Connect with one-way CHAP).
    fn login(&self, persistent: bool) {
        let c = ctx();
        let new = NewTargetPortal {
            target_portal_address: "10.0.0.5",
            target_portal_port_number: 3260,
            initiator_portal_address: None,
            authentication_type: None,
            chap: None,
        };
        assert!(self.view.target_portal_new(&c, &new).unwrap().is_success());
        let out = self
            .view
            .target_connect(
                &c,
                &ConnectTarget {
                    node_address: &IQN.to_uppercase(),
                    target_portal_address: Some("10.0.0.5"),
                    target_portal_port_number: Some(3260),
                    initiator_portal_address: None,
                    authentication_type: AuthenticationType::OneWayChap,
                    chap: Some(ChapCredentials {
                        username: "node",
                        secret: CHAP,
                    }),
                    is_persistent: Some(persistent),
                    is_multipath_enabled: None,
                },
            )
            .unwrap();
        assert!(out.is_success(), "{out:?}");
        assert_eq!(out.output.unwrap().is_persistent, persistent);
    }

    fn lun_disk(&self) -> winhost::model::MsftDisk {
        self.view
            .disks(&ctx(), None)
            .unwrap()
            .into_iter()
            .find(|d| d.bus_type == Some(winhost::codes::BusType::Iscsi))
            .expect("the LUN's disk arrived")
    }
}

#[test]
fn the_backend_switch_reads_one_variable() {
    assert_eq!(
        "native".parse::<TestBackend>().unwrap(),
        TestBackend::Native
    );
    assert_eq!("".parse::<TestBackend>().unwrap(), TestBackend::CsiProxy);
    assert_eq!(
        "csi-proxy".parse::<TestBackend>().unwrap(),
        TestBackend::CsiProxy
    );
    assert!("wmi".parse::<TestBackend>().is_err());
    assert_eq!(TestBackend::Native.to_string(), "native");
}

#[test]
fn a_lun_is_initialised_partitioned_and_formatted_through_wmi_with_documented_codes() {
    let f = fixture();
    let c = ctx();
    f.login(false);
    let disk = f.lun_disk();
    // The default SAN policy (OfflineShared) keeps the new disk offline.
    assert!(disk.is_offline);
    assert_eq!(
        disk.offline_reason,
        Some(winhost::codes::OfflineReason::Policy)
    );
    assert_eq!(disk.partition_style, Some(WmiStyle::Raw));
    let create = CreatePartition::csi_proxy_basic_data();
    let offline = f
        .view
        .disk_create_partition(&c, &disk.path, &create)
        .unwrap();
    assert_eq!(offline.code, StorageReturn::DiskNotInitialized);
    assert!(f.view.disk_online(&c, &disk.path).unwrap().is_success());
    assert!(
        f.view
            .disk_initialize(&c, &disk.path, WmiStyle::Gpt)
            .unwrap()
            .is_success()
    );
    let again = f
        .view
        .disk_initialize(&c, &disk.path, WmiStyle::Gpt)
        .unwrap();
    assert_eq!(again.code, StorageReturn::DiskAlreadyInitialized);
    let created = f
        .view
        .disk_create_partition(&c, &disk.path, &create)
        .unwrap();
    let part = created.accept(&[]).unwrap().expect("CreatedPartition");
    assert!(
        part.gpt_type
            .as_deref()
            .is_some_and(|t| winhost::model::GptType::BasicData.matches(t))
    );
    // The partition is listed at once (the call returned it); its volume has not arrived, and neither `Refresh` nor
    // `UpdateHostStorageCache` hurries it.
    let parts = f.view.partitions(&c, Some(disk.number)).unwrap();
    assert_eq!(parts.len(), 2, "MSR + basic data");
    assert!(parts[0].is_microsoft_reserved());
    assert!(f.view.disk_refresh(&c, &disk.path).unwrap().is_success());
    assert!(f.view.update_host_storage_cache(&c).unwrap().is_success());
    assert!(
        f.view
            .partition_volumes(&c, &parts[1].path)
            .unwrap()
            .is_empty()
    );
    // Time passes: it arrives.
    f.host.with_state_mut(|s| s.complete_arrivals()).unwrap();
    let vols = f.view.partition_volumes(&c, &parts[1].path).unwrap();
    assert_eq!(vols.len(), 1);
    let vol = &vols[0];
    assert!(!vol.file_system_type.is_formatted());
    assert_eq!(
        f.view.volume_partitions(&c, &vol.path).unwrap()[0].path,
        parts[1].path
    );
    // SizeMax of the new partition is a little above its size (csi-proxy#195).
    let supported = f.view.partition_supported_size(&c, &parts[1].path).unwrap();
    let s = supported.accept(&[]).unwrap().unwrap();
    assert!(s.max > parts[1].size && s.max - parts[1].size < 1024 * 1024);
    let small = f.view.partition_resize(&c, &parts[1].path, s.max).unwrap();
    assert_eq!(
        small.code,
        StorageReturn::SizeNotSupported,
        "under one extent"
    );
    // With the Optimize Drives service disabled, GetSupportedSize answers 4 "Failed" with no sizes
    // (aws-ebs-csi-driver#2877); Resize with a size inside the bounds still works.
    f.host
        .with_state_mut(|s| {
            s.set_service(
                "defragsvc",
                crate::scenario::StartType::Disabled,
                crate::scenario::ServiceStatus::Stopped,
            );
            s.set_disk_size("lun0", 2 << 30)
        })
        .unwrap();
    let failed = f.view.partition_supported_size(&c, &parts[1].path).unwrap();
    assert_eq!(failed.code, StorageReturn::Failed);
    assert_eq!(failed.output, None);
    let grown = f
        .view
        .partition_resize(&c, &parts[1].path, parts[1].size + (200 << 20))
        .unwrap();
    assert!(grown.is_success(), "{grown:?}");
    f.host.with_state_mut(|s| {
        s.set_service(
            "defragsvc",
            crate::scenario::StartType::Manual,
            crate::scenario::ServiceStatus::Stopped,
        );
    });
    let formatted = f
        .view
        .volume_format(&c, &vol.path, &FormatVolume::csi_proxy_quick_ntfs())
        .unwrap();
    assert!(
        formatted
            .accept(&[])
            .unwrap()
            .unwrap()
            .file_system_type
            .is_formatted()
    );
    assert!(
        f.host.data_loss_events().is_empty(),
        "an empty volume holds no data"
    );
    // Format a volume holding data: the model's data-loss event.
    let guid = VolumeGuidPath::parse(&vol.unique_id).unwrap();
    f.host
        .with_state(|s| s.write_file(&format!(r"{}f.txt", guid.to_path()), b"data"))
        .unwrap();
    f.view
        .volume_format(&c, &vol.path, &FormatVolume::csi_proxy_quick_ntfs())
        .unwrap();
    assert_eq!(f.host.data_loss_events().len(), 1);
    assert_eq!(f.host.data_loss_events()[0].rpc, "MSFT_Volume.Format");
    // Every code answered is one the method's page documents.
    for e in f.host.audit(0) {
        if let Some(m) = StorageMethod::ALL
            .iter()
            .find(|m| m.qualified_name() == e.rpc)
            && let Some(err) = &e.error
        {
            let code: u32 = err
                .rsplit('(')
                .next()
                .and_then(|t| t.trim_end_matches(')').parse().ok())
                .unwrap_or_else(|| panic!("{err}"));
            assert!(
                m.documents(StorageReturn::from_code(code)),
                "{} answered {code}",
                e.rpc
            );
        }
    }
}

#[test]
fn a_read_only_disk_refuses_writes_until_its_flag_is_cleared() {
    let f = fixture();
    let c = ctx();
    f.host
        .with_state_mut(|s| {
            s.replace_lun(
                IQN,
                0,
                &serde_json::from_value(
                    json!({"size": 1_073_741_824u64, "read_only": true, "online": true}),
                )
                .unwrap(),
            )
        })
        .unwrap();
    f.login(false);
    let disk = f.lun_disk();
    assert!(disk.is_read_only && !disk.is_offline);
    let init = f
        .view
        .disk_initialize(&c, &disk.path, WmiStyle::Gpt)
        .unwrap();
    assert_eq!(init.code, StorageReturn::Failed);
    assert!(
        init.extended_status
            .unwrap()
            .message
            .unwrap()
            .contains("read only")
    );
    let attrs = DiskAttributes {
        is_read_only: Some(false),
        ..DiskAttributes::default()
    };
    assert!(
        f.view
            .disk_set_attributes(&c, &disk.path, &attrs)
            .unwrap()
            .is_success()
    );
    assert!(!f.lun_disk().is_read_only);
    assert!(
        f.view
            .disk_initialize(&c, &disk.path, WmiStyle::Gpt)
            .unwrap()
            .is_success()
    );
    // The csi-proxy view sees the same disk, now writable.
    assert!(f.host.with_state(|s| {
        s.disks()
            .iter()
            .any(|d| d.id.starts_with(IQN) && !d.read_only)
    }));
}

#[test]
fn smb_mappings_are_listed_with_status_created_removed_and_repaired() {
    let f = fixture();
    return_values(&f);
    let c = ctx();
    let create = |user: &'static str, remote: &'static str| SmbGlobalMappingCreate {
        remote_path: remote,
        local_path: None,
        user_name: Some(user),
        password: PW,
        persistent: None,
        require_privacy: Some(true),
        require_integrity: None,
        use_write_through: None,
        compress_network_traffic: None,
        transport_type: None,
        block_ntlm: None,
    };
    let made = f
        .view
        .global_mapping_create(&c, &create(r"CORP\bob", r"\\FS1\Data"))
        .unwrap();
    assert!(made.is_success());
    let listed = f.view.global_mappings(&c).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].status, SmbMappingStatus::Ok);
    assert!(listed[0].remote_path.eq_ignore_ascii_case(r"\\fs1\data"));
    // Looked up by `RemotePath`: compared exactly (whether the provider ignores case is unverified), audited apart.
    f.host.clear_audit();
    assert_eq!(
        f.view
            .global_mappings_of(&c, &listed[0].remote_path)
            .unwrap(),
        listed
    );
    assert_eq!(
        f.view.global_mappings_of(&c, r"\\FS1\Data").unwrap(),
        [],
        "another case finds nothing"
    );
    assert_eq!(
        f.view.global_mappings_of(&c, "//fs1/data").unwrap(),
        [],
        "another slash style finds nothing"
    );
    let audited: Vec<String> = f.host.audit(0).into_iter().map(|e| e.rpc).collect();
    assert_eq!(
        audited,
        ["SELECT MSFT_SmbGlobalMapping WHERE RemotePath"; 3]
    );
    // The share is reachable through the mapping.
    assert_eq!(
        f.view
            .file_attributes(&c, r"\\fs1\data\hello.txt")
            .unwrap()
            .0
            & 0x10,
        0
    );
    // Another principal on the same server: 1219 (as ReturnValue here).
    let other = f
        .view
        .global_mapping_create(&c, &create(r"CORP\eve", r"\\fs1\apps"))
        .unwrap();
    assert_eq!(other.code, SmbReturn(1219));
    assert_eq!(
        other.clone().accept(&[]).unwrap_err().kind(),
        ErrorKind::MultipleConnections
    );
    // The same root again while OK: 85 (unverified choice).
    let dup = f
        .view
        .global_mapping_create(&c, &create(r"CORP\bob", r"\\fs1\data"))
        .unwrap();
    assert_eq!(dup.code, SmbReturn(85));
    // After a reboot the mapping is Disconnected: listed so, and re-creating over it fails (1219) until removed.
    f.host.reboot().unwrap();
    let listed = f.view.global_mappings(&c).unwrap();
    assert_eq!(listed[0].status, SmbMappingStatus::Disconnected);
    assert_eq!(
        win32_code(f.view.file_attributes(&c, r"\\fs1\data\hello.txt")),
        5,
        "a Disconnected mapping's share answers access denied (unc_errors.disconnected)"
    );
    let blocked = f
        .view
        .global_mapping_create(&c, &create(r"CORP\bob", r"\\fs1\data"))
        .unwrap();
    assert_eq!(blocked.code, SmbReturn(1219));
    assert!(
        f.view
            .global_mapping_remove(&c, &listed[0].path, true)
            .unwrap()
            .is_success()
    );
    assert!(
        f.view
            .global_mapping_create(&c, &create(r"CORP\bob", r"\\fs1\data"))
            .unwrap()
            .is_success()
    );
    // Removing a mapping twice: the second time the object is gone.
    let path = f.view.global_mappings(&c).unwrap()[0].path.clone();
    f.view.global_mapping_remove(&c, &path, true).unwrap();
    let gone = f.view.global_mapping_remove(&c, &path, true).unwrap_err();
    assert_eq!(gone.kind(), ErrorKind::NotFound);
    assert!(f.host.invariants().ok(), "{:?}", f.host.invariants());
}

/// By default the SMB and iSCSI providers raise their failures: `WBEM_E_FAILED` with an `MSFT_WmiError` whose
/// `MessageID` is what PowerShell prints (`Windows System Error 53`, `HRESULT 0xefff0009`).
#[test]
fn provider_failures_are_raised_with_their_error_object() {
    let f = fixture();
    let c = ctx();
    let err = f
        .view
        .global_mapping_create(
            &c,
            &SmbGlobalMappingCreate {
                remote_path: r"\\nowhere\x",
                local_path: None,
                user_name: None,
                password: "",
                persistent: None,
                require_privacy: None,
                require_integrity: None,
                use_write_through: None,
                compress_network_traffic: None,
                transport_type: None,
                block_ntlm: None,
            },
        )
        .unwrap_err();
    let CallError::Wmi { hresult, error, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(hresult.0, 0x8004_1001);
    let object = error.as_deref().expect("error object");
    assert_eq!(object.class.as_deref(), Some("MSFT_WmiError"));
    assert_eq!(
        object.message_id.as_deref(),
        Some("Windows System Error 53")
    );
    assert_eq!(
        (object.error_code, object.error_type.as_deref()),
        (Some(53), Some("WIN32"))
    );
    assert_eq!(err.win32_code(), Some(Win32Error::BadNetPath));
    assert_eq!(err.kind(), ErrorKind::NetworkPathNotFound);
    let err = f
        .view
        .target_portal_new(
            &c,
            &NewTargetPortal {
                target_portal_address: "10.0.0.9",
                target_portal_port_number: 3260,
                initiator_portal_address: None,
                authentication_type: None,
                chap: None,
            },
        )
        .unwrap_err();
    assert_eq!(
        err.error_object().and_then(|o| o.message_id.as_deref()),
        Some("HRESULT 0xefff0009")
    );
    assert_eq!(err.iscsi_status(), Some(IscsiStatus::AuthenticationFailure));
    assert_eq!(err.kind(), ErrorKind::LogonFailure);
}

#[test]
fn discovery_chap_and_persistent_logins_that_survive_a_reboot_until_unregistered() {
    let f = fixture();
    return_values(&f);
    let c = ctx();
    let portal = |chap: Option<ChapCredentials<'static>>| NewTargetPortal {
        target_portal_address: "10.0.0.9",
        target_portal_port_number: 3260,
        initiator_portal_address: None,
        authentication_type: chap.map(|_| AuthenticationType::OneWayChap),
        chap,
    };
    let refused = f.view.target_portal_new(&c, &portal(None)).unwrap();
    assert_eq!(refused.code, IscsiStatus::AuthenticationFailure);
    let with = portal(Some(ChapCredentials {
        username: "disc",
        secret: DISC,
    }));
    assert!(f.view.target_portal_new(&c, &with).unwrap().is_success());
    assert_eq!(f.view.targets(&c).unwrap().len(), 1);
    // A persistent login comes back after a reboot (its disk arrives again), until Unregister.
    f.login(true);
    f.host.reboot().unwrap();
    let sessions = f.view.sessions(&c).unwrap();
    assert_eq!(sessions.len(), 1);
    assert!(sessions[0].is_persistent);
    assert!(f.lun_disk().number > 0);
    let target = f
        .view
        .targets(&c)
        .unwrap()
        .into_iter()
        .find(|t| t.node_address == IQN)
        .unwrap();
    assert!(target.is_connected);
    assert_eq!(f.view.target_sessions(&c, &target.path).unwrap().len(), 1);
    assert_eq!(
        f.view.session_disks(&c, &sessions[0].path).unwrap().len(),
        1
    );
    let conns = f.view.target_connections(&c, &target.path).unwrap();
    assert_eq!(
        f.view.connection_disks(&c, &conns[0].path).unwrap().len(),
        1
    );
    assert!(
        f.view
            .session_unregister(&c, &sessions[0].path)
            .unwrap()
            .is_success()
    );
    let out = f
        .view
        .target_disconnect(&c, &target.path, &sessions[0].session_identifier)
        .unwrap();
    assert!(out.is_success());
    let again = f
        .view
        .target_disconnect(&c, &target.path, &sessions[0].session_identifier)
        .unwrap();
    assert_eq!(again.code, IscsiStatus::NotFound);
    f.host.reboot().unwrap();
    assert!(
        f.view.sessions(&c).unwrap().is_empty(),
        "unregistered: not logged in at boot"
    );
    assert!(f.host.invariants().ok(), "{:?}", f.host.invariants());
}

#[test]
fn a_persistent_record_left_behind_is_a_leftover_and_logins_check_chap() {
    let f = fixture();
    return_values(&f);
    let c = ctx();
    f.login(true);
    let target = f.view.targets(&c).unwrap().remove(0);
    // Connected already: 0xEFFF003F.
    let dup = f
        .view
        .target_connect(
            &c,
            &ConnectTarget {
                node_address: IQN,
                target_portal_address: None,
                target_portal_port_number: None,
                initiator_portal_address: None,
                authentication_type: AuthenticationType::OneWayChap,
                chap: Some(ChapCredentials {
                    username: "node",
                    secret: CHAP,
                }),
                is_persistent: None,
                is_multipath_enabled: None,
            },
        )
        .unwrap();
    assert_eq!(dup.code, IscsiStatus::TargetAlreadyLoggedIn);
    let sid = f.view.sessions(&c).unwrap()[0].session_identifier.clone();
    f.view.target_disconnect(&c, &target.path, &sid).unwrap();
    let left = f.host.invariants().leftovers;
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].contains("persistent login"));
    // A bad secret: authentication failure; a short initiator secret is refused.
    let bad = f
        .view
        .target_connect(
            &c,
            &ConnectTarget {
                node_address: IQN,
                target_portal_address: None,
                target_portal_port_number: None,
                initiator_portal_address: None,
                authentication_type: AuthenticationType::OneWayChap,
                chap: Some(ChapCredentials {
                    username: "node",
                    secret: "Wrong-Secret-1",
                }),
                is_persistent: None,
                is_multipath_enabled: None,
            },
        )
        .unwrap();
    assert_eq!(
        bad.clone().accept(&[]).unwrap_err().kind(),
        ErrorKind::LogonFailure
    );
    let short = f.view.set_chap_secret(&c, "short").unwrap();
    assert_eq!(short.code, IscsiStatus::InvalidInitiatorChapSecret);
    // The audit never carries a secret.
    let audit = serde_json::to_string(&f.host.audit(0)).unwrap();
    assert!(!audit.contains(CHAP) && !audit.contains("Wrong-Secret-1") && !audit.contains(DISC));
}

#[test]
fn files_links_and_mount_points_follow_windows_rules() {
    let f = fixture();
    let c = ctx();
    let v = &f.view;
    let stage = format!(r"{K}\plugins\x\globalmount");
    assert_eq!(win32_code(v.create_directory(&c, &stage)), 3, "no parent");
    v.create_directory(&c, &format!(r"{K}\plugins")).unwrap();
    v.create_directory(&c, &format!(r"{K}\plugins\x")).unwrap();
    v.create_directory(&c, &stage).unwrap();
    assert_eq!(win32_code(v.create_directory(&c, &stage)), 183);
    assert!(v.file_attributes(&c, &stage).unwrap().is_directory());
    assert_eq!(win32_code(v.read_reparse_point(&c, &stage)), 4390);
    // Mount the C: volume? No: mount a LUN volume. Use the OS disk's volume for the mount-point rules.
    let c_guid = v.volume_name_for_mount_point(&c, r"C:\").unwrap();
    assert_eq!(win32_code(v.volume_name_for_mount_point(&c, r"C:")), 123);
    assert_eq!(
        win32_code(v.set_volume_mount_point(&c, &stage, &c_guid)),
        123
    );
    let mp = format!(r"{stage}\");
    v.set_volume_mount_point(&c, &mp, &c_guid).unwrap();
    assert_eq!(win32_code(v.set_volume_mount_point(&c, &mp, &c_guid)), 145);
    assert_eq!(v.volume_name_for_mount_point(&c, &mp).unwrap(), c_guid);
    let tag = v.attribute_tag(&c, &stage).unwrap();
    assert_eq!(tag.reparse_tag, IO_REPARSE_TAG_MOUNT_POINT);
    assert!(
        v.read_reparse_point(&c, &stage)
            .unwrap()
            .is_volume_mount_point()
    );
    assert_eq!(
        v.volume_path_names(&c, &c_guid).unwrap(),
        [r"C:\".to_owned(), mp.clone()]
    );
    assert_eq!(
        v.volume_path_name(&c, &format!(r"{stage}\a\b")).unwrap(),
        mp
    );
    // A publish link to the staging path.
    v.create_directory(&c, &format!(r"{K}\pods")).unwrap();
    let publish = format!(r"{K}\pods\mount");
    v.create_symbolic_link(&c, &publish, &stage, SymlinkFlags::DIRECTORY)
        .unwrap();
    assert_eq!(
        win32_code(v.create_symbolic_link(&c, &publish, &stage, SymlinkFlags::DIRECTORY)),
        183
    );
    match v.read_reparse_point(&c, &publish).unwrap() {
        ReparsePoint::Symlink {
            substitute_name, ..
        } => {
            assert!(
                substitute_name.eq_ignore_ascii_case(&format!(r"\??\{stage}")),
                "{substitute_name}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        v.attribute_tag(&c, &publish).unwrap().reparse_tag,
        IO_REPARSE_TAG_SYMLINK
    );
    f.host
        .with_state(|s| s.write_file(&format!(r"{publish}\through.txt"), b"x"))
        .unwrap();
    assert!(
        v.final_path_name(
            &c,
            &format!(r"{publish}\through.txt"),
            winhost::model::VolumeNameKind::Guid
        )
        .unwrap()
        .starts_with(&c_guid.to_path())
    );
    assert!(v.disk_free_space(&c, &c_guid.to_path()).unwrap().total > 0);
    assert_eq!(
        v.volume_information(&c, &mp).unwrap().file_system_name,
        "NTFS"
    );
    // A volume whose file system Windows no longer reads (damaged NTFS, locked BitLocker; unverified, N32): 1005.
    f.host
        .with_state_mut(|s| s.make_volume_unreadable(&c_guid.to_path()))
        .unwrap();
    assert_eq!(win32_code(v.volume_information(&c, &mp)), 1005);
    assert_eq!(win32_code(v.disk_free_space(&c, &c_guid.to_path())), 1005);
    f.host
        .with_state_mut(|s| s.make_volume_readable(&c_guid.to_path()))
        .unwrap();
    assert!(v.disk_free_space(&c, &c_guid.to_path()).unwrap().total > 0);
    // Removing the link never touches its target; a non-empty directory refuses.
    assert_eq!(win32_code(v.delete_volume_mount_point(&c, &stage)), 123);
    v.remove_directory(&c, &publish).unwrap();
    assert_eq!(win32_code(v.remove_directory(&c, &publish)), 2);
    v.delete_volume_mount_point(&c, &mp).unwrap();
    assert_eq!(win32_code(v.delete_volume_mount_point(&c, &mp)), 4390);
    assert!(
        v.file_attributes(&c, &stage).unwrap().is_directory(),
        "the directory stays"
    );
    assert_eq!(
        win32_code(v.remove_directory(&c, &format!(r"{K}\plugins"))),
        145
    );
    v.remove_tree(&c, &format!(r"{K}\plugins")).unwrap();
    assert_eq!(win32_code(v.file_attributes(&c, &stage)), 3);
    // A file link (no directory flag) cannot be traversed as a directory (D11).
    let file_link = format!(r"{K}\filelink");
    v.create_symbolic_link(&c, &file_link, r"\\fs1\data", SymlinkFlags::default())
        .unwrap();
    assert_eq!(
        win32_code(v.file_attributes(&c, &format!(r"{file_link}\hello.txt"))),
        267
    );
    v.delete_file(&c, &file_link).unwrap();
    assert!(f.host.invariants().ok(), "{:?}", f.host.invariants());
}

#[test]
fn a_link_into_a_share_follows_the_mapping() {
    let f = fixture();
    let c = ctx();
    let v = &f.view;
    let link = format!(r"{K}\smb");
    v.create_symbolic_link(&c, &link, r"\\fs1\data", SymlinkFlags::DIRECTORY)
        .unwrap();
    // No mapping: the share answers access denied (unc_errors.unmapped).
    assert_eq!(
        win32_code(v.file_attributes(&c, &format!(r"{link}\hello.txt"))),
        5
    );
    match v.read_reparse_point(&c, &link).unwrap() {
        ReparsePoint::Symlink {
            substitute_name, ..
        } => {
            assert_eq!(substitute_name, r"\??\UNC\fs1\data")
        }
        other => panic!("{other:?}"),
    }
    v.global_mapping_create(
        &c,
        &SmbGlobalMappingCreate {
            remote_path: r"\\fs1\data",
            local_path: None,
            user_name: Some(r"CORP\bob"),
            password: PW,
            persistent: None,
            require_privacy: None,
            require_integrity: None,
            use_write_through: None,
            compress_network_traffic: None,
            transport_type: None,
            block_ntlm: None,
        },
    )
    .unwrap();
    assert!(v.file_attributes(&c, &format!(r"{link}\hello.txt")).is_ok());
    v.create_directory(&c, &format!(r"{link}\sub")).unwrap();
    assert!(f.host.with_state(|s| s.share_has_dir("fs1", "data", "sub")));
    assert_eq!(
        v.disk_free_space(&c, &format!(r"{link}\")).unwrap().total,
        1 << 40
    );
    assert_eq!(
        v.final_path_name(&c, &link, winhost::model::VolumeNameKind::Dos)
            .unwrap(),
        r"\\?\UNC\fs1\data"
    );
}

#[test]
fn calls_are_audited_fail_on_injected_faults_and_honour_deadlines() {
    let f = fixture();
    let c = ctx();
    f.host
        .fail_nth("MSFT_Disk.Online", 1, "return:40001")
        .unwrap();
    f.host
        .fail_nth("SELECT MSFT_Disk", 1, "hresult:0x80041003")
        .unwrap();
    f.host.fail_nth("createdirectoryw", 1, "win32:5").unwrap();
    f.host.fail_nth("SELECT MSFT_Volume", 1, "boom").unwrap();
    let denied = f.view.disks(&c, None).unwrap_err();
    assert_eq!(denied.kind(), ErrorKind::AccessDenied);
    let os = f.view.disks(&c, Some(0)).unwrap().remove(0);
    let online = f.view.disk_online(&c, &os.path).unwrap();
    assert_eq!(online.code, StorageReturn::AccessDenied);
    assert_eq!(
        win32_code(f.view.create_directory(&c, &format!(r"{K}\x"))),
        5
    );
    assert_eq!(
        f.view.volumes(&c, None).unwrap_err().to_string(),
        "SELECT MSFT_Volume: WBEM_E_FAILED: the call failed. (0x80041001)"
    );
    let audit = f.host.audit(0);
    assert_eq!(audit.iter().filter(|e| e.injected).count(), 4);
    assert_eq!(audit[1].rpc, "SELECT MSFT_Disk");
    // Past its deadline a call is never started (not audited).
    let past = CallContext::new(std::time::Instant::now() - Duration::from_millis(1));
    assert_eq!(
        f.view.disks(&past, None).unwrap_err(),
        CallError::DeadlineExceeded { started: false }
    );
    assert_eq!(f.host.audit(0).len(), audit.len());
    // A hung call blocks its thread until released; a reboot fails it instead.
    f.host.hang_nth("GetFileAttributesW", 1).unwrap();
    let view = f.view.clone();
    let t = std::thread::spawn(move || view.file_attributes(&ctx(), K));
    f.rt.block_on(f.host.wait_hung(1));
    f.host.reboot().unwrap();
    let e = t.join().unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    // Latency applies to the Windows view's names too.
    f.host
        .set_latency("SELECT MSFT_iSCSISession", Duration::from_millis(1))
        .unwrap();
    f.view.sessions(&c).unwrap();
    assert!(f.host.audit(0).last().unwrap().duration_us >= 1000);
}

#[test]
fn a_dead_csi_proxy_does_not_affect_windows_and_both_views_share_the_host() {
    let f = fixture();
    let c = ctx();
    f.host.crash_csi_proxy("test");
    assert!(!f.view.disks(&c, None).unwrap().is_empty());
    // Stage-like work through the csi-proxy view, seen through the Windows view.
    f.host.restart_csi_proxy();
    f.rt.block_on(
        f.host
            .call("Mkdir", json!({}), |s| s.mkdir(&format!(r"{K}\mixed"))),
    )
    .unwrap();
    assert!(
        f.view
            .file_attributes(&c, &format!(r"{K}\mixed"))
            .unwrap()
            .is_directory()
    );
    f.host
        .with_state_mut(|s| {
            s.new_smb_global_mapping(r"\\fs1\data", "", r"CORP\bob", &crate::Secret::new(PW))
        })
        .unwrap();
    let m = f.view.global_mappings(&c).unwrap();
    assert_eq!(m.len(), 1);
    // Removed through the Windows view, gone for csi-proxy's.
    f.view.global_mapping_remove(&c, &m[0].path, true).unwrap();
    assert!(f.host.with_state(|s| s.mappings().is_empty()));
}

#[test]
fn a_host_without_the_storage_classes_refuses_calls_into_them() {
    let f = fixture();
    let report = winhost::probe::ProbeReport::from_lookup(
        |ns| (ns == winhost::probe::Namespace::Smb).then_some(winhost::codes::HResult(0x8004_100E)),
        |_, _| Err(winhost::codes::HResult(0x8004_1002)),
    );
    let view = f.view.clone().with_probe(report.clone());
    assert_eq!(view.probe_report(), report);
    let e = view.global_mappings(&ctx()).unwrap_err();
    assert!(matches!(e, CallError::Unsupported { .. }), "{e}");
    assert!(view.disks(&ctx(), None).is_err());
    // Win32 calls do not need WMI.
    assert!(view.file_attributes(&ctx(), K).is_ok());
    assert!(
        f.host.audit(0).len() == 1,
        "refused calls never reach the host"
    );
}

/// A mapping the SMB client re-establishes: `Reconnecting` until its time passes on tokio's clock, then `OK` — and
/// a reboot overrides it (`Disconnected`, no pending change).
#[test]
fn a_mapping_can_be_reconnecting_for_a_while() {
    let f = fixture();
    let c = ctx();
    f.view
        .global_mapping_create(
            &c,
            &SmbGlobalMappingCreate {
                remote_path: r"\\fs1\data",
                local_path: None,
                user_name: Some(r"CORP\bob"),
                password: PW,
                persistent: None,
                require_privacy: None,
                require_integrity: None,
                use_write_through: None,
                compress_network_traffic: None,
                transport_type: None,
                block_ntlm: None,
            },
        )
        .unwrap();
    let status = || f.view.global_mappings(&ctx()).unwrap()[0].status;
    let later = |secs| tokio::time::Instant::now() + Duration::from_secs(secs);
    f.host
        .with_state_mut(|s| {
            s.set_mapping_status(
                r"\\FS1\Data",
                crate::state::MappingStatus::Reconnecting,
                Some((Duration::from_secs(5), crate::state::MappingStatus::Ok)),
            )
        })
        .unwrap();
    assert_eq!(status(), SmbMappingStatus::Reconnecting);
    assert!(f.view.file_attributes(&c, r"\\fs1\data\hello.txt").is_err());
    // Its time passes (what the host's call path does with tokio's clock at each call).
    f.host.with_state_mut(|s| s.tick(later(6))).unwrap();
    assert_eq!(status(), SmbMappingStatus::Ok);
    assert!(f.view.file_attributes(&c, r"\\fs1\data\hello.txt").is_ok());
    f.host
        .with_state_mut(|s| {
            s.set_mapping_status(
                r"\\fs1\data",
                crate::state::MappingStatus::Reconnecting,
                Some((Duration::from_secs(5), crate::state::MappingStatus::Ok)),
            )
        })
        .unwrap();
    f.host.reboot().unwrap();
    f.host.with_state_mut(|s| s.tick(later(10))).unwrap();
    assert_eq!(status(), SmbMappingStatus::Disconnected);
    assert!(
        f.host
            .with_state_mut(|s| s.set_mapping_status(
                r"\\fs1\none",
                crate::state::MappingStatus::Ok,
                None
            ))
            .is_err()
    );
}

/// `MSFT_iSCSISession.Register` makes a non-persistent session persistent: the initiator logs it back in at boot
/// with the credentials given to `Register`.
#[test]
fn a_session_registered_later_comes_back_after_a_reboot() {
    let f = fixture();
    let c = ctx();
    f.login(false);
    let session = f.view.sessions(&c).unwrap().remove(0);
    assert!(!session.is_persistent);
    let out = f
        .view
        .session_register(
            &c,
            &session.path,
            &winhost::model::RegisterSession {
                is_multipath_enabled: None,
                chap: Some(ChapCredentials {
                    username: "node",
                    secret: CHAP,
                }),
            },
        )
        .unwrap();
    assert!(out.is_success());
    assert!(f.view.sessions(&c).unwrap()[0].is_persistent);
    f.host.reboot().unwrap();
    assert_eq!(f.view.sessions(&c).unwrap().len(), 1, "logged in at boot");
    let audit = serde_json::to_string(&f.host.audit(0)).unwrap();
    assert!(!audit.contains(CHAP));
}

/// The probe again goes through the call path: a fault on a `GetObject`/`ConnectServer` is a probe that could not
/// tell; what the host lacks for good (`with_probe`'s absent classes) stays absent.
#[test]
fn the_probe_runs_again_through_the_call_path() {
    use winhost::codes::HResult;
    use winhost::probe::{Capability, CapabilityState, Namespace, ProbeReport};
    let f = fixture();
    let c = ctx();
    let at_boot = ProbeReport::from_lookup(
        |ns| (ns == Namespace::Smb).then_some(HResult(0x8004_1033)),
        |_, r| {
            if r.class == "MSFT_iSCSITarget" {
                Err(HResult(0x8004_1002))
            } else {
                Ok(vec![])
            }
        },
    );
    let view = f.view.clone().with_probe(at_boot);
    assert_eq!(
        view.probe_report().state(Capability::Smb),
        CapabilityState::ProbeFailed
    );
    f.host
        .fail_nth("GetObject MSFT_Disk", 1, "hresult:0x80041069")
        .unwrap();
    let again = view.reprobe(&c).unwrap();
    assert_eq!(again.state(Capability::Smb), CapabilityState::Present);
    assert_eq!(again.state(Capability::Disks), CapabilityState::ProbeFailed);
    assert_eq!(again.state(Capability::Iscsi), CapabilityState::Absent);
    assert_eq!(view.probe_report(), again, "kept");
    let third = view.reprobe(&c).unwrap();
    assert_eq!(third.state(Capability::Disks), CapabilityState::Present);
    assert!(third.is_settled());
    let names: Vec<String> = f.host.audit(0).into_iter().map(|e| e.rpc).collect();
    assert!(names.contains(&"ConnectServer ROOT\\Microsoft\\Windows\\SMB".to_owned()));
    assert!(
        !names.contains(&"GetObject MSFT_iSCSITarget".to_owned()),
        "absent for good: not asked again"
    );
}

/// The Windows view over a socket answers as in process: objects, outcomes, raised errors with their error
/// objects, the probe report; a hung call makes the client give up at its deadline (`started: true`) or when
/// cancelled, while the server's call runs on.
#[test]
fn the_view_over_a_socket_answers_as_in_process() {
    use winhost::remote::{Address, RemoteHost};
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let addr = Address::Unix(dir.path().join("windows.sock"));
    let server = super::remote::serve(f.view.clone(), &addr).unwrap();
    let remote = RemoteHost::connect(addr.clone()).unwrap();
    let c = ctx();
    assert!(remote.probe_report().is_complete());
    assert_eq!(
        remote.disks(&c, None).unwrap(),
        f.view.disks(&c, None).unwrap()
    );
    let err = remote
        .global_mapping_create(
            &c,
            &SmbGlobalMappingCreate {
                remote_path: r"\\nowhere\x",
                local_path: None,
                user_name: Some(r"CORP\bob"),
                password: PW,
                persistent: None,
                require_privacy: Some(true),
                require_integrity: None,
                use_write_through: None,
                compress_network_traffic: None,
                transport_type: None,
                block_ntlm: None,
            },
        )
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NetworkPathNotFound);
    assert!(err.error_object().is_some());
    assert_eq!(
        remote.global_mappings_of(&c, r"\\fs1\data").unwrap(),
        f.view.global_mappings_of(&c, r"\\fs1\data").unwrap()
    );
    let os = remote.disks(&c, Some(0)).unwrap().remove(0);
    let online = remote.disk_online(&c, &os.path).unwrap();
    assert_eq!(online.method, "MSFT_Disk.Online");
    assert!(online.is_success());
    assert_eq!(
        win32_code(remote.create_directory(&c, r"C:\no\such\parent")),
        3
    );
    // A hung call: the client stops waiting at its deadline, the call having started.
    f.host.hang_nth("SELECT MSFT_Disk", 1).unwrap();
    let short = CallContext::after(Duration::from_millis(300));
    assert_eq!(
        remote.disks(&short, None).unwrap_err(),
        CallError::DeadlineExceeded { started: true }
    );
    f.host.release_hangs();
    f.rt.block_on(f.host.wait_unhung());
    // Cancelled while the server's call hangs: at once, the call having started.
    let token = winhost::CancelToken::new();
    let cancelled = CallContext::after(Duration::from_secs(60)).with_cancel(token.clone());
    f.host.hang_nth("SELECT MSFT_Partition", 1).unwrap();
    let (host, handle) = (f.host.clone(), f.rt.handle().clone());
    let canceller = std::thread::spawn(move || {
        handle.block_on(host.wait_hung(1));
        token.cancel();
    });
    assert_eq!(
        remote.partitions(&cancelled, None).unwrap_err(),
        CallError::Cancelled { started: true }
    );
    canceller.join().unwrap();
    f.host.release_hangs();
    // Not sent at all once past its deadline; a server that is gone is Unavailable.
    let past = CallContext::new(std::time::Instant::now() - Duration::from_millis(1));
    assert_eq!(
        remote.disks(&past, None).unwrap_err(),
        CallError::DeadlineExceeded { started: false }
    );
    server.stop();
    assert_eq!(
        remote.disks(&c, None).unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    // Secrets never reach the audit through the socket either.
    let audit = serde_json::to_string(&f.host.audit(0)).unwrap();
    assert!(!audit.contains(PW));
}

/// The raw read sees a LUN's bytes as the scenario put them (here an ext4 file system a Linux node wrote on the whole
/// device) and the layout Windows gives it: a new LUN reads blank, an initialised one shows its GPT. Initialising the
/// ext4 LUN is a data-loss event and drops the bytes; a disk that is not there cannot be read.
#[test]
fn raw_reads_show_a_luns_bytes_and_its_partition_table() {
    use winhost::signature::{HEAD_BYTES, TAIL_BYTES, examine};
    let f = fixture();
    let c = ctx();
    f.login(false);
    let disk = f.lun_disk();
    let device = disk.device_path.clone().expect("Path");
    let blank = f
        .view
        .read_device(&c, &device, HEAD_BYTES, TAIL_BYTES)
        .unwrap();
    assert_eq!(
        (
            blank.length,
            blank.head.len() as u64,
            blank.tail.len() as u64
        ),
        (1_073_741_824, HEAD_BYTES, TAIL_BYTES)
    );
    assert!(examine(&blank).is_empty());
    f.host
        .with_state_mut(|s| {
            s.replace_lun(
                IQN,
                0,
                &serde_json::from_value(json!({"size": 1_073_741_824u64, "online": true,
                                               "content": [{"signature": "ext4"},
                                                           {"offset": 8, "from_end": true, "hex": "c0ffee"}]}))
                .unwrap(),
            )
        })
        .unwrap();
    let disk = f.lun_disk();
    let device = disk.device_path.clone().expect("Path");
    let ext4 = f
        .view
        .read_device(&c, &device, HEAD_BYTES, TAIL_BYTES)
        .unwrap();
    assert_eq!(&ext4.head[1080..1082], b"\x53\xEF");
    assert_eq!(
        &ext4.tail[TAIL_BYTES as usize - 8..TAIL_BYTES as usize - 5],
        b"\xc0\xff\xee"
    );
    let found = examine(&ext4);
    assert_eq!(found[0].what, "ext2/ext3/ext4 superblock", "{found:?}");
    assert_eq!(f.host.audit(0).last().unwrap().rpc, "ReadFile");

    let init = f
        .view
        .disk_initialize(&c, &disk.path, WmiStyle::Gpt)
        .unwrap();
    assert!(init.is_success(), "{init:?}");
    assert_eq!(f.host.data_loss_events().len(), 1);
    let gpt = f
        .view
        .read_device(&c, &device, HEAD_BYTES, TAIL_BYTES)
        .unwrap();
    let found: Vec<(&str, u64)> = examine(&gpt).iter().map(|f| (f.what, f.offset)).collect();
    assert_eq!(
        found,
        [
            ("MBR/boot sector signature 0x55AA", 510),
            ("GPT header", 512),
            ("backup GPT header", 1_073_741_824 - 512)
        ]
    );
    assert_eq!(
        win32_code(
            f.view
                .read_device(&c, r"\\.\PhysicalDrive77", HEAD_BYTES, TAIL_BYTES)
        ),
        2
    );
}

/// A target the array creates after the portal was added is not in the portal's discovery cache (neither the
/// association nor `MSFT_iSCSITarget` list it, `Connect` cannot find it, `New` on the added portal does not refresh
/// it) until `Update` with the portal's own address and port runs SendTargets; an `Update` naming another portal
/// answers 0xEFFF0043. The audit records the parameters.
#[test]
fn update_with_the_portals_parameters_rediscovers_a_target_created_later() {
    const LATE: &str = "iqn.2026-01.io.wincsi:late";
    let f = fixture();
    let c = ctx();
    f.login(false);
    let spec = serde_json::from_value(
        json!({"iqn": LATE, "luns": [{"lun": 0, "size": 1_073_741_824u64}]}),
    )
    .unwrap();
    f.host
        .with_state_mut(|s| s.add_target("10.0.0.5", 3260, &spec))
        .unwrap();
    let portal = f
        .view
        .target_portals(&c, Some(("10.0.0.5", 3260)))
        .unwrap()
        .remove(0);
    let listed = || {
        f.view
            .portal_targets(&c, &portal.path)
            .unwrap()
            .iter()
            .any(|t| t.node_address == LATE)
    };
    assert!(!listed());
    assert!(
        !f.view
            .targets(&c)
            .unwrap()
            .iter()
            .any(|t| t.node_address == LATE)
    );
    let again = NewTargetPortal {
        target_portal_address: "10.0.0.5",
        target_portal_port_number: 3260,
        initiator_portal_address: None,
        authentication_type: None,
        chap: None,
    };
    assert!(f.view.target_portal_new(&c, &again).unwrap().is_success());
    assert!(
        !listed(),
        "re-adding an added portal keeps its cache (portal_readd_refreshes off)"
    );
    let connect = ConnectTarget {
        node_address: LATE,
        target_portal_address: Some("10.0.0.5"),
        target_portal_port_number: Some(3260),
        initiator_portal_address: None,
        authentication_type: AuthenticationType::None,
        chap: None,
        is_persistent: None,
        is_multipath_enabled: None,
    };
    // The provider answers with the status, or raises it with its error object (both happen; `Ops::method`).
    let connected = f.view.target_connect(&c, &connect);
    assert_eq!(
        connected
            .as_ref()
            .map_or_else(|e| e.iscsi_status(), |out| Some(out.code)),
        Some(IscsiStatus::TargetNotFound),
        "{connected:?}"
    );
    let mut elsewhere = portal.clone();
    elsewhere.target_portal_address = "10.0.0.9".to_owned();
    let updated = f.view.target_portal_update(&c, &elsewhere);
    assert_eq!(
        updated
            .as_ref()
            .map_or_else(|e| e.iscsi_status(), |out| Some(out.code)),
        Some(IscsiStatus::PortalNotFound),
        "{updated:?}"
    );
    assert!(!listed());
    assert!(
        f.view
            .target_portal_update(&c, &portal)
            .unwrap()
            .is_success()
    );
    assert!(listed());
    let update = f
        .host
        .audit(0)
        .into_iter()
        .rfind(|e| e.rpc == "MSFT_iSCSITargetPortal.Update")
        .unwrap();
    assert_eq!(update.args["target_portal_address"], "10.0.0.5");
    assert_eq!(update.args["target_portal_port_number"], 3260);
    assert!(f.view.target_connect(&c, &connect).unwrap().is_success());
}

mod mpio;

/// Per-directory access below a share (`acl`): an account the share lets map it but whose root it may not read gets
/// 5 for the root and reaches its own directory, in the Windows view and through a csi-proxy link alike.
#[test]
fn per_directory_access_refuses_the_root_and_allows_below_it() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tmp");
    let scenario = Scenario::from_json(
        &json!({
            "host": {"directories": [r"C:\var\lib\kubelet\plugins"]},
            "smb": {"servers": [{"name": "fs1",
                "accounts": [{"user": "alice", "password": PW, "domain": "CORP"}],
                "shares": [{"name": "data", "acl": {"": ["bob"], "Team-A": ["alice"]},
                            "files": {"team-a/f.txt": "a", "other/g.txt": "b"}}]}]}
        })
        .to_string(),
    )
    .expect("scenario");
    let host = SimHost::new(&scenario, dir.path(), HostOptions::default()).expect("host");
    let view = WindowsView::with_handle(host.clone(), rt.handle().clone());
    let c = ctx();
    let created = view
        .global_mapping_create(
            &c,
            &SmbGlobalMappingCreate {
                remote_path: r"\\fs1\data",
                local_path: None,
                user_name: Some(r"CORP\alice"),
                password: PW,
                persistent: None,
                require_privacy: Some(true),
                require_integrity: None,
                use_write_through: None,
                compress_network_traffic: None,
                transport_type: None,
                block_ntlm: None,
            },
        )
        .unwrap();
    assert!(
        created.is_success(),
        "the share's own permission lets alice map it"
    );
    assert_eq!(win32_code(view.file_attributes(&c, r"\\fs1\data\")), 5);
    assert_eq!(
        win32_code(view.file_attributes(&c, r"\\fs1\data\other\g.txt")),
        5
    );
    assert!(view.file_attributes(&c, r"\\fs1\data\team-a\f.txt").is_ok());
    // Through a link, csi-proxy's `IsSymlink` (Lstat of the link's target) reaches the directory alice may use.
    let link = format!(r"{K}\plugins\l");
    view.create_symbolic_link(&c, &link, r"\\fs1\data\team-a", SymlinkFlags::DIRECTORY)
        .unwrap();
    assert!(host.with_state(|s| s.is_symlink(&link)).unwrap());
}

#[test]
fn a_killed_process_s_calls_never_reach_the_host_and_its_running_call_finishes() {
    let f = fixture();
    f.host.with_state_mut(|s| s.mkdir(K)).unwrap();
    // A call of the process is running (held) when the process is killed.
    f.host.hang_nth("CreateDirectoryW", 1).unwrap();
    let view = f.view.clone();
    let t = std::thread::spawn(move || {
        let c = ctx();
        let first = view.create_directory(&c, &format!(r"{K}\before"));
        // The next step of the dead process's sequence.
        (first, view.create_directory(&c, &format!(r"{K}\after")))
    });
    f.rt.block_on(f.host.wait_hung(1));
    f.view.kill();
    let audited = f.host.audit(0).len();
    f.host.release_hangs();
    let (first, next) = t.join().unwrap();
    // The running call finished on the host; the next was refused before it (never started, not audited).
    first.unwrap();
    assert_eq!(next.unwrap_err(), CallError::Cancelled { started: false });
    let audit: Vec<String> = f.host.audit(0).into_iter().map(|e| e.rpc).collect();
    assert_eq!(
        audit[audited..],
        ["CreateDirectoryW"],
        "the running call only"
    );
    let exists = |p: &str| {
        f.host
            .with_state(|s| s.path_exists(&format!(r"{K}\{p}")).unwrap())
    };
    assert!(exists("before"));
    assert!(!exists("after"));
    // Clones share the kill; a new view of the host (the restarted process) calls as before.
    assert!(f.view.clone().disks(&ctx(), None).is_err());
    let fresh = WindowsView::with_handle(f.host.clone(), f.rt.handle().clone());
    assert!(!fresh.disks(&ctx(), None).unwrap().is_empty());
}
