//! What a client that skips TLS is told, in its own protocol, so that the operator reads
//! "TLS required" rather than a reset connection.

use axum::body::Body;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::io;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What a plain HTTP request gets.
const HTTP_ANSWER: &str = "HTTP/1.1 400 Bad Request\r\n\
    content-type: text/plain; charset=utf-8\r\n\
    connection: close\r\n\
    content-length: 58\r\n\r\n\
    this node serves HTTPS only: use https:// and its CA cert\n";

/// What every plaintext gRPC call ends with (`grpc-message` needs no escaping: printable ASCII
/// without `%`).
const GRPC_MESSAGE: &str = "this node serves gRPC over TLS only: connect with --ca FILE \
    (the CA that signed its certificate) or an https:// address";

/// Reads the plain request's first bytes, answers `400`, and waits for the client to close, so
/// that unread request bytes do not turn the close into a reset that loses the answer.
pub(super) async fn refuse_http(mut tcp: TcpStream) -> io::Result<()> {
    let mut discard = [0u8; 8192];
    let _ = tcp.read(&mut discard).await?;
    tcp.write_all(HTTP_ANSWER.as_bytes()).await?;
    tcp.shutdown().await?;
    while tcp.read(&mut discard).await? > 0 {}
    Ok(())
}

/// Speaks HTTP/2 on the connection and ends every call at once with `UNAVAILABLE`, as a
/// trailers-only gRPC response. The caller's timeout bounds how long the connection lasts.
pub(super) async fn refuse_grpc(tcp: TcpStream) -> io::Result<()> {
    let service = hyper::service::service_fn(|_request| async {
        let answer = http::Response::builder()
            .header("content-type", "application/grpc")
            .header("grpc-status", (tonic::Code::Unavailable as i32).to_string())
            .header("grpc-message", GRPC_MESSAGE)
            .body(Body::empty());
        // Static, valid headers: the builder cannot fail.
        Ok::<_, Infallible>(answer.unwrap_or_default())
    });
    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(tcp), service)
        .await
        .map_err(io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http_answer_declares_its_body_length() {
        let (head, body) = HTTP_ANSWER.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
    }

    #[test]
    fn the_grpc_message_needs_no_percent_encoding() {
        assert!(
            GRPC_MESSAGE
                .bytes()
                .all(|b| (0x20..=0x7e).contains(&b) && b != b'%'),
            "{GRPC_MESSAGE}"
        );
    }
}
