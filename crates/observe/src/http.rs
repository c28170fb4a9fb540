//! A minimal HTTP/1.1 server for `GET /metrics`.
//!
//! Why not tokio/axum/hyper: the exporter answers one scraper every 15 s
//! or so with a few kilobytes; an async runtime and an HTTP stack would
//! add dozens of crates and most of the build time on a 2-core machine
//! for no gain. This server handles one connection at a time on one
//! thread, reads at most `MAX_REQUEST` bytes of request head with a read
//! timeout (so a slow or hostile client cannot hold it forever), answers
//! and closes the connection (`Connection: close`, no keep-alive).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// Largest request head accepted; scrapers send a few hundred bytes.
pub(crate) const MAX_REQUEST: usize = 8192;
const TIMEOUT: Duration = Duration::from_secs(5);

/// What the handler returns for `/metrics`.
pub type Body = Result<String, String>;

/// Serves forever (or until accepting fails). `metrics` is called once
/// per `GET /metrics`; an `Err` becomes a 500 with its message.
pub fn serve(listener: &TcpListener, mut metrics: impl FnMut() -> Body) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept()?;
        // One bad client must not stop the exporter.
        let _ = handle(stream, &mut metrics);
    }
}

/// Answers one connection.
pub(crate) fn handle(mut stream: TcpStream, metrics: &mut impl FnMut() -> Body) -> std::io::Result<()> {
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let head_complete = loop {
        if buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n") {
            break true;
        }
        if buf.len() >= MAX_REQUEST {
            break false;
        }
        match stream.read(&mut chunk) {
            Ok(0) => break !buf.is_empty(),
            Ok(n) => buf.extend_from_slice(chunk.get(..n).unwrap_or(&[])),
            Err(e) => return Err(e),
        }
    };
    let (status, ctype, body) = if !head_complete {
        ("431 Request Header Fields Too Large", "text/plain", "request too large\n".to_string())
    } else {
        let head = String::from_utf8_lossy(&buf);
        let mut first = head.lines().next().unwrap_or("").split_whitespace();
        let (method, target) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
        let path = target.split('?').next().unwrap_or("");
        match (method, path) {
            ("GET" | "HEAD", "/metrics") => match metrics() {
                Ok(text) => ("200 OK", crate::prom::CONTENT_TYPE, text),
                Err(e) => ("500 Internal Server Error", "text/plain", format!("{e}\n")),
            },
            ("GET" | "HEAD", "/") => ("200 OK", "text/plain", "numaplace exporter: metrics at /metrics\n".to_string()),
            ("GET" | "HEAD", _) => ("404 Not Found", "text/plain", "not found: try /metrics\n".to_string()),
            _ => ("405 Method Not Allowed", "text/plain", "only GET\n".to_string()),
        }
    };
    let is_head = buf.starts_with(b"HEAD ");
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !is_head {
        response.extend_from_slice(body.as_bytes());
    }
    stream.write_all(&response)?;
    stream.flush()?;
    // Closing with unread request bytes makes the kernel send a reset,
    // which can destroy the response in flight: half-close, then discard
    // a bounded amount of what the client still sends.
    stream.shutdown(std::net::Shutdown::Write)?;
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    let mut drained = 0;
    while drained < 16 * MAX_REQUEST {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
    Ok(())
}
