//! The opt-in `smb_machine_account` check (issue 40 item 1; native item N46), run with `--smb-machine-share`: the
//! share staged as the node's own computer account, with no credential (`authentication: machine`), through the host
//! call the driver's stage makes for such a volume (`NewSmbGlobalMapping` without a credential, with the staging
//! link).
//!
//! Native backend: first a mapping attempt as an account that does not exist, which must fail with a logon failure —
//! a usable mapping of the share is reused whatever the credentials (`host/native/smb.rs`), so that failure proves
//! none exists (and, the account being no one's, costs no account a failed logon); then the mapping as the computer
//! account with its link, `IsSymlink`, a directory made and removed on the share through the link (the computer
//! account writes), and the unstage shown complete (`Rmdir`, `RemoveSmbGlobalMapping`, `PathExists` false, a second
//! removal finds no mapping). csiProxy mode: no host call; the driver's `FailedPrecondition` naming `mode:
//! hostProcess` is recorded.

use super::Ctx;
use super::expect::{Claim, Ref};
use super::ledger::Created;
use super::options::CheckOptions;
use super::report::{ErrorReport, Outcome, PlanStep};
use crate::host::{Host, HostErrorKind, HostOp, Secret, SmbCredential, UncPath};

/// An account no domain has: its logon fails (1326) unless a usable mapping of the share exists.
const NOBODY: &str = "wincsi-check-not-an-account";

pub(super) fn plan(o: &CheckOptions) -> Vec<PlanStep> {
    let Some(share) = &o.smb_machine else {
        return Vec::new();
    };
    let root = share.root();
    let link = o.scratch_path(r"smb-machine\link");
    vec![PlanStep {
        check: "smb_machine_account",
        actions: vec![
            "csiProxy mode: nothing (the driver refuses authentication: machine before any host call; recorded)"
                .to_owned(),
            format!(
                "native: NewSmbGlobalMapping {root} as the non-existent account {NOBODY}: must fail with a logon \
                 failure (proves no usable mapping of {root} exists; anything else and the check stops, touching \
                 nothing)"
            ),
            format!(
                "Mkdir {}; NewSmbGlobalMapping {share} with NO credential (the node's computer account), local_path \
                 {link}; IsSymlink {link}; Mkdir and Rmdir a directory on the share through it",
                o.scratch_path("smb-machine")
            ),
            format!("Rmdir {link}; RemoveSmbGlobalMapping {root}; PathExists {link}; RemoveSmbGlobalMapping {root} again"),
        ],
    }]
}

pub(super) async fn run<H: Host>(cx: &mut Ctx<'_, H>) -> Result<(), String> {
    let Some(share) = cx.opts().smb_machine.clone() else {
        return Ok(());
    };
    let h = cx.host();
    let root = share.root();
    let mut c = cx.begin(
        "smb_machine_account",
        "the share staged as the node's computer account (authentication: machine)",
        "smb",
    );
    // The driver's own condition (`smb/stage.rs` `machine_account_here`): the backend makes the mapping as SYSTEM.
    if !h.capabilities().list_smb_mappings {
        let e = crate::smb::options::machine_account_refusal(&share.to_string());
        let outcome = Outcome {
            op: "NodeStageVolume".to_owned(),
            value: None,
            error: Some(ErrorReport::classified(
                "NodeStageVolume",
                &format!("{:?}", e.code()),
                &e.chain(),
            )),
            millis: 0,
        };
        c.observe("refused_on_csi_proxy", outcome, Vec::new());
        c.note("csiProxy mode: authentication: machine needs mode: hostProcess; the driver's refusal is recorded");
        cx.end(c);
        return Ok(());
    }
    let nobody = SmbCredential::new(NOBODY, Secret::new("wincsi-check-not-a-password"));
    let (o, r) = cx
        .call(
            HostOp::NewSmbGlobalMapping,
            &format!("{root} as {NOBODY}"),
            h.new_smb_global_mapping(&root, None, Some(&nobody), cx.d()),
        )
        .await;
    c.observe("unmapped_probe", o, Vec::new());
    match r {
        Err(e) if e.kind == HostErrorKind::LogonFailure => {}
        Ok(()) => {
            c.fail(format!(
                "a mapping attempt as an account that does not exist succeeded: a usable mapping of {root} already \
                 existed (not this tool's: left alone), or the server lets anyone in as a guest (then this call made \
                 one: remove it with Remove-SmbGlobalMapping -RemotePath {root} -Force). Check stopped"
            ));
            cx.end(c);
            return Ok(());
        }
        Err(e) => {
            c.fail(format!(
                "expected a logon failure and got {:?}: the share cannot be proven unmapped, so the check stops \
                 here ({e})",
                e.kind
            ));
            cx.end(c);
            return Ok(());
        }
    }
    stage_as_machine(cx, &mut c, &share).await?;
    cx.end(c);
    Ok(())
}

async fn stage_as_machine<H: Host>(
    cx: &mut Ctx<'_, H>,
    c: &mut super::CheckRun,
    share: &UncPath,
) -> Result<(), String> {
    let h = cx.host();
    let root = share.root();
    let dir = cx.opts().scratch_path("smb-machine");
    let link = cx.opts().scratch_path(r"smb-machine\link");
    let (_, r) = cx
        .call(HostOp::Mkdir, dir.as_str(), h.mkdir(&dir, cx.d()))
        .await;
    r.map_err(|e| format!("cannot create {dir}: {e}"))?;
    let mapping = Created::SmbMapping {
        remote: root.to_string(),
    };
    let link_obj = Created::Link {
        path: link.to_string(),
    };
    cx.record(mapping.clone(), false)?;
    cx.record(link_obj.clone(), false)?;
    let (o, r) = cx
        .call(
            HostOp::NewSmbGlobalMapping,
            &format!("{share} with no credential (the computer account) at {link}"),
            h.new_smb_global_mapping(share, Some(&link), None, cx.d()),
        )
        .await;
    c.observe("map_as_machine", o, vec![Claim::record(Ref::Native(46))]);
    if let Err(e) = r {
        c.fail(format!(
            "the share could not be mapped as the node's computer account: {e}"
        ));
        return Ok(());
    }
    let (o, _) = cx
        .call(
            HostOp::IsSymlink,
            link.as_str(),
            h.is_symlink(&link, cx.d()),
        )
        .await;
    c.observe("is_symlink", o, Vec::new());
    let through = cx
        .opts()
        .scratch_path(r"smb-machine\link\wincsi-check-node-machine");
    let through_obj = Created::ShareDir {
        path: through.to_string(),
    };
    cx.record(through_obj.clone(), false)?;
    let (o, r) = cx
        .call(HostOp::Mkdir, through.as_str(), h.mkdir(&through, cx.d()))
        .await;
    c.observe(
        "mkdir_through_link",
        o,
        vec![Claim::record(Ref::Native(46))],
    );
    super::smb::remove_share_dir(cx, c, &through, &through_obj, r.is_ok()).await?;
    super::smb::unstage_and_show_gone(cx, c, &link, &root).await?;
    Ok(())
}
