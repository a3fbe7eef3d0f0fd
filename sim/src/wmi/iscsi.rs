//! The iSCSI initiator classes over the host model (Microsoft's "iSCSI Initiator WMI Classes"; reference §2.5).
//!
//! The model's portals, discovery, targets, CHAP checks (node-wide mutual secret included), sessions and LUN disks
//! are the ones the csi-proxy view drives; what differs is Windows' own answer: a status code (iscsierr.h) raised
//! with the failed call's `MSFT_WmiError` (default: `HRESULT 0xefff0029,Connect-IscsiTarget` is what PowerShell
//! shows, reference §2.5; [`super::raised`]), or, with `host.behaviour.wmi_failures = return_value`, as the method's
//! `ReturnValue` (the exact channel is **unverified**: reference §1.4; the native backend reads both). Unlike csi-proxy, this face can add a
//! portal with discovery CHAP and log in persistently (reference §3).

use serde_json::json;
use winhost::codes::IscsiStatus;
use winhost::facade::IscsiOutcome;
use winhost::model::{
    AuthenticationType, ConnectTarget, MsftDisk, MsftInitiatorPort, MsftIscsiConnection,
    MsftIscsiSession, MsftIscsiTarget, MsftIscsiTargetPortal, NewTargetPortal, RegisterSession,
};
use winhost::{CallContext, CallResult, IscsiWmi, MethodOutcome, ObjectPath};

use super::objects::{
    INITIATOR_IQN, connection_of, msft_connection, msft_disk, msft_portal, msft_session,
    msft_target, portal_of, session_of, target_of,
};
use super::{WindowsView, bad_path, not_found};
use crate::profile::WmiFailureReport;
use crate::profile::texts::LoginFailure;
use crate::secret::Secret;
use crate::state::iscsi::{chap_secret_len_ok, port_or_default};
use crate::state::{AuthType, DiskSource, State};

/// How a failed SMB or iSCSI provider method reports itself to the Windows view: `host.behaviour.wmi_failures` when
/// set, else raised with its error object (what PowerShell's `CimException`s for these providers show: a
/// `FullyQualifiedErrorId` of `Windows System Error N` or `HRESULT 0xefff….`, the error object's `MessageID`). The
/// csi-proxy release played does not matter here (it only decides how csi-proxy's library reads the same answer).
pub(crate) fn report(st: &State) -> WmiFailureReport {
    st.behaviour
        .wmi_failures
        .unwrap_or(WmiFailureReport::Exception)
}

/// A failed iSCSI method, as the host reports it (module docs).
fn failed<T: Default>(
    st: &State,
    method: &'static str,
    status: IscsiStatus,
) -> CallResult<IscsiOutcome<T>> {
    match report(st) {
        WmiFailureReport::Exception => Err(super::raised(
            method,
            status.code(),
            "HRESULT",
            status.meaning().unwrap_or("iSCSI initiator error"),
        )),
        WmiFailureReport::ReturnValue => Ok(MethodOutcome::new(method, status, None, T::default())),
    }
}

/// The portal `portal`'s instance names, for a method that takes the portal's own address and port as parameters
/// (`Update`, `Remove`); `None` when they name another portal (the caller answers 0xEFFF0043 `PORTAL_NOT_FOUND`).
fn own_portal(
    st: &State,
    call: &'static str,
    portal: &MsftIscsiTargetPortal,
) -> CallResult<Option<usize>> {
    let pi = portal_of(st, &portal.path)
        .ok_or_else(|| bad_path(call))?
        .ok_or_else(|| not_found(call))?;
    let p = &st.portals[pi];
    let port = port_or_default(u32::from(portal.target_portal_port_number));
    Ok((p
        .address
        .eq_ignore_ascii_case(&portal.target_portal_address)
        && p.port == port)
        .then_some(pi))
}

fn ok<T>(method: &'static str, output: T) -> CallResult<IscsiOutcome<T>> {
    Ok(MethodOutcome::new(
        method,
        IscsiStatus::Success,
        None,
        output,
    ))
}

fn auth_type(a: AuthenticationType) -> AuthType {
    match a {
        AuthenticationType::None => AuthType::None,
        AuthenticationType::OneWayChap => AuthType::OneWayChap,
        AuthenticationType::MutualChap => AuthType::MutualChap,
    }
}

/// The iSCSI status of a failed login check (iscsierr.h).
fn login_status(why: LoginFailure) -> IscsiStatus {
    match why {
        LoginFailure::BadChapSecret => IscsiStatus::InvalidChapSecret,
        LoginFailure::TargetNotFound => IscsiStatus::TargetNotFound,
        LoginFailure::AlreadyLoggedIn => IscsiStatus::TargetAlreadyLoggedIn,
        LoginFailure::ConnectionFailed => IscsiStatus::ConnectionFailed,
        _ => IscsiStatus::AuthenticationFailure,
    }
}

/// The discovered targets of added portals, IQNs in the array's spelling, each once.
fn discovered(st: &State) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in st.portals.iter().filter(|p| p.added) {
        for t in &p.targets {
            if p.discovered.contains(&t.iqn.to_lowercase())
                && !out.iter().any(|i| i.eq_ignore_ascii_case(&t.iqn))
            {
                out.push(t.iqn.clone());
            }
        }
    }
    out
}

/// Present disks of the target `iqn`'s LUNs.
fn target_disks(st: &State, iqn: &str) -> Vec<MsftDisk> {
    st.disks
        .iter()
        .filter(|d| {
            d.present()
                && matches!(&d.source, DiskSource::Iscsi { iqn: of, .. } if of.eq_ignore_ascii_case(iqn))
        })
        .map(msft_disk)
        .collect()
}

impl IscsiWmi for WindowsView {
    /// Added portals; the address compared ignoring case (WQL; **unverified** for this provider, README
    /// assumption 4).
    fn target_portals(
        &self,
        ctx: &CallContext,
        portal: Option<(&str, u16)>,
    ) -> CallResult<Vec<MsftIscsiTargetPortal>> {
        let args = json!({ "portal": portal.map(|(a, p)| format!("{a}:{p}")) });
        self.call(ctx, "SELECT MSFT_iSCSITargetPortal", args, |st| {
            Ok(st
                .portals
                .iter()
                .filter(|p| p.added)
                .filter(|p| {
                    portal.is_none_or(|(a, port)| {
                        p.address.eq_ignore_ascii_case(a)
                            && p.port == port_or_default(u32::from(port))
                    })
                })
                .map(|p| msft_portal(&p.address, p.port))
                .collect())
        })
    }

    /// `New(…)`: contacts the portal (0xEFFF0003 `CONNECTION_FAILED` for an unknown address), authenticates
    /// discovery when the portal requires it (0xEFFF0009 `AUTHENTICATION_FAILURE` without the right one-way CHAP
    /// credentials, 0xEFFF004A for a secret outside 12-16 bytes) and discovers its targets. Adding a portal that is
    /// already there succeeds (democratic-csi treats `New-IscsiTargetPortal` as idempotent; **unverified** whether
    /// WMI answers 0xEFFF0032 instead) and leaves its discovery cache as it is unless `portal_readd_refreshes`
    /// (**unverified**, row `discovery_refresh`).
    fn target_portal_new(
        &self,
        ctx: &CallContext,
        params: &NewTargetPortal<'_>,
    ) -> CallResult<IscsiOutcome<Option<MsftIscsiTargetPortal>>> {
        const CALL: &str = "MSFT_iSCSITargetPortal.New";
        let args = json!({
            "address": params.target_portal_address,
            "port": params.target_portal_port_number,
            "authentication_type": params.authentication_type.map(AuthenticationType::as_wmi),
            "chap_username": params.chap.map(|c| c.username),
        });
        self.method(ctx, CALL, args, |st| {
            let port = port_or_default(u32::from(params.target_portal_port_number));
            let Some(pi) = st.portals.iter().position(|p| {
                p.address.eq_ignore_ascii_case(params.target_portal_address)
                    && p.port == port
                    && (p.reachable || p.added)
            }) else {
                return failed(st, CALL, IscsiStatus::ConnectionFailed);
            };
            let p = &st.portals[pi];
            if !p.added {
                if let Some((user, secret)) = &p.discovery_credentials {
                    let Some(chap) = params.chap else {
                        return failed(st, CALL, IscsiStatus::AuthenticationFailure);
                    };
                    if !chap_secret_len_ok(chap.secret) {
                        return failed(st, CALL, IscsiStatus::InvalidChapSecret);
                    }
                    if params.authentication_type == Some(AuthenticationType::None)
                        || chap.username != user
                        || chap.secret != secret.expose()
                    {
                        return failed(st, CALL, IscsiStatus::AuthenticationFailure);
                    }
                }
                st.portals[pi].added = true;
                st.portals[pi].added_with = params
                    .chap
                    .filter(|_| params.authentication_type != Some(AuthenticationType::None))
                    .map(|c| (c.username.to_owned(), Secret::new(c.secret)));
                st.send_targets(pi);
            } else if st.behaviour.portal_readd_refreshes && st.portals[pi].reachable {
                st.send_targets(pi);
            }
            let p = &st.portals[pi];
            ok(CALL, Some(msft_portal(&p.address, p.port)))
        })
    }

    /// `Update(InitiatorInstanceName, InitiatorPortalAddress, TargetPortalAddress, TargetPortalPortNumber)` on the
    /// portal's instance: SendTargets again, so targets the array created since appear (Microsoft's `Update` page;
    /// `Update-IscsiTargetPortal` "refreshes cached information about an iSCSI target portal"). The portal's own
    /// address and port must come as parameters: without them (or naming another portal) 0xEFFF0043
    /// `PORTAL_NOT_FOUND` (**unverified**: what the provider does without the documented parameters is unknown;
    /// the facade passes them, and the audit records them).
    fn target_portal_update(
        &self,
        ctx: &CallContext,
        portal: &MsftIscsiTargetPortal,
    ) -> CallResult<IscsiOutcome> {
        const CALL: &str = "MSFT_iSCSITargetPortal.Update";
        let args = json!({
            "portal": portal.path.as_str(),
            "target_portal_address": portal.target_portal_address,
            "target_portal_port_number": portal.target_portal_port_number,
            "initiator_instance_name": portal.initiator_instance_name,
            "initiator_portal_address": portal.initiator_portal_address,
        });
        self.method(ctx, CALL, args, |st| {
            let Some(pi) = own_portal(st, CALL, portal)? else {
                return failed(st, CALL, IscsiStatus::PortalNotFound);
            };
            if !st.portals[pi].reachable {
                return failed(st, CALL, IscsiStatus::ConnectionFailed);
            }
            let p = &st.portals[pi];
            // SendTargets presents the discovery CHAP the portal was added with; an array that now wants other
            // credentials refuses it as a login would be (**unverified**: real-node check N31).
            if let Some((user, secret)) = &p.discovery_credentials
                && p.added_with
                    .as_ref()
                    .is_none_or(|(u, s)| u != user || s.expose() != secret.expose())
            {
                return failed(st, CALL, IscsiStatus::AuthenticationFailure);
            }
            st.send_targets(pi);
            ok(CALL, ())
        })
    }

    /// `Remove(…)` with the portal's own parameters (as `Update`): the portal, its discovery cache and the CHAP it
    /// was added with go; sessions stay. 0xEFFF0043 `PORTAL_NOT_FOUND` for parameters naming another portal.
    fn target_portal_remove(
        &self,
        ctx: &CallContext,
        portal: &MsftIscsiTargetPortal,
    ) -> CallResult<IscsiOutcome> {
        const CALL: &str = "MSFT_iSCSITargetPortal.Remove";
        let args = json!({
            "portal": portal.path.as_str(),
            "target_portal_address": portal.target_portal_address,
            "target_portal_port_number": portal.target_portal_port_number,
        });
        self.method(ctx, CALL, args, |st| {
            let Some(pi) = own_portal(st, CALL, portal)? else {
                return failed(st, CALL, IscsiStatus::PortalNotFound);
            };
            let p = &mut st.portals[pi];
            p.added = false;
            p.added_with = None;
            p.discovered.clear();
            ok(CALL, ())
        })
    }

    fn portal_targets(
        &self,
        ctx: &CallContext,
        portal: &ObjectPath,
    ) -> CallResult<Vec<MsftIscsiTarget>> {
        const CALL: &str = "ASSOCIATORS MSFT_iSCSITargetToiSCSITargetPortal->MSFT_iSCSITarget";
        self.call(ctx, CALL, json!({ "portal": portal.as_str() }), |st| {
            let pi = portal_of(st, portal)
                .ok_or_else(|| bad_path(CALL))?
                .ok_or_else(|| not_found(CALL))?;
            let p = &st.portals[pi];
            Ok(p.targets
                .iter()
                .filter(|t| p.discovered.contains(&t.iqn.to_lowercase()))
                .map(|t| msft_target(st, &t.iqn))
                .collect())
        })
    }

    fn targets(&self, ctx: &CallContext) -> CallResult<Vec<MsftIscsiTarget>> {
        self.call(ctx, "SELECT MSFT_iSCSITarget", json!({}), |st| {
            Ok(discovered(st).iter().map(|i| msft_target(st, i)).collect())
        })
    }

    /// `Connect(…)`: the target must be discovered (0xEFFF0029 `TARGET_NOT_FOUND`; `NodeAddress` compared ignoring
    /// case: IQNs are case-insensitive, RFC 3720 §3.2.6.1), through the given portal when one is named; a target
    /// with a session answers 0xEFFF003F `TARGET_ALREADY_LOGGED_IN` (the PowerShell-era csi-proxy shows this text,
    /// reference D1); CHAP as the model checks it. `IsPersistent` keeps a login record the initiator service logs in
    /// again at every boot until `Unregister`.
    fn target_connect(
        &self,
        ctx: &CallContext,
        params: &ConnectTarget<'_>,
    ) -> CallResult<IscsiOutcome<Option<MsftIscsiSession>>> {
        const CALL: &str = "MSFT_iSCSITarget.Connect";
        let args = json!({
            "node_address": params.node_address,
            "portal": params.target_portal_address.map(|a| format!("{a}:{}", params.target_portal_port_number.unwrap_or(3260))),
            "authentication_type": params.authentication_type.as_wmi(),
            "chap_username": params.chap.map(|c| c.username),
            "is_persistent": params.is_persistent,
        });
        self.method(ctx, CALL, args, |st| {
            let port = params
                .target_portal_port_number
                .map(|p| port_or_default(u32::from(p)));
            let found = st.portals.iter().enumerate().find_map(|(pi, p)| {
                let through = p.added
                    && params
                        .target_portal_address
                        .is_none_or(|a| p.address.eq_ignore_ascii_case(a))
                    && port.is_none_or(|port| p.port == port);
                through
                    .then(|| {
                        p.targets.iter().position(|t| {
                            t.iqn.eq_ignore_ascii_case(params.node_address)
                                && p.discovered.contains(&t.iqn.to_lowercase())
                        })
                    })
                    .flatten()
                    .map(|ti| (pi, ti))
            });
            let Some((pi, ti)) = found else {
                return failed(st, CALL, IscsiStatus::TargetNotFound);
            };
            let iqn = st.portals[pi].targets[ti].iqn.clone();
            if st.sessions.iter().any(|s| s.iqn.eq_ignore_ascii_case(&iqn)) {
                return failed(st, CALL, IscsiStatus::TargetAlreadyLoggedIn);
            }
            let auth = auth_type(params.authentication_type);
            let (user, secret) = match params.chap {
                Some(c) => (c.username.to_owned(), Secret::new(c.secret)),
                None => (String::new(), Secret::new("")),
            };
            if !st.portals[pi].reachable {
                return failed(st, CALL, IscsiStatus::ConnectionFailed);
            }
            let target = st.portals[pi].targets[ti].clone();
            if let Err(why) = st.check_login(&target, auth, &user, &secret) {
                return failed(st, CALL, login_status(why));
            }
            let port = st.portals[pi].port;
            let persistent = params.is_persistent == Some(true);
            let session = st.log_in(pi, ti, port, auth, &user, &secret, persistent);
            st.sync_links()
                .map_err(|e| super::win32(CALL, "", super::storage::io_code(&e)))?;
            ok(CALL, Some(msft_session(&session)))
        })
    }

    /// `Disconnect(SessionIdentifier)`: the session ends and its disks vanish; an unknown session answers
    /// 0xEFFF000B `NOT_FOUND`. A persistent session's login record stays unless `Unregister` ran first
    /// (reference §3: "always remove the persistent record on unstage"). A disk in use (0xEFFF0040) is not
    /// modelled: csi-proxy's view does not model it either, and the driver unmounts first.
    fn target_disconnect(
        &self,
        ctx: &CallContext,
        target: &ObjectPath,
        session_identifier: &str,
    ) -> CallResult<IscsiOutcome> {
        const CALL: &str = "MSFT_iSCSITarget.Disconnect";
        let args = json!({ "target": target.as_str(), "session_identifier": session_identifier });
        self.method(ctx, CALL, args, |st| {
            let iqn = target_of(target).ok_or_else(|| bad_path(CALL))?;
            let Some(si) = st.sessions.iter().position(|s| {
                s.session_identifier == session_identifier && s.iqn.eq_ignore_ascii_case(iqn)
            }) else {
                return failed(st, CALL, IscsiStatus::NotFound);
            };
            let s = st.sessions.remove(si);
            crate::state::iscsi::detach_session_disks(st, &s);
            st.sync_links()
                .map_err(|e| super::win32(CALL, "", super::storage::io_code(&e)))?;
            ok(CALL, ())
        })
    }

    fn target_sessions(
        &self,
        ctx: &CallContext,
        target: &ObjectPath,
    ) -> CallResult<Vec<MsftIscsiSession>> {
        const CALL: &str = "ASSOCIATORS MSFT_iSCSITargetToiSCSISession->MSFT_iSCSISession";
        self.call(ctx, CALL, json!({ "target": target.as_str() }), |st| {
            let iqn = target_of(target).ok_or_else(|| bad_path(CALL))?;
            Ok(st
                .sessions
                .iter()
                .filter(|s| s.iqn.eq_ignore_ascii_case(iqn))
                .map(msft_session)
                .collect())
        })
    }

    fn sessions(&self, ctx: &CallContext) -> CallResult<Vec<MsftIscsiSession>> {
        self.call(ctx, "SELECT MSFT_iSCSISession", json!({}), |st| {
            Ok(st.sessions.iter().map(msft_session).collect())
        })
    }

    /// The session's LUN disks that have arrived (Microsoft notes the association may be missing when the
    /// clustered storage subsystem claims the disks: not modelled).
    fn session_disks(&self, ctx: &CallContext, session: &ObjectPath) -> CallResult<Vec<MsftDisk>> {
        const CALL: &str = "ASSOCIATORS MSFT_iSCSISessionToDisk->MSFT_Disk";
        self.call(ctx, CALL, json!({ "session": session.as_str() }), |st| {
            let si = session_of(st, session)
                .ok_or_else(|| bad_path(CALL))?
                .ok_or_else(|| not_found(CALL))?;
            Ok(target_disks(st, &st.sessions[si].iqn))
        })
    }

    fn target_connections(
        &self,
        ctx: &CallContext,
        target: &ObjectPath,
    ) -> CallResult<Vec<MsftIscsiConnection>> {
        const CALL: &str = "ASSOCIATORS MSFT_iSCSITargetToiSCSIConnection->MSFT_iSCSIConnection";
        self.call(ctx, CALL, json!({ "target": target.as_str() }), |st| {
            let iqn = target_of(target).ok_or_else(|| bad_path(CALL))?;
            Ok(st
                .sessions
                .iter()
                .filter(|s| s.iqn.eq_ignore_ascii_case(iqn))
                .map(msft_connection)
                .collect())
        })
    }

    fn connection_disks(
        &self,
        ctx: &CallContext,
        connection: &ObjectPath,
    ) -> CallResult<Vec<MsftDisk>> {
        const CALL: &str = "ASSOCIATORS MSFT_iSCSIConnectionToDisk->MSFT_Disk";
        self.call(
            ctx,
            CALL,
            json!({ "connection": connection.as_str() }),
            |st| {
                let si = connection_of(st, connection)
                    .ok_or_else(|| bad_path(CALL))?
                    .ok_or_else(|| not_found(CALL))?;
                Ok(target_disks(st, &st.sessions[si].iqn))
            },
        )
    }

    /// `Unregister()`: drops the persistent login record; a session without one answers 0xEFFF000B (**unverified**:
    /// the page documents no code).
    fn session_unregister(
        &self,
        ctx: &CallContext,
        session: &ObjectPath,
    ) -> CallResult<IscsiOutcome> {
        const CALL: &str = "MSFT_iSCSISession.Unregister";
        self.method(ctx, CALL, json!({ "session": session.as_str() }), |st| {
            let si = session_of(st, session)
                .ok_or_else(|| bad_path(CALL))?
                .ok_or_else(|| not_found(CALL))?;
            if !st.sessions[si].persistent {
                return failed(st, CALL, IscsiStatus::NotFound);
            }
            st.sessions[si].persistent = false;
            let iqn = st.sessions[si].iqn.clone();
            st.persistent_logins
                .retain(|p| !p.iqn.eq_ignore_ascii_case(&iqn));
            ok(CALL, ())
        })
    }

    /// `Register(IsMultipathEnabled, ChapUsername, ChapSecret)`: the session becomes persistent — a login record the
    /// initiator replays at boot, with the CHAP credentials given here and the session's authentication type
    /// (Microsoft's *Register method of the MSFT_iSCSISession class*). Registering a persistent session again
    /// replaces its record (**unverified**: the page lists no "already registered" code).
    fn session_register(
        &self,
        ctx: &CallContext,
        session: &ObjectPath,
        params: &RegisterSession<'_>,
    ) -> CallResult<IscsiOutcome> {
        const CALL: &str = "MSFT_iSCSISession.Register";
        let args = json!({
            "session": session.as_str(),
            "chap_username": params.chap.map(|c| c.username),
            "chap_secret": params.chap.map(|_| crate::REDACTED),
            "is_multipath_enabled": params.is_multipath_enabled,
        });
        self.method(ctx, CALL, args, |st| {
            let si = session_of(st, session)
                .ok_or_else(|| bad_path(CALL))?
                .ok_or_else(|| not_found(CALL))?;
            let mut record = st.sessions[si].clone();
            record.chap_username = params
                .chap
                .map(|c| c.username.to_owned())
                .unwrap_or_default();
            record.chap_secret = Secret::new(params.chap.map(|c| c.secret).unwrap_or(""));
            record.persistent = true;
            st.sessions[si].persistent = true;
            st.persistent_logins
                .retain(|p| !p.iqn.eq_ignore_ascii_case(&record.iqn));
            st.persistent_logins.push(record);
            ok(CALL, ())
        })
    }

    /// `SetCHAPSecret(ChapSecret)`: the node-wide mutual secret; 0xEFFF004C `INVALID_INITIATOR_CHAP_SECRET` outside
    /// 12-16 bytes (reference §2.5); empty clears it.
    fn set_chap_secret(&self, ctx: &CallContext, secret: &str) -> CallResult<IscsiOutcome> {
        const CALL: &str = "MSFT_iSCSISession.SetCHAPSecret";
        self.method(ctx, CALL, json!({ "chap_secret": crate::REDACTED }), |st| {
            if !secret.is_empty() && !chap_secret_len_ok(secret) {
                return failed(st, CALL, IscsiStatus::InvalidInitiatorChapSecret);
            }
            st.mutual_chap_secret = (!secret.is_empty()).then(|| Secret::new(secret));
            ok(CALL, ())
        })
    }

    fn initiator_ports(&self, ctx: &CallContext) -> CallResult<Vec<MsftInitiatorPort>> {
        self.call(ctx, "SELECT MSFT_InitiatorPort", json!({}), |_| {
            Ok(vec![MsftInitiatorPort {
                path: ObjectPath::new(format!(
                    r#"MSFT_InitiatorPort.NodeAddress="{INITIATOR_IQN}""#
                )),
                node_address: Some(INITIATOR_IQN.to_owned()),
                instance_name: Some("ROOT\\ISCSIPRT\\0000_0".to_owned()),
                connection_type: Some(1),
            }])
        })
    }
}
