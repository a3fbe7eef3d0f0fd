//! The iSCSI initiator over the `MSFT_iSCSI*` classes (reference §2.5, §3): portals with discovery CHAP, the portal's
//! cached targets and their rediscovery (`Update` with its documented parameters), logins (persistent when asked,
//! also for a target that already has a session), logouts of the sessions this driver made, the target's disks
//! through its sessions. A tolerated status ("already logged in", "not found" on logout) counts whether the provider
//! returns it or raises it with its error object (`Ops::method`).
//!
//! # Whose session it is
//!
//! A session has no owner field, so what the driver knows is recorded, in two durable ledgers in the state directory
//! (keyed by the target's lower-cased name, so a persistent login that comes back after a reboot as a new session is
//! still known):
//! - [`SESSION_LEDGER_FILE`]: targets whose session this driver made — written **before** `Connect`, cleared after
//!   the logout, after a `Connect` that definitely failed, or after one that found the target logged in meanwhile;
//! - [`JOINED_LEDGER_FILE`]: targets that already had a session, made by someone else (an administrator's login,
//!   another initiator tool, another driver's volume), when the driver came to them and joined it — found by the
//!   look before `Connect`, or by a `Connect` that answered "already logged in" (a login between the look and it).
//!
//! `DisconnectTarget` leaves a joined target's sessions in place (review L3: it used to log out every session of the
//! target, cutting the other user's I/O) and logs out the others: the driver's own, and those it has no record of —
//! a login csi-proxy made for the driver before the node moved to HostProcess mode, or one the driver's adoption of
//! a volume without a record judged to be that volume's (`iscsi/adopt.rs`), as csi-proxy's `DisconnectTarget` does.

use winhost::codes::IscsiStatus;
use winhost::model::{
    AuthenticationType, ChapCredentials, ConnectTarget, MsftIscsiConnection, MsftIscsiTarget,
    MsftIscsiTargetPortal, NewTargetPortal, RegisterSession,
};

use super::{HostErrorKind, HostResult, IscsiAuth, MpioClaim, Ops, Portal, TargetPath};

/// The ledger of the targets whose sessions the native backend made, in the state directory (module docs).
pub const SESSION_LEDGER_FILE: &str = "native-iscsi-sessions.json";

/// The ledger of the targets whose sessions someone else made and the native backend joined (module docs).
pub const JOINED_LEDGER_FILE: &str = "native-iscsi-joined.json";

/// A target's key in the session ledger: IQNs compare ignoring case (reference D9).
fn session_key(iqn: &str) -> String {
    iqn.to_ascii_lowercase()
}

fn ledger_error(o: &Ops<'_>, e: std::io::Error) -> super::HostError {
    o.fail(
        HostErrorKind::Other,
        format!("cannot record the iSCSI session in the driver's ledger: {e}"),
    )
}

fn credentials(auth: &IscsiAuth) -> (AuthenticationType, Option<ChapCredentials<'_>>) {
    match auth {
        IscsiAuth::None => (AuthenticationType::None, None),
        IscsiAuth::OneWay { username, secret } => (
            AuthenticationType::OneWayChap,
            Some(ChapCredentials {
                username,
                secret: secret.expose(),
            }),
        ),
        IscsiAuth::Mutual { username, secret } => (
            AuthenticationType::MutualChap,
            Some(ChapCredentials {
                username,
                secret: secret.expose(),
            }),
        ),
    }
}

/// `AddTargetPortal`: `New` (with discovery CHAP when given, reference §3) when the portal is not there; nothing when
/// it is (csi-proxy's check) — unless discovery CHAP is given, see [`discovery_chap_applies`].
pub(super) fn add_portal(o: &Ops<'_>, portal: &Portal, discovery: &IscsiAuth) -> HostResult<()> {
    let existing =
        o.w.target_portals(o.c, Some((&portal.address, portal.port)))
            .map_err(|e| o.err(e))?;
    if let Some(p) = existing.into_iter().next() {
        if matches!(discovery, IscsiAuth::None) {
            return Ok(());
        }
        return discovery_chap_applies(o, portal, &p, discovery);
    }
    new_portal(o, portal, discovery)
}

/// Discovery CHAP given for a portal already added (by another volume, an administrator, or before the array's
/// discovery credentials changed). Windows keeps the CHAP a portal was added with and its SendTargets (`Update`)
/// presents it; no `Update` parameter carries CHAP, and whether `New` on an added portal replaces it is unverified
/// (real-node check N31; the simulated host keeps it). So when no target listed through the portal is connected, the
/// portal's discovery is tried (`Update`, which also lists targets the array added since): if its credentials are
/// refused, the portal is removed and added again with the volume's. A portal that sessions use is left as it is
/// (its discovery worked), and one whose discovery works keeps its credentials.
fn discovery_chap_applies(
    o: &Ops<'_>,
    portal: &Portal,
    added: &MsftIscsiTargetPortal,
    discovery: &IscsiAuth,
) -> HostResult<()> {
    let targets = o.w.portal_targets(o.c, &added.path).map_err(|e| o.err(e))?;
    if targets.iter().any(|t| t.is_connected) {
        return Ok(());
    }
    match update(o, added) {
        Err(e) if e.kind == HostErrorKind::LogonFailure => {
            tracing::info!(
                %portal,
                "the portal's discovery CHAP is refused: adding it again with the volume's discovery CHAP"
            );
            let out = o.w.target_portal_remove(o.c, added).map_err(|e| o.err(e))?;
            o.accept(out, &[])?;
            new_portal(o, portal, discovery)
        }
        other => other,
    }
}

/// `MSFT_iSCSITargetPortal.New` ("already exists", returned or raised, counts as added).
fn new_portal(o: &Ops<'_>, portal: &Portal, discovery: &IscsiAuth) -> HostResult<()> {
    let (auth, chap) = credentials(discovery);
    let params = NewTargetPortal {
        target_portal_address: &portal.address,
        target_portal_port_number: portal.port,
        initiator_portal_address: None,
        authentication_type: chap.map(|_| auth),
        chap,
    };
    o.method(
        o.w.target_portal_new(o.c, &params),
        &[IscsiStatus::TargetPortalAlreadyExists],
    )
    .map(|_| ())
}

/// The added portal `portal` (NotFound when it is not added).
fn added(o: &Ops<'_>, portal: &Portal) -> HostResult<MsftIscsiTargetPortal> {
    o.w.target_portals(o.c, Some((&portal.address, portal.port)))
        .map_err(|e| o.err(e))?
        .into_iter()
        .next()
        .ok_or_else(|| {
            o.fail(
                HostErrorKind::NotFound,
                format!("target portal {portal} is not added on this node"),
            )
        })
}

/// `MSFT_iSCSITargetPortal.Update` with the portal's own parameters (`Update-IscsiTargetPortal`): SendTargets again.
fn update(o: &Ops<'_>, p: &MsftIscsiTargetPortal) -> HostResult<()> {
    let out = o.w.target_portal_update(o.c, p).map_err(|e| o.err(e))?;
    o.accept(out, &[])
}

/// `DiscoverTargetPortal`: the targets Windows has cached for the portal (`MSFT_iSCSITargetToiSCSITargetPortal`),
/// spelled as they report themselves. Like csi-proxy's, it only reads the cache: a target the array created after the
/// portal was added is listed after [`refresh`].
pub(super) fn discover(o: &Ops<'_>, portal: &Portal) -> HostResult<Vec<String>> {
    let p = added(o, portal)?;
    let targets = o.w.portal_targets(o.c, &p.path).map_err(|e| o.err(e))?;
    Ok(targets.into_iter().map(|t| t.node_address).collect())
}

/// `RefreshTargetPortal`: `Update` on the added portal, so its cache lists what the array has now.
pub(super) fn refresh(o: &Ops<'_>, portal: &Portal) -> HostResult<()> {
    let p = added(o, portal)?;
    update(o, &p)
}

/// The discovered target `iqn` (compared ignoring case: IQNs are case-insensitive; reference D9), if any.
fn find(targets: Vec<MsftIscsiTarget>, iqn: &str) -> Option<MsftIscsiTarget> {
    targets
        .into_iter()
        .find(|t| t.node_address.eq_ignore_ascii_case(iqn))
}

/// `ConnectTarget`: find the target through the portal (rediscover once with `Update` when it is not there); when it
/// already has a session (through any portal; with `multipath`, through this portal: `MSFT_iSCSIConnection`'s
/// `TargetAddress`) nothing more — except that a persistent login asked for is made so: a session that is not
/// persistent yet is `Register`ed (with the login's CHAP credentials, which the initiator replays at boot); else
/// `Connect` ("already logged in", returned or raised, counts as logged in), with `IsMultipathEnabled` for a
/// multipath login, which Windows needs to make a further session of a target (VDS `VDS_ILF_MULTIPATH_ENABLED`).
/// The session ledgers follow the target's first session: a further path of a target this driver logged in to is
/// its own; one added to someone else's sessions leaves the target joined (its sessions stay at logout).
pub(super) fn connect(
    o: &Ops<'_>,
    portal: &Portal,
    iqn: &str,
    auth: &IscsiAuth,
    persistent: bool,
    multipath: bool,
) -> HostResult<()> {
    let p = added(o, portal)?;
    let mut target = find(o.w.portal_targets(o.c, &p.path).map_err(|e| o.err(e))?, iqn);
    if target.is_none() {
        update(o, &p)?;
        target = find(o.w.portal_targets(o.c, &p.path).map_err(|e| o.err(e))?, iqn);
    }
    let target = target.ok_or_else(|| {
        o.fail(
            HostErrorKind::NotFound,
            format!("target {iqn} is not discovered through {portal}"),
        )
    })?;
    let (auth_type, chap) = credentials(auth);
    let key = session_key(&target.node_address);
    let logged_in_here = if multipath && target.is_connected {
        has_path(o, &target, portal)?
    } else {
        target.is_connected
    };
    if logged_in_here {
        if !o.sessions.contains(&key) && !o.joined.contains(&key) {
            tracing::info!(
                iqn = %target.node_address,
                "joining a session of the target that wincsi did not make: it is left in place at unstage"
            );
            o.joined.set(&key, true).map_err(|e| ledger_error(o, e))?;
        }
        if persistent {
            make_persistent(o, &target, chap)?;
        }
        return Ok(());
    }
    // The target's first session: recorded before the login, so a crash after it over-counts (wincsi logs out a
    // session it may have made), never under-counts. A further path keeps what the first one recorded.
    let first = !target.is_connected;
    if first {
        o.sessions.set(&key, true).map_err(|e| ledger_error(o, e))?;
        o.joined.set(&key, false).map_err(|e| ledger_error(o, e))?;
    } else if !o.sessions.contains(&key) && !o.joined.contains(&key) {
        tracing::info!(
            iqn = %target.node_address,
            "adding a path to sessions of the target that wincsi did not make: they are left in place at unstage"
        );
        o.joined.set(&key, true).map_err(|e| ledger_error(o, e))?;
    }
    let params = ConnectTarget {
        node_address: &target.node_address,
        target_portal_address: Some(&portal.address),
        target_portal_port_number: Some(portal.port),
        initiator_portal_address: None,
        authentication_type: auth_type,
        chap,
        is_persistent: persistent.then_some(true),
        is_multipath_enabled: multipath.then_some(true),
    };
    // In the in-flight ledger while it runs (`inflight.rs`), as a `Create` of a mapping is.
    let called = o.calls.login(o, &target.node_address, portal)?;
    let connected = o.w.target_connect(o.c, &params);
    drop(called);
    let status = match &connected {
        Ok(out) => Some(out.code),
        Err(e) => e.iscsi_status(),
    };
    let raced = status == Some(IscsiStatus::TargetAlreadyLoggedIn);
    let result = o
        .method(connected, &[IscsiStatus::TargetAlreadyLoggedIn])
        .map_err(|mut e| {
            if status == Some(IscsiStatus::TooManySessions) {
                e.kind = HostErrorKind::TooManySessions;
            }
            e
        });
    let definite = match &result {
        Ok(_) => raced,
        Err(e) => !e.kind.is_uncertain(),
    };
    if definite && first {
        // No session of this call's: someone logged in between the look and `Connect`, or it failed.
        o.sessions
            .set(&key, false)
            .map_err(|e| ledger_error(o, e))?;
    }
    if raced && result.is_ok() && first {
        // The session is someone else's (this driver's logins of one target are serialised under the target's
        // lock, `iscsi/stage.rs`): joined, as when the look had found it, so the unstage leaves it in place.
        tracing::info!(
            iqn = %target.node_address,
            "someone else logged in to the target meanwhile: joining its session, left in place at unstage"
        );
        o.joined.set(&key, true).map_err(|e| ledger_error(o, e))?;
    }
    result.map(|_| ())
}

/// A persistent login for a target that already has a session: nothing when one of its sessions is persistent,
/// else `MSFT_iSCSISession.Register` on the first one (review L3: an early return used to leave
/// `persistentLogin: true` unapplied to a session made without it).
fn make_persistent(
    o: &Ops<'_>,
    target: &MsftIscsiTarget,
    chap: Option<ChapCredentials<'_>>,
) -> HostResult<()> {
    let sessions =
        o.w.target_sessions(o.c, &target.path)
            .map_err(|e| o.err(e))?;
    if sessions.iter().any(|s| s.is_persistent) {
        return Ok(());
    }
    let Some(session) = sessions.first() else {
        // Connected a moment ago, gone now: the next login makes it persistent.
        return Ok(());
    };
    tracing::info!(
        iqn = %target.node_address,
        "the target already has a session that is not persistent: registering it for boot"
    );
    let params = RegisterSession {
        is_multipath_enabled: None,
        chap,
    };
    o.method(o.w.session_register(o.c, &session.path, &params), &[])
}

/// Whether `DisconnectTarget` of `iqn` logs its sessions out ([`crate::host::Host::made_by_wincsi`]): not when the
/// driver joined a session someone else made.
pub(super) fn made_by_wincsi(sessions: &super::Ledger, joined: &super::Ledger, iqn: &str) -> bool {
    let key = session_key(iqn);
    !joined.contains(&key) || sessions.contains(&key)
}

impl super::NativeHost {
    /// Count the sessions of `iqns` as made by wincsi: at start, the targets the driver's own records say a stage
    /// through csi-proxy logged in to (`crate::backend::recorded_targets`). A target the joined ledger knows as
    /// someone else's stays so. Durable before it returns; the targets added.
    pub fn adopt_sessions(
        &self,
        iqns: impl IntoIterator<Item = String>,
    ) -> std::io::Result<Vec<String>> {
        let joined = &self.inner.joined;
        let added = self.inner.sessions.adopt(
            iqns.into_iter()
                .map(|iqn| session_key(&iqn))
                .filter(|key| !joined.contains(key)),
        )?;
        if !added.is_empty() {
            tracing::info!(
                targets = ?added,
                "iSCSI sessions the driver's volume records say a stage through csi-proxy made or joined are counted \
                 as wincsi's"
            );
        }
        Ok(added)
    }
}

/// Count `iqn`'s session as wincsi's: the driver's adoption proved a staging path of this driver mounts a volume the
/// target serves. A target the joined ledger knows as someone else's stays so, unless `joined_now`: the caller's own
/// login joined it a moment ago because no ledger knew it (after the state directory was lost), and the proof came
/// after.
pub(super) fn claim(o: &Ops<'_>, iqn: &str, joined_now: bool) -> HostResult<()> {
    let key = session_key(iqn);
    if o.joined.contains(&key) && !joined_now {
        return Ok(());
    }
    o.sessions.set(&key, true).map_err(|e| ledger_error(o, e))?;
    o.joined.set(&key, false).map_err(|e| ledger_error(o, e))
}

fn target(o: &Ops<'_>, iqn: &str) -> HostResult<Option<MsftIscsiTarget>> {
    Ok(find(o.w.targets(o.c).map_err(|e| o.err(e))?, iqn))
}

/// `DisconnectTarget`: every session of the target (csi-proxy handles only the first), each persistent one
/// unregistered first so the initiator does not log it back in at boot; nothing when not connected. A target whose
/// session the driver joined keeps it (module docs).
pub(super) fn disconnect(o: &Ops<'_>, iqn: &str) -> HostResult<()> {
    let key = session_key(iqn);
    if o.joined.contains(&key) && !o.sessions.contains(&key) {
        tracing::info!(
            iqn,
            "iSCSI sessions left in place: they were there before wincsi came to the target (it joined them)"
        );
        return o.joined.set(&key, false).map_err(|e| ledger_error(o, e));
    }
    let Some(t) = target(o, iqn)? else {
        return o.sessions.set(&key, false).map_err(|e| ledger_error(o, e));
    };
    for s in o.w.target_sessions(o.c, &t.path).map_err(|e| o.err(e))? {
        if s.is_persistent {
            o.method(
                o.w.session_unregister(o.c, &s.path),
                &[IscsiStatus::NotFound],
            )?;
        }
        // In the in-flight ledger while it runs (`inflight.rs`): a logout that outlives a killed driver.
        let _called = o.calls.method(
            o,
            super::inflight::DISCONNECT,
            &crate::host::HostObject::Target(iqn.to_owned()),
            None,
            None,
        )?;
        o.method(
            o.w.target_disconnect(o.c, &t.path, &s.session_identifier),
            &[IscsiStatus::NotFound],
        )?;
    }
    o.sessions.set(&key, false).map_err(|e| ledger_error(o, e))
}

/// `GetTargetDisks`: the disks of every session of the target (`MSFT_iSCSISessionToDisk`); empty when not connected.
pub(super) fn target_disks(o: &Ops<'_>, iqn: &str) -> HostResult<Vec<u32>> {
    let Some(t) = target(o, iqn)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for s in o.w.target_sessions(o.c, &t.path).map_err(|e| o.err(e))? {
        for d in o.w.session_disks(o.c, &s.path).map_err(|e| o.err(e))? {
            out.push(d.number);
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Whether target `iqn` has a session through `portal` (any session when `None`): a login's outcome
/// (`inflight.rs`).
pub(super) fn has_session_through(
    o: &Ops<'_>,
    iqn: &str,
    portal: Option<&Portal>,
) -> HostResult<bool> {
    let Some(t) = target(o, iqn)? else {
        return Ok(false);
    };
    match portal {
        Some(p) => has_path(o, &t, p),
        None => Ok(!o
            .w
            .target_sessions(o.c, &t.path)
            .map_err(|e| o.err(e))?
            .is_empty()),
    }
}

/// Whether target `t` has a session through `portal`: a connection to its address and port (the Microsoft initiator
/// makes one connection per session).
fn has_path(o: &Ops<'_>, t: &MsftIscsiTarget, portal: &Portal) -> HostResult<bool> {
    Ok(o.w
        .target_connections(o.c, &t.path)
        .map_err(|e| o.err(e))?
        .iter()
        .any(|c| connection_portal(c).is_some_and(|p| same_portal(&p, portal))))
}

fn connection_portal(c: &MsftIscsiConnection) -> Option<Portal> {
    Some(Portal {
        address: c.target_address.clone()?,
        port: c.target_port_number.unwrap_or(crate::host::DEFAULT_PORT),
    })
}

fn same_portal(a: &Portal, b: &Portal) -> bool {
    a.port == b.port && a.address.eq_ignore_ascii_case(&b.address)
}

/// `TargetPaths`: per connection of the target (a session's), its portal and the disks it shows
/// (`MSFT_iSCSIConnectionToDisk`); empty when the target has no session.
pub(super) fn paths(o: &Ops<'_>, iqn: &str) -> HostResult<Vec<TargetPath>> {
    let Some(t) = target(o, iqn)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for c in o.w.target_connections(o.c, &t.path).map_err(|e| o.err(e))? {
        let mut disks: Vec<u32> =
            o.w.connection_disks(o.c, &c.path)
                .map_err(|e| o.err(e))?
                .into_iter()
                .map(|d| d.number)
                .collect();
        disks.sort_unstable();
        out.push(TargetPath {
            portal: connection_portal(&c),
            disks,
        });
    }
    Ok(out)
}

/// `ListIscsiSessions`: the target of every session on the node, whoever made it (`SELECT MSFT_iSCSISession`).
pub(super) fn sessions(o: &Ops<'_>) -> HostResult<Vec<String>> {
    Ok(o.w
        .sessions(o.c)
        .map_err(|e| o.err(e))?
        .into_iter()
        .map(|s| s.target_node_address.unwrap_or_default())
        .collect())
}

/// `MultipathClaim`: whether the Microsoft DSM claims iSCSI disks (`SELECT MSFT_MSDSMSupportedHW`: the class missing
/// means the Multipath-IO feature is not installed).
pub(super) fn mpio_claim(o: &Ops<'_>) -> HostResult<MpioClaim> {
    Ok(match o.w.msdsm_supported_hw(o.c).map_err(|e| o.err(e))? {
        None => MpioClaim::NotInstalled,
        Some(rows) if rows.iter().any(|r| r.claims_iscsi()) => MpioClaim::ClaimsIscsi,
        Some(_) => MpioClaim::NotClaimingIscsi,
    })
}

/// `ListTargetPortals`: every portal added on the node.
pub(super) fn portals(o: &Ops<'_>) -> HostResult<Vec<Portal>> {
    Ok(o.w
        .target_portals(o.c, None)
        .map_err(|e| o.err(e))?
        .into_iter()
        .map(|p| Portal {
            address: p.target_portal_address,
            port: p.target_portal_port_number,
        })
        .collect())
}
