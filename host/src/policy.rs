//! Which origins a plugin may send HTTP requests to.
//!
//! Pure data: parsed once from configuration, matched on scheme, host and
//! port together for every outbound request. Matching on the host alone would
//! let a plugin reach any other service on an allowed machine.

use std::fmt;

/// One allowed origin: `scheme://host[:port]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedOrigin {
    scheme: String,
    host: String,
    port: u16,
}

/// A malformed allow-list entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid outbound origin {entry:?}: {problem}; expected scheme://host[:port], e.g. http://127.0.0.1:8081"
)]
pub struct PolicyError {
    /// The entry as given.
    pub entry: String,
    /// What is wrong with it.
    pub problem: String,
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

impl AllowedOrigin {
    /// Parses `scheme://host[:port]`; a path, credentials, a wildcard or
    /// another scheme is refused with the expected form.
    pub fn parse(entry: &str) -> Result<AllowedOrigin, PolicyError> {
        let fail = |problem: &str| PolicyError {
            entry: entry.to_string(),
            problem: problem.to_string(),
        };
        let url = url::Url::parse(entry).map_err(|e| fail(&e.to_string()))?;
        let scheme = url.scheme().to_string();
        if default_port(&scheme).is_none() {
            return Err(fail("the scheme must be http or https"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(fail("it must not contain credentials"));
        }
        if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            return Err(fail("it must be an origin only, without a path"));
        }
        let host = url
            .host_str()
            .ok_or_else(|| fail("it has no host"))?
            .to_ascii_lowercase();
        if host.contains('*') {
            return Err(fail("wildcards are not supported; list each origin"));
        }
        let port = url
            .port_or_known_default()
            .ok_or_else(|| fail("it has no port"))?;
        Ok(AllowedOrigin { scheme, host, port })
    }

    /// The origin of an absolute URL (the device API's), as an allow-list
    /// entry.
    pub fn of_url(url: &str) -> Result<AllowedOrigin, PolicyError> {
        let parsed = url::Url::parse(url).map_err(|e| PolicyError {
            entry: url.to_string(),
            problem: e.to_string(),
        })?;
        AllowedOrigin::parse(&parsed.origin().ascii_serialization())
    }

    /// Whether a request to `uri` goes to this origin.
    pub fn allows(&self, uri: &http::Uri) -> bool {
        let Some(scheme) = uri.scheme_str() else {
            return false;
        };
        let Some(host) = uri.host() else {
            return false;
        };
        let Some(port) = uri.port_u16().or_else(|| default_port(scheme)) else {
            return false;
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let mine = self.host.trim_start_matches('[').trim_end_matches(']');
        scheme.eq_ignore_ascii_case(&self.scheme)
            && host.eq_ignore_ascii_case(mine)
            && port == self.port
    }
}

impl fmt::Display for AllowedOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

/// A tenant's whole allow-list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutboundPolicy {
    allowed: Vec<AllowedOrigin>,
}

impl OutboundPolicy {
    /// A policy allowing exactly these origins.
    pub fn new(allowed: Vec<AllowedOrigin>) -> OutboundPolicy {
        OutboundPolicy { allowed }
    }

    /// Whether any allowed origin matches `uri`.
    pub fn allows(&self, uri: &http::Uri) -> bool {
        self.allowed.iter().any(|o| o.allows(uri))
    }

    /// The allowed origins, for logs.
    pub fn origins(&self) -> &[AllowedOrigin] {
        &self.allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(s: &str) -> http::Uri {
        s.parse().unwrap()
    }

    #[test]
    fn allowed_hosts_accepts_the_exact_origin() {
        let o = AllowedOrigin::parse("http://127.0.0.1:8081").unwrap();
        assert!(o.allows(&uri("http://127.0.0.1:8081/api/v1/devices")));
    }

    #[test]
    fn allowed_hosts_accepts_default_ports_and_any_case() {
        let o = AllowedOrigin::parse("https://API.example.com").unwrap();
        assert!(o.allows(&uri("https://api.example.com/x")));
        assert!(o.allows(&uri("https://api.example.com:443/x")));
    }

    #[test]
    fn allowed_hosts_rejects_another_port_on_the_same_host() {
        let o = AllowedOrigin::parse("http://127.0.0.1:8081").unwrap();
        assert!(!o.allows(&uri("http://127.0.0.1:8082/")));
    }

    #[test]
    fn allowed_hosts_rejects_another_scheme_or_host() {
        let o = AllowedOrigin::parse("http://127.0.0.1:8081").unwrap();
        assert!(!o.allows(&uri("https://127.0.0.1:8081/")));
        assert!(!o.allows(&uri("http://localhost:8081/")));
        assert!(!o.allows(&uri("/relative")));
    }

    #[test]
    fn allowed_hosts_accepts_ipv6_literals() {
        let o = AllowedOrigin::parse("http://[::1]:9000").unwrap();
        assert!(o.allows(&uri("http://[::1]:9000/")));
    }

    #[test]
    fn allowed_hosts_rejects_malformed_entries_with_the_expected_form() {
        for bad in [
            "127.0.0.1:8081",
            "ftp://h",
            "http://h/path",
            "http://u:p@h",
            "http://*.example.com",
            "not a url",
        ] {
            let err = AllowedOrigin::parse(bad).unwrap_err();
            assert!(
                err.to_string().contains("expected scheme://host[:port]"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn origin_of_a_url_drops_the_path() {
        let o = AllowedOrigin::of_url("http://127.0.0.1:8081/api/base").unwrap();
        assert_eq!(o.to_string(), "http://127.0.0.1:8081");
    }

    #[test]
    fn an_empty_policy_denies_everything() {
        assert!(!OutboundPolicy::default().allows(&uri("http://127.0.0.1/")));
    }
}
