//! The `Credential` string of `MSFT_SmbGlobalMapping.Create`.

/// `Credential` for `MSFT_SmbGlobalMapping.Create`: the user name with `\` escaped as `\\` and `:` as `\:`, then `:`
/// and the password unescaped. This is how PowerShell's cmdletization (`cimConverter.cs`) turns a `PSCredential`
/// into a string, and what csi-proxy passes (`pkg/cim/smb.go:33-38`, reference §2.2). Whether a password containing
/// `:` survives is **unverified** (the provider is taken to split at the first unescaped colon).
///
/// The result holds the password: never log it.
pub fn credential_string(user_name: &str, password: &str) -> String {
    let mut s = String::with_capacity(user_name.len() + password.len() + 4);
    for c in user_name.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            ':' => s.push_str("\\:"),
            c => s.push(c),
        }
    }
    s.push(':');
    s.push_str(password);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_the_user_name_only() {
        assert_eq!(
            credential_string(r"DOMAIN\user", "p:w"),
            r"DOMAIN\\user:p:w"
        );
        assert_eq!(credential_string("user", "secret"), "user:secret");
        assert_eq!(credential_string("us:er", r"pa\ss"), r"us\:er:pa\ss");
        assert_eq!(
            credential_string("user@corp.example", ""),
            "user@corp.example:"
        );
    }

    /// The first unescaped `:` separates user from password, so the user name round-trips whatever it contains.
    #[test]
    fn the_first_unescaped_colon_splits() {
        fn split(cred: &str) -> (String, String) {
            let mut user = String::new();
            let mut chars = cred.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => user.push(chars.next().unwrap()),
                    ':' => return (user, chars.collect()),
                    c => user.push(c),
                }
            }
            panic!("no separator in {cred}")
        }
        for (u, p) in [(r"D\u", "x"), ("a:b", "c:d"), (r"\:\\", ":"), ("", "p")] {
            assert_eq!(
                split(&credential_string(u, p)),
                (u.to_owned(), p.to_owned())
            );
        }
    }
}
