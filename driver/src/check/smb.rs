//! SMB checks on a share given on the command line: the refusal of an already-mapped share, the link form of
//! `NewSmbGlobalMapping`'s `local_path`, reuse, the texts of a failed and of an absent mapping, IsSymlink on a link
//! whose mapping is gone; after a reboot, IsSymlink on the Disconnected mapping's link and re-creating it.

use super::expect::{Claim, Expect, Ref};
use super::ledger::Created;
use super::options::{CheckOptions, SmbTarget};
use super::report::PlanStep;
use super::{Ctx, say};
use crate::host::{Host, HostErrorKind, HostOp, HostPath, Secret, SmbCredential, UncPath};

/// A credential that is certainly wrong: the account's password with a suffix.
fn wrong(c: &SmbCredential) -> SmbCredential {
    SmbCredential::new(
        c.principal(),
        Secret::new(format!(
            "{}-wincsi-check-not-the-password",
            c.password().expose()
        )),
    )
}

pub(super) fn plan(o: &CheckOptions) -> Vec<PlanStep> {
    let Some(t) = &o.smb else {
        return vec![PlanStep {
            check: "smb",
            actions: vec!["skipped: no --smb-share".to_owned()],
        }];
    };
    let root = t.share.root();
    let p = |r: &str| o.scratch_path(r).to_string();
    let user = t.credential.principal();
    let mut steps = Vec::new();
    match o.phase {
        super::cli::Phase::AfterReboot => steps.push(PlanStep {
            check: "smb_after_reboot",
            actions: vec![
                format!("IsSymlink {} (the before-reboot link)", p(r"smb-reboot\link")),
                format!("NewSmbGlobalMapping {root} as {user} (same credentials, over the Disconnected mapping)"),
                format!("RemoveSmbGlobalMapping {root}, then NewSmbGlobalMapping {root} again (does removing repair it?)"),
            ],
        }),
        _ => {
            steps.push(PlanStep {
                check: "smb_unmapped_probe",
                actions: vec![format!(
                    "NewSmbGlobalMapping {root} as {user} with a WRONG password: must fail with a logon failure \
                     (proves no usable mapping of {root} exists; anything else and the SMB checks stop, touching \
                     nothing). One failed logon counts towards the account's lockout threshold"
                )],
            });
            steps.push(PlanStep {
                check: "smb_link_form",
                actions: vec![
                    format!("Mkdir {}", p("smb")),
                    format!("NewSmbGlobalMapping {} as {user} with local_path {}", t.share, p(r"smb\link")),
                    format!("IsSymlink {}; Mkdir and Rmdir a directory on the share through it", p(r"smb\link")),
                    format!(
                        "native backend: PathSpace {} (GetDiskFreeSpaceExW through the link: the share's size and \
                         free space, recorded for native item N45)",
                        p(r"smb\link")
                    ),
                ],
            });
            steps.push(PlanStep {
                check: "smb_reuse",
                actions: vec![format!("NewSmbGlobalMapping {root} with the wrong password (an OK mapping is reused)")],
            });
            steps.push(PlanStep {
                check: "smb_removed",
                actions: vec![
                    format!("RemoveSmbGlobalMapping {root}; IsSymlink {}", p(r"smb\link")),
                    format!("RemoveSmbGlobalMapping {root} again (the not-found text)"),
                ],
            });
            steps.push(super::smb_options::plan(o, t));
            if o.phase == super::cli::Phase::BeforeReboot {
                steps.push(PlanStep {
                    check: "smb_reboot_fixture",
                    actions: vec![format!(
                        "NewSmbGlobalMapping {} with local_path {}: KEPT for --phase after-reboot",
                        t.share,
                        p(r"smb-reboot\link")
                    )],
                });
            }
        }
    }
    steps
}

pub(super) async fn run<H: Host>(cx: &mut Ctx<'_, H>) -> Result<(), String> {
    let Some(t) = cx.opts().smb.clone() else {
        let mut c = cx.begin("smb", "SMB checks", "smb");
        c.skip("no --smb-share given");
        cx.end(c);
        return Ok(());
    };
    let h = cx.host();
    let root = t.share.root();

    // ---- refuse a share that is already mapped ----
    let mut c = cx.begin(
        "smb_unmapped_probe",
        "a wrong password fails unless the share is already mapped",
        "smb",
    );
    let bad = wrong(&t.credential);
    let (o, r) = cx
        .call(
            HostOp::NewSmbGlobalMapping,
            &format!("{root} (wrong password)"),
            h.new_smb_global_mapping(&root, None, Some(&bad), cx.d()),
        )
        .await;
    c.observe(
        "new_mapping_wrong_password",
        o,
        vec![Claim::each(
            Ref::Row("smb_errors"),
            [
                Expect::Err {
                    contains: vec!["New-SmbGlobalMapping"],
                    kind: Some("LogonFailure"),
                },
                Expect::Err {
                    contains: vec!["New-SmbGlobalMapping"],
                    kind: Some("LogonFailure"),
                },
                Expect::Err {
                    contains: vec!["Exception occurred."],
                    kind: Some("LogonFailure"),
                },
                Expect::Err {
                    contains: vec!["code=1326"],
                    kind: Some("LogonFailure"),
                },
            ],
            false,
        )],
    );
    match r {
        Err(e) if e.kind == HostErrorKind::LogonFailure => cx.end(c),
        Ok(()) => {
            c.fail(format!(
                "NewSmbGlobalMapping with a wrong password succeeded: a usable mapping of {root} already existed \
                 (it is not this tool's: left alone), or the server accepts any password (then this call created \
                 one: remove it with Remove-SmbGlobalMapping -RemotePath {root} -Force). SMB checks stopped"
            ));
            cx.end(c);
            return Ok(());
        }
        Err(e) => {
            c.fail(format!(
                "expected a logon failure (error 1326) and got {:?}: the share cannot be proven unmapped, so the SMB \
                 checks stop here ({e})",
                e.kind
            ));
            cx.end(c);
            return Ok(());
        }
    }

    // ---- the link NewSmbGlobalMapping makes at local_path ----
    let mut c = cx.begin(
        "smb_link_form",
        "the local_path link of this release resolves",
        "smb",
    );
    let dir = cx.opts().scratch_path("smb");
    let link = cx.opts().scratch_path(r"smb\link");
    let (_, r) = cx
        .call(HostOp::Mkdir, dir.as_str(), h.mkdir(&dir, cx.d()))
        .await;
    r.map_err(|e| format!("cannot create {dir}: {e}"))?;
    let mapping = Created::SmbMapping {
        remote: root.to_string(),
    };
    cx.record(mapping.clone(), false)?;
    cx.record(
        Created::Link {
            path: link.to_string(),
        },
        false,
    )?;
    let (o, r) = cx
        .call(
            HostOp::NewSmbGlobalMapping,
            &format!("{} at {link}", t.share),
            h.new_smb_global_mapping(&t.share, Some(&link), Some(&t.credential), cx.d()),
        )
        .await;
    c.observe("new_mapping", o, Vec::new());
    if let Err(e) = r {
        c.fail(format!("the mapping could not be made: {e}"));
        cx.end(c);
        return Ok(());
    }
    let resolves = |v: bool| {
        vec![
            Claim::eras(
                Ref::Row("smb_link_form"),
                Expect::Value(serde_json::json!(v)),
                Expect::Value(serde_json::json!(v)),
                false,
            ),
            Claim::each(
                Ref::NodeCheck(4),
                [
                    Expect::Record,
                    Expect::Record,
                    Expect::Value(serde_json::json!(v)),
                    Expect::Value(serde_json::json!(v)),
                ],
                false,
            ),
            Claim::record(Ref::Native(6)),
        ]
    };
    let (o, _) = cx
        .call(
            HostOp::IsSymlink,
            link.as_str(),
            h.is_symlink(&link, cx.d()),
        )
        .await;
    c.observe("is_symlink", o, resolves(true));
    if h.capabilities().path_space {
        let (o, _) = cx
            .call(
                HostOp::PathSpace,
                link.as_str(),
                h.path_space(&link, cx.d()),
            )
            .await;
        c.observe("path_space", o, vec![Claim::record(Ref::Native(45))]);
    }
    let share_dir = cx.opts().scratch_path(r"smb\link\wincsi-check-node");
    let share_obj = Created::ShareDir {
        path: share_dir.to_string(),
    };
    cx.record(share_obj.clone(), false)?;
    let (o, r) = cx
        .call(
            HostOp::Mkdir,
            share_dir.as_str(),
            h.mkdir(&share_dir, cx.d()),
        )
        .await;
    c.observe(
        "mkdir_through_link",
        o,
        vec![
            Claim::all(Ref::Row("smb_link_form"), Expect::Ok, false),
            Claim::each(
                Ref::NodeCheck(4),
                [Expect::Record, Expect::Record, Expect::Ok, Expect::Ok],
                false,
            ),
        ],
    );
    remove_share_dir(cx, &mut c, &share_dir, &share_obj, r.is_ok()).await?;
    cx.end(c);

    // ---- an OK mapping is reused whatever the credentials ----
    let mut c = cx.begin(
        "smb_reuse",
        "an OK mapping is reused and the request's credentials ignored",
        "smb",
    );
    let (o, _) = cx
        .call(
            HostOp::NewSmbGlobalMapping,
            &format!("{root} (wrong password, mapping exists)"),
            h.new_smb_global_mapping(&root, None, Some(&bad), cx.d()),
        )
        .await;
    c.observe(
        "new_mapping_again",
        o,
        vec![Claim::all(Ref::Row("smb_reuse"), Expect::Ok, true)],
    );
    cx.end(c);

    // ---- after RemoveSmbGlobalMapping: the link, and removing again ----
    let mut c = cx.begin(
        "smb_removed",
        "IsSymlink on a link whose mapping is gone; the text of an absent mapping",
        "smb",
    );
    let (o, r) = cx
        .call(
            HostOp::RemoveSmbGlobalMapping,
            root.to_string().as_str(),
            h.remove_smb_global_mapping(&root, cx.d()),
        )
        .await;
    c.observe("remove_mapping", o, Vec::new());
    if r.is_ok() {
        cx.forget(&mapping)?;
    }
    let (o, _) = cx
        .call(
            HostOp::IsSymlink,
            link.as_str(),
            h.is_symlink(&link, cx.d()),
        )
        .await;
    c.observe(
        "is_symlink_unmapped",
        o,
        vec![
            Claim::all(
                Ref::Row("unc_errors"),
                Expect::err_kind("AccessDenied"),
                false,
            ),
            Claim::all(Ref::NodeCheck(3), Expect::err_kind("AccessDenied"), false),
        ],
    );
    let (o, _) = cx
        .call(
            HostOp::RemoveSmbGlobalMapping,
            &format!("{root} (absent)"),
            h.remove_smb_global_mapping(&root, cx.d()),
        )
        .await;
    c.observe(
        "remove_absent",
        o,
        vec![Claim::each(
            Ref::Row("smb_errors"),
            [
                Expect::err("No MSFT_SmbGlobalMapping objects found"),
                Expect::err("No MSFT_SmbGlobalMapping objects found"),
                Expect::err("err: Not Found"),
                Expect::err("failed to query SMB global mapping"),
            ],
            true,
        )],
    );
    let still_mapped = cx.recorded().iter().any(|e| e.object == mapping);
    cx.end(c);

    // ---- the share staged with SMB client options (issue 40 item 2) ----
    if still_mapped {
        let mut c = cx.begin(
            "smb_options",
            "the share staged with SMB client options, read back, and the driver's refusals",
            "smb",
        );
        c.skip("the run's first mapping of the share could not be removed");
        cx.end(c);
    } else {
        super::smb_options::run(cx, &t).await?;
    }

    if cx.opts().phase == super::cli::Phase::BeforeReboot {
        fixture(cx, &t).await?;
    }
    say("");
    Ok(())
}

/// The before-reboot fixture: a mapping with its link, kept.
async fn fixture<H: Host>(cx: &mut Ctx<'_, H>, t: &SmbTarget) -> Result<(), String> {
    let h = cx.host();
    let mut c = cx.begin(
        "smb_reboot_fixture",
        "a mapping and its link kept for after the reboot",
        "smb",
    );
    let dir = cx.opts().scratch_path("smb-reboot");
    let link = cx.opts().scratch_path(r"smb-reboot\link");
    let (_, r) = cx
        .call(HostOp::Mkdir, dir.as_str(), h.mkdir(&dir, cx.d()))
        .await;
    r.map_err(|e| format!("cannot create {dir}: {e}"))?;
    cx.record(
        Created::SmbMapping {
            remote: t.share.root().to_string(),
        },
        true,
    )?;
    cx.record(
        Created::Link {
            path: link.to_string(),
        },
        true,
    )?;
    let (o, r) = cx
        .call(
            HostOp::NewSmbGlobalMapping,
            &format!("{} at {link}", t.share),
            h.new_smb_global_mapping(&t.share, Some(&link), Some(&t.credential), cx.d()),
        )
        .await;
    c.observe("new_mapping", o, Vec::new());
    if let Err(e) = r {
        c.fail(format!("the fixture could not be made: {e}"));
    } else {
        c.note("kept: reboot the node, then run --phase after-reboot");
    }
    cx.end(c);
    Ok(())
}

/// After the reboot: the Disconnected mapping's link, re-creating it, and whether removing it first repairs it.
pub(super) async fn after_reboot<H: Host>(cx: &mut Ctx<'_, H>) -> Result<(), String> {
    let Some(t) = cx.opts().smb.clone() else {
        return Ok(());
    };
    let link = cx.opts().scratch_path(r"smb-reboot\link");
    let root = t.share.root();
    let mapping = Created::SmbMapping {
        remote: root.to_string(),
    };
    let mut c = cx.begin(
        "smb_after_reboot",
        "the mapping made before the reboot (Disconnected)",
        "smb",
    );
    if !cx
        .recorded()
        .iter()
        .any(|e| e.object == mapping && e.keep_for_reboot)
    {
        c.skip("the ledger holds no SMB fixture (was --smb-share given to before-reboot?)");
        cx.end(c);
        return Ok(());
    }
    let h = cx.host();
    let (o, _) = cx
        .call(
            HostOp::IsSymlink,
            link.as_str(),
            h.is_symlink(&link, cx.d()),
        )
        .await;
    c.observe(
        "is_symlink_disconnected",
        o,
        vec![
            Claim::all(
                Ref::Row("unc_errors"),
                Expect::err_kind("AccessDenied"),
                false,
            ),
            Claim::all(Ref::NodeCheck(2), Expect::err_kind("AccessDenied"), false),
        ],
    );
    let (o, _) = cx
        .call(
            HostOp::NewSmbGlobalMapping,
            &format!("{root} (same credentials)"),
            h.new_smb_global_mapping(&root, None, Some(&t.credential), cx.d()),
        )
        .await;
    c.observe(
        "recreate_same_credentials",
        o,
        vec![
            Claim::all(
                Ref::Row("smb_disconnected_recreate"),
                Expect::err_kind("MultipleConnections"),
                false,
            ),
            Claim::all(
                Ref::NodeCheck(1),
                Expect::err_kind("MultipleConnections"),
                false,
            ),
            Claim::record(Ref::Native(1)),
        ],
    );
    let (o, _) = cx
        .call(
            HostOp::RemoveSmbGlobalMapping,
            root.to_string().as_str(),
            h.remove_smb_global_mapping(&root, cx.d()),
        )
        .await;
    c.observe("remove_disconnected", o, Vec::new());
    let (o, _) = cx
        .call(
            HostOp::NewSmbGlobalMapping,
            &format!("{root} (after removing)"),
            h.new_smb_global_mapping(&root, None, Some(&t.credential), cx.d()),
        )
        .await;
    c.observe(
        "recreate_after_remove",
        o,
        vec![Claim::all(Ref::NodeCheck(1), Expect::Ok, false)],
    );
    cx.keep(&mapping, false)?;
    cx.keep(
        &Created::Link {
            path: link.to_string(),
        },
        false,
    )?;
    cx.end(c);
    say("");
    Ok(())
}

/// After a check's `Mkdir` of `dir` through a staging link (ledger object `obj`; `made`: it answered OK): a non-forced
/// `Rmdir` of it, observed as `rmdir_through_link`; the ledger forgets it once removed, or at once when it was never
/// made. Shared by the `smb_link_form` and `smb_machine_account` checks.
pub(super) async fn remove_share_dir<H: Host>(
    cx: &mut Ctx<'_, H>,
    c: &mut super::CheckRun,
    dir: &HostPath,
    obj: &Created,
    made: bool,
) -> Result<(), String> {
    if made {
        let h = cx.host();
        let (o, r) = cx
            .call(HostOp::Rmdir, dir.as_str(), h.rmdir(dir, false, cx.d()))
            .await;
        c.observe("rmdir_through_link", o, Vec::new());
        if r.is_err() {
            return Ok(());
        }
    }
    cx.forget(obj)
}

/// Undo a check's stage of share `root` at `link` (the link, then the mapping, each forgotten by the ledger once
/// removed) and show both gone: `PathExists` of the link is false and a second removal answers NotFound. A piece
/// left is a failure of `c`. Shared by the `smb_options` and `smb_machine_account` checks.
pub(super) async fn unstage_and_show_gone<H: Host>(
    cx: &mut Ctx<'_, H>,
    c: &mut super::CheckRun,
    link: &HostPath,
    root: &UncPath,
) -> Result<(), String> {
    let h = cx.host();
    let (o, r) = cx
        .call(HostOp::Rmdir, link.as_str(), h.rmdir(link, false, cx.d()))
        .await;
    c.observe("rmdir_link", o, Vec::new());
    if r.is_ok() {
        cx.forget(&Created::Link {
            path: link.to_string(),
        })?;
    }
    let (o, r) = cx
        .call(
            HostOp::RemoveSmbGlobalMapping,
            root.to_string().as_str(),
            h.remove_smb_global_mapping(root, cx.d()),
        )
        .await;
    c.observe("remove_mapping", o, Vec::new());
    if r.is_ok() {
        cx.forget(&Created::SmbMapping {
            remote: root.to_string(),
        })?;
    }
    let (o, gone) = cx
        .call(
            HostOp::PathExists,
            link.as_str(),
            h.path_exists(link, cx.d()),
        )
        .await;
    c.observe("link_exists_after", o, Vec::new());
    let (o, again) = cx
        .call(
            HostOp::RemoveSmbGlobalMapping,
            &format!("{root} (gone)"),
            h.remove_smb_global_mapping(root, cx.d()),
        )
        .await;
    c.observe("remove_again", o, Vec::new());
    let left_link = !matches!(gone, Ok(false));
    let left_mapping = !matches!(&again, Err(e) if e.kind == HostErrorKind::NotFound);
    if left_link || left_mapping {
        c.fail(format!(
            "the unstage left {}",
            match (left_link, left_mapping) {
                (true, true) => "the link and the mapping",
                (true, false) => "the link",
                _ => "the mapping",
            }
        ));
    }
    Ok(())
}
