//! The small part of URL handling the plugin needs: split an absolute
//! `http(s)` URL into what `wasi:http` asks for, and join a base with a path.
//!
//! The runner validates the configured URL fully when it loads the tenant;
//! here we only take it apart.

#[derive(Debug, Clone, PartialEq)]
pub struct Url {
    pub https: bool,
    /// `host[:port]`.
    pub authority: String,
    /// Starts with `/`.
    pub path_and_query: String,
}

impl Url {
    pub fn parse(text: &str) -> Result<Url, String> {
        let (https, rest) = if let Some(rest) = text.strip_prefix("http://") {
            (false, rest)
        } else if let Some(rest) = text.strip_prefix("https://") {
            (true, rest)
        } else {
            return Err(format!("{text:?} is not an http:// or https:// URL"));
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err(format!("{text:?} has no usable host"));
        }
        let path_and_query = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        Ok(Url {
            https,
            authority: authority.to_string(),
            path_and_query,
        })
    }
}

/// Joins an API base URL and an absolute API path without doubling slashes.
pub fn join(base: &str, path: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_authority_and_path() {
        let url = Url::parse("http://127.0.0.1:8081/api/v1/devices?x=1").unwrap();
        assert_eq!(url.authority, "127.0.0.1:8081");
        assert_eq!(url.path_and_query, "/api/v1/devices?x=1");
        assert!(!url.https);
        let url = Url::parse("https://example.com").unwrap();
        assert_eq!(url.path_and_query, "/");
        assert!(url.https);
    }

    #[test]
    fn rejects_other_schemes_and_userinfo() {
        assert!(Url::parse("ftp://x/").is_err());
        assert!(Url::parse("http://user@host/").is_err());
        assert!(Url::parse("http:///path").is_err());
    }

    #[test]
    fn join_keeps_one_slash() {
        assert_eq!(join("http://h:1/", "/api"), "http://h:1/api");
        assert_eq!(join("http://h:1/base", "api"), "http://h:1/base/api");
    }
}
