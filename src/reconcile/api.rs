//! Calls to a provider's API: the credential on every request, `429` +
//! `Retry-After` and transient failures retried with exponential backoff,
//! and errors that never carry the credential or the response body (an API
//! may echo the key back, as Stripe's "Invalid API Key provided: sk_…" does).

use super::ReconcileError;
use crate::config::reconcile::ApiKind;
use crate::primitives::backoff;
use crate::primitives::time::Millis;
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
        retry_after
            .unwrap_or_else(|| backoff::ceiling(n, self.base, self.max))
            .min(self.max)
    }
}

/// `Retry-After`, in seconds or as an HTTP date.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get(http::header::RETRY_AFTER)?.to_str().ok()?;
    backoff::parse_retry_after(v, std::time::SystemTime::now())
}

/// The wait an API asks for when this answer is a rate limit: its
/// `Retry-After`, or, with `x-ratelimit-remaining: 0`, the time until
/// `x-ratelimit-reset` (UTC epoch seconds; at least a second). GitHub
/// limits with either header on a `403` or a `429`
/// (<https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api#exceeding-the-rate-limit>).
fn asked_wait(headers: &HeaderMap, now_secs: i64) -> Option<Duration> {
    if let Some(d) = retry_after(headers) {
        return Some(d);
    }
    let header = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    if header("x-ratelimit-remaining")? != "0" {
        return None;
    }
    let reset: i64 = header("x-ratelimit-reset")?.parse().ok()?;
    Some(Duration::from_secs(
        reset.saturating_sub(now_secs).max(1) as u64
    ))
}

/// GitHub's wait for a secondary rate limit that names none (same page).
const SECONDARY_LIMIT_WAIT: Duration = Duration::from_secs(60);

/// A `403` that is GitHub's secondary rate limit without either header: its
/// message says so, and GitHub asks for at least a minute's wait (same page).
/// The body is only looked at, never logged or returned.
fn says_rate_limit(body: &[u8]) -> bool {
    const NEEDLE: &[u8] = b"rate limit";
    body.windows(NEEDLE.len())
        .any(|w| w.eq_ignore_ascii_case(NEEDLE))
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
    /// `429`, `5xx`, a `403` that is a rate limit ([`asked_wait`],
    /// [`says_rate_limit`]) and transport errors. Any other `401`/`403` is a
    /// credential problem; other statuses fail at once. A wait the provider
    /// asks for beyond `retry.max` ends the call with
    /// [`ReconcileError::RateLimited`] instead of being cut short (the
    /// next run resumes from the checkpoint).
    pub async fn send(
        &self,
        what: &'static str,
        build: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<Answer, ReconcileError> {
        self.try_send(what, || Ok(build())).await
    }

    /// [`Api::send`] for a request whose building may fail: its credential
    /// is made per try (a GitHub App's JWT, fresh however long the retries
    /// wait), and an error there ends the call.
    pub async fn try_send(
        &self,
        what: &'static str,
        build: impl Fn() -> Result<reqwest::RequestBuilder, ReconcileError>,
    ) -> Result<Answer, ReconcileError> {
        let mut n = 0;
        loop {
            n += 1;
            let last = n >= self.retry.attempts;
            let (wait, why) = match build()?.send().await {
                Ok(res) => {
                    let status = res.status();
                    if status.is_success() {
                        let headers = res.headers().clone();
                        let body = res.bytes().await.map_err(|e| self.transport(what, &e))?;
                        return Ok(Answer { headers, body });
                    }
                    let mut after = asked_wait(res.headers(), Millis::now().as_secs());
                    if status == StatusCode::FORBIDDEN
                        && after.is_none()
                        && says_rate_limit(&res.bytes().await.unwrap_or_default())
                    {
                        after = Some(SECONDARY_LIMIT_WAIT);
                    }
                    let limited = status == StatusCode::TOO_MANY_REQUESTS
                        || (status == StatusCode::FORBIDDEN && after.is_some());
                    if !limited
                        && (status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN)
                    {
                        return Err(ReconcileError::Credential {
                            api: self.kind.as_str(),
                            status: status.as_u16(),
                        });
                    }
                    if !limited && !status.is_server_error() {
                        return Err(ReconcileError::Status {
                            api: self.kind.as_str(),
                            what,
                            status: status.as_u16(),
                        });
                    }
                    if let Some(asked) = after.filter(|a| limited && *a > self.retry.max) {
                        return Err(ReconcileError::RateLimited {
                            api: self.kind.as_str(),
                            what,
                            wait_s: asked.as_secs(),
                        });
                    }
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
    fn a_rate_limit_asks_its_wait_by_retry_after_or_by_the_reset_time() {
        let h = |pairs: &[(&'static str, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(*k, v.parse().unwrap());
            }
            m
        };
        let now = 1_700_000_000;
        assert_eq!(
            asked_wait(&h(&[("retry-after", "7")]), now),
            Some(Duration::from_secs(7))
        );
        let reset = (now + 30).to_string();
        assert_eq!(
            asked_wait(
                &h(&[
                    ("x-ratelimit-remaining", "0"),
                    ("x-ratelimit-reset", &reset)
                ]),
                now
            ),
            Some(Duration::from_secs(30))
        );
        // A reset already past still waits a second.
        let past = (now - 5).to_string();
        assert_eq!(
            asked_wait(
                &h(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", &past)]),
                now
            ),
            Some(Duration::from_secs(1))
        );
        // Requests left: not a rate limit (a 403 then is about the credential).
        assert_eq!(
            asked_wait(
                &h(&[
                    ("x-ratelimit-remaining", "12"),
                    ("x-ratelimit-reset", &reset)
                ]),
                now
            ),
            None
        );
        assert_eq!(asked_wait(&HeaderMap::new(), now), None);
        assert!(says_rate_limit(
            br#"{"message":"You have exceeded a secondary rate limit."}"#
        ));
        assert!(!says_rate_limit(
            br#"{"message":"Resource not accessible by integration"}"#
        ));
    }

    /// A loopback API answering every call with `status`, `headers` and
    /// `body`; returns its base URL.
    async fn answering(
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: &'static str,
    ) -> String {
        use axum::response::IntoResponse;
        let app = axum::Router::new().fallback(move || {
            let headers = headers.clone();
            async move {
                let mut res = (StatusCode::from_u16(status).unwrap(), body).into_response();
                for (k, v) in headers {
                    res.headers_mut().insert(k, v.parse().unwrap());
                }
                res
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    fn github_api() -> Api {
        Api {
            client: reqwest::Client::new(),
            kind: ApiKind::GitHub,
            retry: Retry {
                attempts: 3,
                base: Duration::from_millis(10),
                max: Duration::from_secs(2),
            },
        }
    }

    /// The error one `GET url` ends with.
    async fn error_of(api: &Api, url: &str) -> ReconcileError {
        match api.send("list", || api.client.get(url)).await {
            Ok(_) => panic!("{url} answered 2xx"),
            Err(e) => e,
        }
    }

    /// A rate limit whose reset is further away than the run waits ends
    /// the call as rate-limited (not a credential error, not a wait cut
    /// short); a 403 that is no rate limit is the credential's.
    #[tokio::test]
    async fn a_403_is_a_rate_limit_only_when_github_says_so() {
        let api = github_api();
        let reset = (Millis::now().as_secs() + 3600).to_string();
        let url = answering(
            403,
            vec![
                ("x-ratelimit-remaining", "0".into()),
                ("x-ratelimit-reset", reset),
            ],
            r#"{"message":"API rate limit exceeded"}"#,
        )
        .await;
        let e = error_of(&api, &url).await;
        assert!(
            matches!(e, ReconcileError::RateLimited { wait_s, .. } if wait_s > 3000),
            "{e}"
        );
        let url = answering(403, vec![], r#"{"message":"Must have admin rights"}"#).await;
        let e = error_of(&api, &url).await;
        assert!(
            matches!(e, ReconcileError::Credential { status: 403, .. }),
            "{e}"
        );
    }

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
