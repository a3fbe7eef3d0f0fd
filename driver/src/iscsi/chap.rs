//! The initiator's mutual CHAP secret: one per Windows node (`Set-IscsiChapSecret` /
//! `MSFT_iSCSISession.SetCHAPSecret`, csi-proxy's `SetMutualChapSecret`). Every session that authenticates its target
//! mutually uses the secret the node has when it logs in — and again when the session recovers after a network
//! outage. A stage whose `node.session.auth.password_in` differs from the secret other staged volumes rely on would
//! silently replace it and break their sessions at their next login, so it is refused (FailedPrecondition naming the
//! rule).
//!
//! What a record keeps is a fingerprint, never the secret: PBKDF2-HMAC-SHA256 (`ring`) with a random salt, in the
//! form `pbkdf2-sha256$<iterations>$<salt hex>$<hash hex>`. A new fingerprint reuses the salt of one already on the
//! node, so a stage derives once. The check and the record that claims the secret happen under one node-wide lock
//! ([`LOCK_KEY`]), so two stages with different secrets cannot both pass.

use std::num::NonZeroU32;

use ring::rand::SecureRandom;

use super::IscsiRecord;
use crate::error::Error;
use crate::host::{Host, Secret};
use crate::lifecycle::Context;

/// The object lock of the node's mutual CHAP secret.
pub(super) const LOCK_KEY: &str = "iscsi-initiator:mutual-chap-secret";

const SCHEME: &str = "pbkdf2-sha256";
/// PBKDF2 rounds: CHAP secrets are 12–16 characters, so the fingerprint must be slow to guess from a stolen record.
const ITERATIONS: u32 = 60_000;
const SALT_LEN: usize = 16;

fn derive(secret: &Secret, salt: &[u8], iterations: NonZeroU32) -> [u8; 32] {
    let mut out = [0u8; 32];
    ring::pbkdf2::derive(
        ring::pbkdf2::PBKDF2_HMAC_SHA256,
        iterations,
        salt,
        secret.expose().as_bytes(),
        &mut out,
    );
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A parsed fingerprint.
struct Fingerprint {
    iterations: NonZeroU32,
    salt: Vec<u8>,
    hash: Vec<u8>,
}

impl Fingerprint {
    fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('$');
        if parts.next()? != SCHEME {
            return None;
        }
        let iterations = NonZeroU32::new(parts.next()?.parse().ok()?)?;
        let salt = unhex(parts.next()?)?;
        let hash = unhex(parts.next()?)?;
        parts.next().is_none().then_some(Self {
            iterations,
            salt,
            hash,
        })
    }

    fn of(secret: &Secret, salt: Vec<u8>) -> Self {
        Self::with(
            secret,
            salt,
            NonZeroU32::new(ITERATIONS).unwrap_or(NonZeroU32::MIN),
        )
    }

    fn with(secret: &Secret, salt: Vec<u8>, iterations: NonZeroU32) -> Self {
        let hash = derive(secret, &salt, iterations).to_vec();
        Self {
            iterations,
            salt,
            hash,
        }
    }

    fn render(&self) -> String {
        format!(
            "{SCHEME}${}${}${}",
            self.iterations,
            hex(&self.salt),
            hex(&self.hash)
        )
    }
}

/// Check `secret` against the mutual CHAP secret the node's other staged volumes rely on, and return the fingerprint
/// this volume's record claims it with. The caller holds [`LOCK_KEY`] until that record is written. One derivation per
/// distinct salt (normally one: new fingerprints reuse the salt already on the node).
pub(super) fn claim<H: Host>(
    cx: Context<'_, H>,
    volume_id: &str,
    secret: &Secret,
) -> Result<String, Error> {
    let mut derived: Vec<Fingerprint> = Vec::new();
    for (rec, details) in cx.records::<IscsiRecord>()? {
        let IscsiRecord {
            mutual_chap: Some(text),
            released: false,
            ..
        } = &details
        else {
            continue;
        };
        if rec.volume_id == volume_id {
            continue;
        }
        let Some(fp) = Fingerprint::parse(text) else {
            return Err(Error::Internal(format!(
                "the record of volume {:?} has an unreadable mutual CHAP fingerprint; refusing to change the node's \
                 initiator secret",
                rec.volume_id
            )));
        };
        let mine = match derived
            .iter()
            .find(|d| d.salt == fp.salt && d.iterations == fp.iterations)
        {
            Some(d) => d,
            None => {
                derived.push(Fingerprint::with(secret, fp.salt.clone(), fp.iterations));
                derived
                    .last()
                    .unwrap_or_else(|| unreachable!("just pushed"))
            }
        };
        if mine.hash != fp.hash {
            return Err(Error::FailedPrecondition(format!(
                "the iSCSI initiator's mutual CHAP secret is one per Windows node, and volume {:?} staged on this \
                 node relies on a different node.session.auth.password_in: staging this volume would replace it and \
                 break that volume's session at its next login. Rule: every mutual-CHAP volume on a node uses the \
                 same password_in; use that secret, or unstage {:?} first",
                rec.volume_id, rec.volume_id
            )));
        }
    }
    if let Some(fp) = derived
        .into_iter()
        .find(|d| d.iterations.get() == ITERATIONS)
    {
        return Ok(fp.render());
    }
    let mut salt = vec![0u8; SALT_LEN];
    ring::rand::SystemRandom::new()
        .fill(&mut salt)
        .map_err(|_| Error::Internal("the system random generator failed".to_owned()))?;
    Ok(Fingerprint::of(secret, salt).render())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_match_only_their_secret_and_never_show_it() {
        let a = Secret::new("initiator-sec-9");
        let fp = Fingerprint::of(&a, vec![7; SALT_LEN]).render();
        assert!(fp.starts_with("pbkdf2-sha256$60000$0707"), "{fp}");
        assert!(!fp.contains("initiator-sec-9"));
        let parsed = Fingerprint::parse(&fp).expect("parses");
        let again = |s: &str| {
            Fingerprint::with(&Secret::new(s), parsed.salt.clone(), parsed.iterations).hash
        };
        assert_eq!(again("initiator-sec-9"), parsed.hash);
        assert_ne!(again("initiator-sec-8"), parsed.hash);
        for bad in [
            "",
            "sha1$1$00$00",
            "pbkdf2-sha256$0$00$00",
            "pbkdf2-sha256$1$0$00",
            "pbkdf2-sha256$1$00$00$x",
        ] {
            assert!(Fingerprint::parse(bad).is_none(), "{bad}");
        }
    }
}
