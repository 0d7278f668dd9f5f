//! Who may use the page: the holder of the one-time token profctl printed. Its first visit
//! (`/?token=T`) is answered with a session cookie (HttpOnly, SameSite=Strict) and the token is
//! spent; every other request must carry the cookie, be a GET, and name a loopback Host
//! (`127.0.0.1`, `[::1]` or `localhost`, any port), so that a page of another site cannot
//! reach the server through a name it rebinds to 127.0.0.1. Every answer carries a content
//! security policy that allows nothing from another origin.

use std::io::Read as _;
use std::sync::Mutex;

use hyper::header::{HeaderMap, HeaderValue};

/// The session cookie's name.
pub const COOKIE: &str = "profctl_ui";

/// The headers every answer carries.
pub const SECURITY_HEADERS: &[(&str, &str)] = &[
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    ("cross-origin-resource-policy", "same-origin"),
    ("cross-origin-opener-policy", "same-origin"),
    ("cache-control", "no-store"),
];

/// What to do with a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Serve it.
    Serve,
    /// The token's first visit: set the cookie (this header value) and send the browser to
    /// the page.
    SignIn(String),
    /// Refuse it: the status and why.
    Refuse(u16, &'static str),
}

/// The token and the session it turns into.
pub struct Guard {
    /// The token, until its first use.
    token: Mutex<Option<String>>,
    session: String,
}

/// 32 random bytes as hex, from the kernel's generator.
pub fn random_hex() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `a` equals `b`, in a time that does not depend on where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Whether a Host header names this machine's loopback (any port): `127.0.0.1`, `[::1]`,
/// `localhost`.
pub fn loopback_host(host: &str) -> bool {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let Some((name, after)) = rest.split_once(']') else {
            return false;
        };
        match after.strip_prefix(':') {
            Some(port) => (name, Some(port)),
            None if after.is_empty() => (name, None),
            None => return false,
        }
    } else {
        match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
        && matches!(name, "127.0.0.1" | "::1" | "localhost")
}

impl Guard {
    /// A guard for `token`, with a session of its own (another random value: the cookie is
    /// not the token, so a token seen in a printed link is worth nothing once spent).
    pub fn new(token: String) -> std::io::Result<Guard> {
        Ok(Guard {
            token: Mutex::new(Some(token)),
            session: random_hex()?,
        })
    }

    /// What to do with a request of `method` for `path?query` with `headers`.
    pub fn check(&self, method: &str, path: &str, query: &str, headers: &HeaderMap) -> Verdict {
        let host = headers.get("host").and_then(|h| h.to_str().ok());
        if !host.is_some_and(loopback_host) {
            return Verdict::Refuse(
                403,
                "refused: the Host must be 127.0.0.1, [::1] or localhost (open the link profctl ui printed)",
            );
        }
        if method != "GET" {
            return Verdict::Refuse(405, "only GET is served");
        }
        if self.has_session(headers) {
            return Verdict::Serve;
        }
        if path == "/" {
            let offered = form_urlencoded::parse(query.as_bytes())
                .find(|(k, _)| k == "token")
                .map(|(_, v)| v.into_owned());
            if let Some(offered) = offered {
                let mut token = self.token.lock().unwrap_or_else(|e| e.into_inner());
                if token.as_deref().is_some_and(|t| same(t, &offered)) {
                    *token = None;
                    return Verdict::SignIn(format!(
                        "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
                        self.session
                    ));
                }
                return Verdict::Refuse(
                    403,
                    "refused: this link's token is wrong or was used already; run profctl ui again for a new one",
                );
            }
        }
        Verdict::Refuse(
            403,
            "refused: no session; open the link profctl ui printed (its token is good for one visit)",
        )
    }

    /// Whether the request carries this server's session cookie.
    fn has_session(&self, headers: &HeaderMap) -> bool {
        headers
            .get_all("cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .any(|(k, v)| k == COOKIE && same(v, &self.session))
    }
}

/// Add [`SECURITY_HEADERS`] to `headers`.
pub fn secure(headers: &mut HeaderMap) {
    for (name, value) in SECURITY_HEADERS {
        headers.insert(*name, HeaderValue::from_static(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn loopback_hosts_only() {
        for ok in [
            "127.0.0.1",
            "127.0.0.1:8080",
            "localhost:1",
            "[::1]:9",
            "[::1]",
        ] {
            assert!(loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "127.0.0.1.evil.example",
            "localhost.evil",
            "127.0.0.2",
            "[::2]:80",
            "127.0.0.1:80x",
            "",
        ] {
            assert!(!loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn the_token_is_spent_on_its_first_visit_and_the_cookie_carries_the_session() {
        let guard = Guard::new("t0k3n".into()).unwrap();
        let host = headers(&[("host", "127.0.0.1:4000")]);
        assert!(matches!(
            guard.check("GET", "/api/top", "", &host),
            Verdict::Refuse(403, _)
        ));
        assert!(matches!(
            guard.check("GET", "/", "token=wrong", &host),
            Verdict::Refuse(403, _)
        ));
        let Verdict::SignIn(cookie) = guard.check("GET", "/", "token=t0k3n", &host) else {
            panic!("the token did not sign in");
        };
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
        assert!(!cookie.contains("t0k3n"), "the cookie is not the token");
        // Spent.
        assert!(matches!(
            guard.check("GET", "/", "token=t0k3n", &host),
            Verdict::Refuse(403, _)
        ));
        let value = cookie.split(';').next().unwrap().to_string();
        let with = headers(&[
            ("host", "localhost:4000"),
            ("cookie", &format!("a=b; {value}")),
        ]);
        assert_eq!(guard.check("GET", "/api/top", "", &with), Verdict::Serve);
        assert!(matches!(
            guard.check("POST", "/api/top", "", &with),
            Verdict::Refuse(405, _)
        ));
        let foreign = headers(&[("host", "evil.example:4000"), ("cookie", &value)]);
        assert!(matches!(
            guard.check("GET", "/api/top", "", &foreign),
            Verdict::Refuse(403, _)
        ));
        let no_host = headers(&[("cookie", &value)]);
        assert!(matches!(
            guard.check("GET", "/", "", &no_host),
            Verdict::Refuse(403, _)
        ));
    }
}
