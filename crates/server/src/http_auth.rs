//! Who may do what over `[http]`: reads (`/metrics`, `/api/*`, the dashboard) are open on
//! loopback unless configured otherwise, and need the token elsewhere; actions (fail, add,
//! check, repair, idle) always need it, and without `token_file` there are none.
//!
//! The token comes as `Authorization: Bearer TOKEN` (scripts, Prometheus), or once through
//! the dashboard's login form, which sets a session cookie (HttpOnly, SameSite=Strict, and
//! Secure under TLS). A request carried by the cookie alone must also carry the CSRF value
//! the dashboard's pages hold (a form field or the `X-Raidd-CSRF` header), and an `Origin`
//! it sends must be the listener's own: another site's page cannot act through a logged-in
//! browser. The session and CSRF values are random per daemon run (a restart logs everyone
//! out). Deciding is pure ([`Auth::check`]); loading the token is the I/O around it.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The shortest token accepted: guessing one of these is out of reach.
pub const MIN_TOKEN: usize = 16;
/// The session cookie's name.
pub const COOKIE: &str = "raidd_session";

/// What a request needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Nothing: the dashboard's files, the login form.
    Nothing,
    Read,
    Act,
}

/// What a request shows of who sent it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    /// The `Authorization` header.
    pub authorization: Option<String>,
    /// The `Cookie` header.
    pub cookie: Option<String>,
    /// The CSRF value, from `X-Raidd-CSRF` or the form.
    pub csrf: Option<String>,
    /// The `Origin` and `Host` headers.
    pub origin: Option<String>,
    pub host: Option<String>,
}

/// The answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed; `session`: by the session cookie (the page may show actions).
    Allowed { session: bool },
    /// 401: no (good) token.
    Unauthorized,
    /// 403, and why.
    Forbidden(&'static str),
}

/// The listener's rules and secrets.
#[derive(Clone, Debug)]
pub struct Auth {
    token: Option<String>,
    open_reads: bool,
    session: String,
    csrf: String,
}

/// Equal, in time that does not depend on where two strings of one length differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// 32 random bytes as hex.
fn random_hex() -> String {
    let mut b = [0u8; 32];
    // The kernel's generator does not fail once the system has booted; were it to, the
    // values would still be unknown to clients, only not random.
    if getrandom::fill(&mut b).is_err() {
        tracing::warn!("getrandom failed: session values from the clock");
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        b[..16].copy_from_slice(&t.to_le_bytes());
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Auth {
    /// `token`: the bearer token (none: no actions); `open_reads`: reads need no token.
    pub fn new(token: Option<String>, open_reads: bool) -> Auth {
        Auth::with_secrets(token, open_reads, random_hex(), random_hex())
    }

    fn with_secrets(
        token: Option<String>,
        open_reads: bool,
        session: String,
        csrf: String,
    ) -> Auth {
        debug_assert!(
            token.as_ref().is_none_or(|t| t.len() >= MIN_TOKEN),
            "tokens are checked when loaded"
        );
        debug_assert_ne!(session, csrf, "two secrets");
        Auth {
            token,
            open_reads,
            session,
            csrf,
        }
    }

    /// Whether a token is configured (actions exist).
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// The CSRF value the dashboard's forms carry.
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Whether `given` is the token.
    pub fn is_token(&self, given: &str) -> bool {
        self.token.as_deref().is_some_and(|t| same(t, given))
    }

    /// The `Set-Cookie` value a good login gets.
    pub fn session_cookie(&self, secure: bool) -> String {
        format!(
            "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict{}",
            self.session,
            if secure { "; Secure" } else { "" }
        )
    }

    fn bearer(&self, c: &Credentials) -> bool {
        c.authorization
            .as_deref()
            .and_then(|a| a.strip_prefix("Bearer "))
            .is_some_and(|t| self.is_token(t.trim()))
    }

    fn has_session(&self, c: &Credentials) -> bool {
        self.token.is_some()
            && c.cookie.as_deref().is_some_and(|cookies| {
                cookies
                    .split(';')
                    .filter_map(|kv| kv.trim().split_once('='))
                    .any(|(k, v)| k == COOKIE && same(v, &self.session))
            })
    }

    /// Whether an `Origin` sent is this listener (`Host`): browsers send it on every POST.
    fn same_origin(c: &Credentials) -> bool {
        let Some(origin) = &c.origin else {
            return true;
        };
        let authority = origin.split_once("://").map_or("", |(_, a)| a);
        c.host.as_deref().is_some_and(|h| h == authority)
    }

    /// Whether a request with `c` may do what it needs.
    pub fn check(&self, need: Need, c: &Credentials) -> Verdict {
        let session = self.has_session(c);
        match need {
            Need::Nothing => Verdict::Allowed { session },
            Need::Read if self.open_reads || session || self.bearer(c) => {
                Verdict::Allowed { session }
            }
            Need::Read => Verdict::Unauthorized,
            Need::Act if self.token.is_none() => {
                Verdict::Forbidden("actions need a token: set http.token_file")
            }
            Need::Act if self.bearer(c) => Verdict::Allowed { session: false },
            Need::Act if !session => Verdict::Unauthorized,
            Need::Act if !Self::same_origin(c) => {
                Verdict::Forbidden("the request comes from another site's page")
            }
            Need::Act if c.csrf.as_deref().is_some_and(|v| same(v, &self.csrf)) => {
                Verdict::Allowed { session: true }
            }
            Need::Act => Verdict::Forbidden("the request lacks the dashboard's CSRF value"),
        }
    }
}

/// The token in `path`: its first line, at least [`MIN_TOKEN`] bytes, in a file only its
/// owner may read.
pub fn load_token(path: &Path) -> Result<String, String> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("http.token_file {shown}: {e}"))?;
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "http.token_file {shown}: others may read it (mode {:o}): chmod 600 {shown}",
            meta.mode() & 0o777
        ));
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("http.token_file {shown}: {e}"))?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.len() < MIN_TOKEN || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "http.token_file {shown}: the token must be one line of at least {MIN_TOKEN} \
             printable characters without spaces (e.g. `openssl rand -hex 32 > {shown}`)"
        ));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123";

    fn auth(token: bool, open: bool) -> Auth {
        Auth::with_secrets(
            token.then(|| TOKEN.to_string()),
            open,
            "s".repeat(64),
            "c".repeat(64),
        )
    }

    fn creds() -> Credentials {
        Credentials {
            host: Some("10.0.0.1:9810".into()),
            ..Default::default()
        }
    }

    #[test]
    fn reads_are_open_only_where_configured() {
        let open = auth(true, true);
        let closed = auth(true, false);
        assert_eq!(
            open.check(Need::Read, &creds()),
            Verdict::Allowed { session: false }
        );
        assert_eq!(closed.check(Need::Read, &creds()), Verdict::Unauthorized);
        let bearer = Credentials {
            authorization: Some(format!("Bearer {TOKEN}")),
            ..creds()
        };
        assert_eq!(
            closed.check(Need::Read, &bearer),
            Verdict::Allowed { session: false }
        );
        let wrong = Credentials {
            authorization: Some("Bearer 0123456789abcdef0124".into()),
            ..creds()
        };
        assert_eq!(closed.check(Need::Read, &wrong), Verdict::Unauthorized);
        let cookie = Credentials {
            cookie: Some(format!("a=b; {COOKIE}={}", "s".repeat(64))),
            ..creds()
        };
        assert_eq!(
            closed.check(Need::Read, &cookie),
            Verdict::Allowed { session: true }
        );
        assert_eq!(
            closed.check(Need::Nothing, &creds()),
            Verdict::Allowed { session: false }
        );
    }

    #[test]
    fn actions_need_the_token_and_a_session_needs_the_csrf_value_and_its_own_origin() {
        assert!(matches!(
            auth(false, true).check(Need::Act, &creds()),
            Verdict::Forbidden(m) if m.contains("token_file")
        ));
        let a = auth(true, true);
        assert_eq!(a.check(Need::Act, &creds()), Verdict::Unauthorized);
        let bearer = Credentials {
            authorization: Some(format!("Bearer {TOKEN}")),
            origin: Some("https://evil.example".into()),
            ..creds()
        };
        assert_eq!(
            a.check(Need::Act, &bearer),
            Verdict::Allowed { session: false }
        );
        let cookie = Credentials {
            cookie: Some(format!("{COOKIE}={}", "s".repeat(64))),
            ..creds()
        };
        assert!(matches!(a.check(Need::Act, &cookie), Verdict::Forbidden(m) if m.contains("CSRF")));
        let with_csrf = Credentials {
            csrf: Some("c".repeat(64)),
            ..cookie.clone()
        };
        assert_eq!(
            a.check(Need::Act, &with_csrf),
            Verdict::Allowed { session: true }
        );
        let same_site = Credentials {
            origin: Some("https://10.0.0.1:9810".into()),
            ..with_csrf.clone()
        };
        assert_eq!(
            a.check(Need::Act, &same_site),
            Verdict::Allowed { session: true }
        );
        let cross = Credentials {
            origin: Some("https://evil.example".into()),
            ..with_csrf.clone()
        };
        assert!(
            matches!(a.check(Need::Act, &cross), Verdict::Forbidden(m) if m.contains("another site"))
        );
        let bad_csrf = Credentials {
            csrf: Some("c".repeat(63) + "d"),
            ..cookie
        };
        assert!(matches!(
            a.check(Need::Act, &bad_csrf),
            Verdict::Forbidden(_)
        ));
        let wrong_cookie = Credentials {
            cookie: Some(format!("{COOKIE}={}", "t".repeat(64))),
            csrf: Some("c".repeat(64)),
            ..creds()
        };
        assert_eq!(a.check(Need::Act, &wrong_cookie), Verdict::Unauthorized);
        assert!(a.session_cookie(true).ends_with("SameSite=Strict; Secure"));
        assert!(a.session_cookie(false).contains("HttpOnly"));
    }

    #[test]
    fn tokens_are_loaded_from_private_files_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        std::fs::write(&p, format!("{TOKEN}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(load_token(&p).unwrap_err().contains("chmod 600"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(load_token(&p).unwrap(), TOKEN);
        std::fs::write(&p, "short\n").unwrap();
        assert!(load_token(&p).unwrap_err().contains("at least 16"));
        assert!(load_token(&dir.path().join("none")).is_err());
    }
}
