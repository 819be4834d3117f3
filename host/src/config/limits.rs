//! The HTTP server's limits as the flags and the tenants file's `[server]`
//! table give them: a flag wins over the file, the file over the default
//! ([`HttpLimits::default`]).

use crate::mcp::limits::HttpLimits;
use std::time::Duration;

/// The limits one source gives; `None` leaves a limit to the next source.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LimitsDraft {
    /// `header_read_timeout_ms`.
    pub header_read_timeout_ms: Option<u64>,
    /// `max_connections`.
    pub max_connections: Option<usize>,
    /// `max_listen_streams` (per tenant).
    pub max_listen_streams: Option<usize>,
    /// `max_requests_per_second` (per tenant; 0 turns it off).
    pub max_requests_per_second: Option<u32>,
}

/// A limit that cannot work, by its key.
#[derive(Debug, PartialEq)]
pub struct LimitProblem {
    /// The key (`max_connections`); a flag is the key with dashes.
    pub key: &'static str,
    /// What is wrong.
    pub message: String,
}

impl LimitsDraft {
    /// The limits the `settle serve` flags give.
    pub fn from_flags(args: &crate::cli::ServeArgs) -> LimitsDraft {
        LimitsDraft {
            header_read_timeout_ms: args.header_read_timeout_ms,
            max_connections: args.max_connections,
            max_listen_streams: args.max_listen_streams,
            max_requests_per_second: args.max_requests_per_second,
        }
    }

    /// This draft's limits where it gives them, `fallback`'s elsewhere.
    pub fn or(self, fallback: LimitsDraft) -> LimitsDraft {
        LimitsDraft {
            header_read_timeout_ms: self
                .header_read_timeout_ms
                .or(fallback.header_read_timeout_ms),
            max_connections: self.max_connections.or(fallback.max_connections),
            max_listen_streams: self.max_listen_streams.or(fallback.max_listen_streams),
            max_requests_per_second: self
                .max_requests_per_second
                .or(fallback.max_requests_per_second),
        }
    }

    /// The limits, defaults filled in; a timeout of 0 or a connection cap
    /// of 0 would serve nobody and is refused.
    pub fn check(self) -> Result<HttpLimits, LimitProblem> {
        let default = HttpLimits::default();
        if self.header_read_timeout_ms == Some(0) {
            return Err(LimitProblem {
                key: "header_read_timeout_ms",
                message: "must be at least 1: no request's headers arrive in no time".into(),
            });
        }
        if self.max_connections == Some(0) {
            return Err(LimitProblem {
                key: "max_connections",
                message: "must be at least 1: with none, nobody is served".into(),
            });
        }
        Ok(HttpLimits {
            header_read_timeout: self
                .header_read_timeout_ms
                .map_or(default.header_read_timeout, Duration::from_millis),
            max_connections: self.max_connections.unwrap_or(default.max_connections),
            max_listen_streams: self
                .max_listen_streams
                .unwrap_or(default.max_listen_streams),
            max_requests_per_second: self
                .max_requests_per_second
                .unwrap_or(default.max_requests_per_second),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_wins_over_the_file_and_the_file_over_the_default() {
        let flags = LimitsDraft {
            max_connections: Some(5),
            ..LimitsDraft::default()
        };
        let file = LimitsDraft {
            max_connections: Some(7),
            max_requests_per_second: Some(0),
            ..LimitsDraft::default()
        };
        let limits = flags.or(file).check().unwrap();
        assert_eq!(limits.max_connections, 5);
        assert_eq!(limits.max_requests_per_second, 0);
        assert_eq!(
            limits.header_read_timeout,
            HttpLimits::default().header_read_timeout
        );
    }

    #[test]
    fn limits_that_serve_nobody_are_refused() {
        for draft in [
            LimitsDraft {
                header_read_timeout_ms: Some(0),
                ..LimitsDraft::default()
            },
            LimitsDraft {
                max_connections: Some(0),
                ..LimitsDraft::default()
            },
        ] {
            assert!(draft.check().is_err());
        }
    }
}
