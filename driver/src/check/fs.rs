//! Filesystem checks in the scratch folder: the tree, link kinds and how far IsSymlink looks.

use super::expect::{Claim, Expect, Ref};
use super::ledger::Created;
use super::options::CheckOptions;
use super::report::PlanStep;
use super::{Ctx, say};
use crate::host::{Host, HostOp};

pub(super) fn plan(o: &CheckOptions) -> Vec<PlanStep> {
    let p = |r: &str| o.scratch_path(r).to_string();
    vec![
        PlanStep {
            check: "scratch_tree",
            actions: vec![
                format!(
                    "refuse unless {} is absent (or recorded in the ledger)",
                    o.scratch
                ),
                format!("Mkdir {} (twice: idempotent?)", p(r"tree\a\b")),
                format!("Rmdir {} without force (not empty)", p(r"tree\a")),
                format!("IsSymlink {} (absent)", p("absent")),
            ],
        },
        PlanStep {
            check: "create_symlink_kind",
            actions: vec![
                format!("CreateSymlink {} -> {}", p(r"links\dir-link"), p(r"tree\a")),
                format!(
                    "CreateSymlink {} -> {} (before the target exists), then Mkdir the target",
                    p(r"links\file-link"),
                    p(r"tree\later")
                ),
                "IsSymlink on each link (a link that is not there proves nothing about it)"
                    .to_owned(),
                "Mkdir a directory through each link that IsSymlink saw".to_owned(),
            ],
        },
        PlanStep {
            check: "is_symlink_one_hop",
            actions: vec![
                format!(
                    "CreateSymlink {} -> {} -> {}, then Rmdir {}",
                    p(r"links\outer"),
                    p(r"links\inner"),
                    p(r"tree\gone"),
                    p(r"tree\gone")
                ),
                "IsSymlink on both links".to_owned(),
            ],
        },
    ]
}

pub(super) async fn run<H: Host>(cx: &mut Ctx<'_, H>) -> Result<(), String> {
    let h = cx.host();
    let o = cx.opts();
    let p = |r: &str| o.scratch_path(r);
    let scratch = o.scratch.clone();

    // ---- the scratch folder: refuse one this tool did not create ----
    let mut c = cx.begin(
        "scratch_tree",
        "the scratch folder and its tree",
        "filesystem",
    );
    let (exists, r) = cx
        .call(
            HostOp::PathExists,
            scratch.as_str(),
            h.path_exists(&scratch, cx.d()),
        )
        .await;
    let root = Created::ScratchRoot {
        path: scratch.to_string(),
    };
    let ours = cx.recorded().iter().any(|e| e.object == root);
    match r {
        Ok(false) => {}
        Ok(true) if ours => {}
        Ok(true) => {
            c.fail(format!(
                "{scratch} exists and the ledger does not list it: this tool touches only what it created \
                 (remove it yourself or pass another --scratch-dir)"
            ));
            cx.end(c);
            return Err(format!("refused: {scratch} exists"));
        }
        Err(e) => {
            c.fail(format!("cannot tell whether {scratch} exists: {e}"));
            cx.end(c);
            return Err(format!("the host backend does not answer: {e}"));
        }
    }
    c.observe("scratch_exists", exists, Vec::new());
    cx.record(root, false)?;
    let tree = p(r"tree\a\b");
    let (o1, r1) = cx
        .call(HostOp::Mkdir, tree.as_str(), h.mkdir(&tree, cx.d()))
        .await;
    if let Err(e) = r1 {
        c.fail(format!("cannot create the scratch tree: {e}"));
        cx.end(c);
        return Err(format!("cannot create {tree}: {e}"));
    }
    c.observe("mkdir", o1, Vec::new());
    let (o2, _) = cx
        .call(HostOp::Mkdir, tree.as_str(), h.mkdir(&tree, cx.d()))
        .await;
    c.observe("mkdir_again", o2, vec![]);
    let a = p(r"tree\a");
    let (o3, _) = cx
        .call(HostOp::Rmdir, a.as_str(), h.rmdir(&a, false, cx.d()))
        .await;
    c.observe("rmdir_not_empty", o3, Vec::new());
    let absent = p("absent");
    let (o4, _) = cx
        .call(
            HostOp::IsSymlink,
            absent.as_str(),
            h.is_symlink(&absent, cx.d()),
        )
        .await;
    c.observe(
        "is_symlink_absent",
        o4,
        vec![Claim::all(
            Ref::Row("is_symlink_one_hop"),
            Expect::err_kind("NotFound"),
            true,
        )],
    );
    cx.end(c);

    // ---- CreateSymlink makes a directory link only when the source is a directory at that moment ----
    let mut c = cx.begin(
        "create_symlink_kind",
        "a link made before its target exists is a file link",
        "filesystem",
    );
    let links = p("links");
    let (_, r) = cx
        .call(HostOp::Mkdir, links.as_str(), h.mkdir(&links, cx.d()))
        .await;
    r.map_err(|e| format!("cannot create {links}: {e}"))?;
    let dir_link = p(r"links\dir-link");
    let file_link = p(r"links\file-link");
    let later = p(r"tree\later");
    cx.record(
        Created::Link {
            path: dir_link.to_string(),
        },
        false,
    )?;
    let (o1, r1) = cx
        .call(
            HostOp::CreateSymlink,
            &format!("{dir_link} -> {a}"),
            h.create_symlink(&dir_link, &a, cx.d()),
        )
        .await;
    c.observe("dir_link", o1, Vec::new());
    cx.record(
        Created::Link {
            path: file_link.to_string(),
        },
        false,
    )?;
    let (o2, r2) = cx
        .call(
            HostOp::CreateSymlink,
            &format!("{file_link} -> {later}"),
            h.create_symlink(&file_link, &later, cx.d()),
        )
        .await;
    c.observe("file_link", o2, Vec::new());
    if r1.is_err() || r2.is_err() {
        c.fail("a link could not be created");
    } else {
        let (_, r) = cx
            .call(HostOp::Mkdir, later.as_str(), h.mkdir(&later, cx.d()))
            .await;
        r.map_err(|e| format!("cannot create {later}: {e}"))?;
        // Confirm only what was observed: a CreateSymlink that answered OK without leaving a link (Wine's csi-proxy
        // did) would make a Mkdir through the "link" create a plain directory, which proves nothing about links.
        let mut missing = Vec::new();
        for (name, link) in [
            ("dir_link_is_link", &dir_link),
            ("file_link_is_link", &file_link),
        ] {
            let (o, r) = cx
                .call(HostOp::IsSymlink, link.as_str(), h.is_symlink(link, cx.d()))
                .await;
            c.observe(name, o, Vec::new());
            if !matches!(r, Ok(true)) {
                missing.push(format!("{link} ({})", describe(&r)));
            }
        }
        if !missing.is_empty() {
            c.fail(format!(
                "CreateSymlink answered OK but IsSymlink does not see a link to an existing target at {}: nothing is \
                 claimed about Mkdir through links",
                missing.join(", ")
            ));
            cx.end(c);
            return run_one_hop(cx).await;
        }
        let through_dir = p(r"links\dir-link\through");
        let (o, _) = cx
            .call(
                HostOp::Mkdir,
                through_dir.as_str(),
                h.mkdir(&through_dir, cx.d()),
            )
            .await;
        c.observe(
            "mkdir_through_dir_link",
            o,
            vec![Claim::all(
                Ref::Row("create_symlink_kind"),
                Expect::Ok,
                true,
            )],
        );
        let through_file = p(r"links\file-link\through");
        let (o, _) = cx
            .call(
                HostOp::Mkdir,
                through_file.as_str(),
                h.mkdir(&through_file, cx.d()),
            )
            .await;
        c.observe(
            "mkdir_through_file_link",
            o,
            vec![Claim::all(
                Ref::Row("create_symlink_kind"),
                Expect::any_err(),
                true,
            )],
        );
    }
    cx.end(c);
    run_one_hop(cx).await
}

/// An IsSymlink answer for a note.
fn describe(r: &crate::host::HostResult<bool>) -> String {
    match r {
        Ok(v) => format!("IsSymlink answered {v}"),
        Err(e) => format!("IsSymlink failed: {e}"),
    }
}

/// IsSymlink looks one hop: a link to a dangling link.
async fn run_one_hop<H: Host>(cx: &mut Ctx<'_, H>) -> Result<(), String> {
    let h = cx.host();
    let o = cx.opts();
    let p = |r: &str| o.scratch_path(r);
    // ---- IsSymlink: Lstat of the immediate target only ----
    let mut c = cx.begin(
        "is_symlink_one_hop",
        "IsSymlink on a link to a dangling link",
        "filesystem",
    );
    let gone = p(r"tree\gone");
    let inner = p(r"links\inner");
    let outer = p(r"links\outer");
    let (_, r) = cx
        .call(HostOp::Mkdir, gone.as_str(), h.mkdir(&gone, cx.d()))
        .await;
    r.map_err(|e| format!("cannot create {gone}: {e}"))?;
    cx.record(
        Created::Link {
            path: inner.to_string(),
        },
        false,
    )?;
    let (_, ri) = cx
        .call(
            HostOp::CreateSymlink,
            &format!("{inner} -> {gone}"),
            h.create_symlink(&inner, &gone, cx.d()),
        )
        .await;
    cx.record(
        Created::Link {
            path: outer.to_string(),
        },
        false,
    )?;
    let (_, ro) = cx
        .call(
            HostOp::CreateSymlink,
            &format!("{outer} -> {inner}"),
            h.create_symlink(&outer, &inner, cx.d()),
        )
        .await;
    let (_, rg) = cx
        .call(HostOp::Rmdir, gone.as_str(), h.rmdir(&gone, false, cx.d()))
        .await;
    match (ri, ro, rg) {
        (Ok(()), Ok(()), Ok(())) => {
            let (o, _) = cx
                .call(
                    HostOp::IsSymlink,
                    outer.as_str(),
                    h.is_symlink(&outer, cx.d()),
                )
                .await;
            c.observe(
                "outer",
                o,
                vec![Claim::all(
                    Ref::Row("is_symlink_one_hop"),
                    Expect::Value(serde_json::json!(true)),
                    true,
                )],
            );
            let (o, _) = cx
                .call(
                    HostOp::IsSymlink,
                    inner.as_str(),
                    h.is_symlink(&inner, cx.d()),
                )
                .await;
            c.observe(
                "inner",
                o,
                vec![Claim::all(
                    Ref::Row("is_symlink_one_hop"),
                    Expect::Value(serde_json::json!(false)),
                    true,
                )],
            );
        }
        (ri, ro, rg) => {
            let why: Vec<String> = [ri, ro, rg]
                .into_iter()
                .filter_map(|r| r.err().map(|e| e.to_string()))
                .collect();
            c.fail(format!(
                "the link chain could not be built: {}",
                why.join("; ")
            ));
        }
    }
    cx.end(c);
    say("");
    Ok(())
}
