//! `--metrics HOST:PORT` of the long-running commands (`run`, `elect`,
//! `leader --watch`, `serve`): the handle's metrics in Prometheus's text
//! format at `GET /metrics`, over a minimal HTTP/1.1 server of its own (a
//! request line and headers read within bounds, one response, the
//! connection closed), so that no web framework is built for one page.

use std::sync::Arc;
use std::time::Duration;

use redlock::metrics::{render_server_info, CONTENT_TYPE};
use redlock::Redlock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::exit::Failure;

/// A request's line and headers may be this long at most; Prometheus
/// sends a few hundred bytes.
const MAX_REQUEST: usize = 8 * 1024;
/// A client gets this long to send its request, and to take the reply.
const CLIENT_TIME: Duration = Duration::from_secs(10);
/// After its reply, a client's further input is read and dropped this
/// long, and this much, at most, until it closes.
const LINGER: Duration = Duration::from_secs(1);
const MAX_LINGER_BYTES: usize = 1024 * 1024;
/// Scrapes served at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 16;

/// Listens on `addr` for scrapes of `redlock`'s metrics, until the task
/// returned is aborted (the command's end). A bad or busy address is a
/// usage error naming it.
pub async fn serve(redlock: &Redlock, addr: &str) -> Result<JoinHandle<()>, Failure> {
    let listener = TcpListener::bind(addr).await.map_err(|e| Failure::usage(format!("--metrics {addr}: cannot listen there: {e}")))?;
    if let Ok(local) = listener.local_addr() {
        eprintln!("redlock: metrics on http://{local}/metrics");
    }
    let redlock = redlock.clone();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    Ok(tokio::spawn(async move {
        loop {
            let Ok(slot) = Arc::clone(&slots).acquire_owned().await else { return };
            let Ok((stream, _)) = listener.accept().await else {
                // Out of file descriptors, or the like: try again shortly.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let redlock = redlock.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(CLIENT_TIME, answer(stream, &redlock)).await;
                drop(slot);
            });
        }
    }))
}

/// Reads one request from `stream` and answers it; the connection closes.
async fn answer(mut stream: TcpStream, redlock: &Redlock) -> std::io::Result<()> {
    let mut request = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let head_end = loop {
        if let Some(end) = find_head_end(&request) {
            break Some(end);
        }
        if request.len() > MAX_REQUEST {
            break None;
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            // Closed before a whole request: nothing to answer.
            return Ok(());
        }
        request.extend_from_slice(buf.get(..n).unwrap_or_default());
    };
    let response = match head_end.and_then(|end| request.get(..end)).map(route) {
        Some(Route::Metrics) => {
            // The client's own numbers, then each server's module's.
            let mut text = redlock.metrics().to_prometheus();
            text.push_str(&render_server_info(&redlock.server_info().await));
            reply("200 OK", CONTENT_TYPE, &text)
        }
        Some(Route::NotFound) => reply("404 Not Found", "text/plain; charset=utf-8", "not found: the metrics are at /metrics\n"),
        Some(Route::NotAllowed) => reply("405 Method Not Allowed", "text/plain; charset=utf-8", "only GET /metrics\n"),
        Some(Route::Bad) => reply("400 Bad Request", "text/plain; charset=utf-8", "bad request\n"),
        None => reply("431 Request Header Fields Too Large", "text/plain; charset=utf-8", "request too large\n"),
    };
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await?;
    // What the client still sends (the rest of a request too large) is
    // read and dropped until it closes, briefly: closed with unread input,
    // the connection would be reset, and the client could lose the reply.
    let _ = tokio::time::timeout(LINGER, async {
        let mut left = MAX_LINGER_BYTES;
        while left > 0 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
    Ok(())
}

/// Where the blank line that ends a request's head is, when it came.
fn find_head_end(request: &[u8]) -> Option<usize> {
    request.windows(4).position(|w| w == b"\r\n\r\n").or_else(|| request.windows(2).position(|w| w == b"\n\n"))
}

#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    NotFound,
    NotAllowed,
    Bad,
}

/// What a request's head asks for.
fn route(head: &[u8]) -> Route {
    let Ok(head) = std::str::from_utf8(head) else { return Route::Bad };
    let mut words = head.lines().next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version)) = (words.next(), words.next(), words.next()) else { return Route::Bad };
    if words.next().is_some() || !version.starts_with("HTTP/1.") {
        return Route::Bad;
    }
    let path = target.split('?').next().unwrap_or_default();
    match (method, path) {
        ("GET", "/metrics") => Route::Metrics,
        (_, "/metrics") => Route::NotAllowed,
        _ => Route::NotFound,
    }
}

fn reply(status: &str, content_type: &str, body: &str) -> String {
    format!("HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_of_the_metrics_path_is_served_and_garbage_is_a_bad_request() {
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\nHost: x"), Route::Metrics);
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.0"), Route::Metrics);
        assert_eq!(route(b"GET / HTTP/1.1"), Route::NotFound);
        assert_eq!(route(b"POST /metrics HTTP/1.1"), Route::NotAllowed);
        assert_eq!(route(b"GET /metrics"), Route::Bad);
        assert_eq!(route(b"\xff\xfe"), Route::Bad);
        assert_eq!(route(b""), Route::Bad);
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n\r\n"), Some(14));
    }
}
