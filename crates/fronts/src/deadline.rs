//! Deadlines answered as DEADLINE_EXCEEDED. A client's `grpc-timeout` is enforced by tonic's
//! server, which answers CANCELLED ("Timeout expired") when it passes; a client cannot tell that
//! from a cancellation. This layer answers DEADLINE_EXCEEDED a little before tonic would, so the
//! status says what happened. It covers what tonic's timeout covers: the time until the response
//! starts (a stream's later messages are not bounded by it).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// How much earlier than the client's deadline the answer is sent: a tenth of it, at most this,
/// so that it is on the wire before the client's own timer and tonic's fire.
const MARGIN: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy, Default)]
pub struct DeadlineLayer;

impl<S> tower::Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline { inner }
    }
}

#[derive(Debug, Clone)]
pub struct Deadline<S> {
    inner: S,
}

type Answer<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

impl<S, B, R> tower::Service<http::Request<B>> for Deadline<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    R: Default,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future = Answer<http::Response<R>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let deadline = request
            .headers()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_timeout);
        let answer = self.inner.call(request);
        Box::pin(async move {
            let Some(deadline) = deadline else {
                return answer.await;
            };
            let early = deadline.saturating_sub((deadline / 10).min(MARGIN));
            match tokio::time::timeout(early, answer).await {
                Ok(answer) => answer,
                Err(_) => Ok(tonic::Status::deadline_exceeded(format!(
                    "no answer within the client's deadline of {deadline:?}"
                ))
                .into_http()),
            }
        })
    }
}

/// A `grpc-timeout` value: at most 8 digits and a unit (H, M, S, m, u, n).
fn parse_timeout(value: &str) -> Option<Duration> {
    let split = value.len().checked_sub(1)?;
    let (digits, unit) = value.split_at(split);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer, Service};

    #[test]
    fn grpc_timeouts_parse_by_their_unit_and_nothing_else_does() {
        assert_eq!(parse_timeout("3S"), Some(Duration::from_secs(3)));
        assert_eq!(parse_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(
            parse_timeout("99999999u"),
            Some(Duration::from_micros(99_999_999))
        );
        for bad in ["", "S", "123456789S", "3s", "-1S", "1.5S", "3"] {
            assert_eq!(parse_timeout(bad), None, "{bad:?}");
        }
    }

    /// A service that answers after `delay` with 200 and an empty body.
    #[derive(Clone)]
    struct Slow(Duration);

    impl tower::Service<http::Request<()>> for Slow {
        type Response = http::Response<String>;
        type Error = std::convert::Infallible;
        type Future = Answer<http::Response<String>, std::convert::Infallible>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<()>) -> Self::Future {
            let delay = self.0;
            Box::pin(async move {
                tokio::time::sleep(delay).await;
                Ok(http::Response::new("answered".to_owned()))
            })
        }
    }

    fn request(timeout: Option<&str>) -> http::Request<()> {
        let mut request = http::Request::new(());
        if let Some(timeout) = timeout {
            request
                .headers_mut()
                .insert("grpc-timeout", timeout.parse().unwrap());
        }
        request
    }

    fn grpc_status(response: &http::Response<String>) -> Option<&str> {
        response.headers().get("grpc-status")?.to_str().ok()
    }

    #[tokio::test]
    async fn a_passed_deadline_is_answered_deadline_exceeded() {
        let mut service = DeadlineLayer.layer(Slow(Duration::from_secs(30)));
        let started = tokio::time::Instant::now();
        let response = service.call(request(Some("300m"))).await.unwrap();
        assert_eq!(
            grpc_status(&response),
            Some("4"),
            "DEADLINE_EXCEEDED is code 4"
        );
        // Sent a tenth early, not at once.
        assert!(started.elapsed() >= Duration::from_millis(270));
    }

    #[tokio::test]
    async fn answers_in_time_and_requests_without_a_deadline_pass_untouched() {
        let mut service = DeadlineLayer.layer(Slow(Duration::from_millis(50)));
        let response = service.call(request(Some("20S"))).await.unwrap();
        assert_eq!(response.body(), "answered");
        let response = service.call(request(None)).await.unwrap();
        assert_eq!(response.body(), "answered");
        assert_eq!(grpc_status(&response), None);
    }
}
