//! Calls to a provider's API: the credential on every request, `429` +
//! `Retry-After` and transient failures retried with exponential backoff,
//! and errors that never carry the credential or the response body (an API
//! may echo the key back, as Stripe's "Invalid API Key provided: sk_…" does).

use super::ReconcileError;
use crate::config::reconcile::ApiKind;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use std::time::Duration;

/// How a provider call is retried.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Tries in all, the first included.
    pub attempts: u32,
    /// First backoff; doubles per retry.
    pub base: Duration,
    /// Longest single wait, also the cap on a `Retry-After`.
    pub max: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            attempts: 6,
            base: Duration::from_millis(500),
            max: Duration::from_secs(60),
        }
    }
}

impl Retry {
    /// The wait before retry `n` (1-based): the provider's `Retry-After`
    /// when it sent one, otherwise `base · 2^(n-1)`; never above `max`.
    pub fn wait(&self, n: u32, retry_after: Option<Duration>) -> Duration {
        let backoff = self
            .base
            .saturating_mul(1u32 << (n.saturating_sub(1)).min(16));
        retry_after.unwrap_or(backoff).min(self.max)
    }
}

/// `Retry-After` in seconds (the HTTP-date form is not used by these APIs).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get(http::header::RETRY_AFTER)?.to_str().ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// An answer that was not an error.
pub struct Answer {
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// One provider's API: its client, kind (for messages) and retry policy.
#[derive(Clone)]
pub struct Api {
    pub client: reqwest::Client,
    pub kind: ApiKind,
    pub retry: Retry,
}

impl Api {
    /// Sends the request `build` makes (called again per retry), retrying
    /// `429`, `5xx` and transport errors. `401`/`403` are a credential
    /// problem; other statuses fail at once.
    pub async fn send(
        &self,
        what: &'static str,
        build: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<Answer, ReconcileError> {
        let mut n = 0;
        loop {
            n += 1;
            let last = n >= self.retry.attempts;
            let (wait, why) = match build().send().await {
                Ok(res) => {
                    let status = res.status();
                    if status.is_success() {
                        let headers = res.headers().clone();
                        let body = res.bytes().await.map_err(|e| self.transport(what, &e))?;
                        return Ok(Answer { headers, body });
                    }
                    if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
                        return Err(ReconcileError::Credential {
                            api: self.kind.as_str(),
                            status: status.as_u16(),
                        });
                    }
                    if status != StatusCode::TOO_MANY_REQUESTS && !status.is_server_error() {
                        return Err(ReconcileError::Status {
                            api: self.kind.as_str(),
                            what,
                            status: status.as_u16(),
                        });
                    }
                    let after = retry_after(res.headers());
                    if last {
                        return Err(ReconcileError::Status {
                            api: self.kind.as_str(),
                            what,
                            status: status.as_u16(),
                        });
                    }
                    (self.retry.wait(n, after), status.as_u16().to_string())
                }
                Err(e) => {
                    if last {
                        return Err(self.transport(what, &e));
                    }
                    (self.retry.wait(n, None), "transport error".to_owned())
                }
            };
            tracing::debug!(
                api = self.kind.as_str(),
                what,
                attempt = n,
                why,
                wait_ms = wait.as_millis() as u64,
                "provider API call retried"
            );
            tokio::time::sleep(wait).await;
        }
    }

    fn transport(&self, what: &'static str, e: &reqwest::Error) -> ReconcileError {
        // Without the URL: a query could carry a cursor, never a key, but
        // the message stays short and fixed either way.
        let kind = if e.is_timeout() {
            "timed out"
        } else if e.is_connect() {
            "could not connect"
        } else {
            "request failed"
        };
        ReconcileError::Unreachable {
            api: self.kind.as_str(),
            what,
            why: kind,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_follow_retry_after_or_double_and_are_capped() {
        let r = Retry {
            attempts: 5,
            base: Duration::from_millis(100),
            max: Duration::from_secs(2),
        };
        assert_eq!(r.wait(1, None), Duration::from_millis(100));
        assert_eq!(r.wait(3, None), Duration::from_millis(400));
        assert_eq!(r.wait(9, None), Duration::from_secs(2));
        assert_eq!(
            r.wait(1, Some(Duration::from_secs(1))),
            Duration::from_secs(1)
        );
        assert_eq!(
            r.wait(1, Some(Duration::from_secs(600))),
            Duration::from_secs(2)
        );
    }
}
