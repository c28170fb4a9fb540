//! `numaplace exporter` on a recorded host: the real command, answering
//! over the server crate's HTTP stack (its own hand-written server is
//! gone from observe).

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};

/// The exporter over observe's recorded QEMU host, and its address.
fn exporter() -> (Child, String) {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../observe/tests/data/host-qemu");
    let mut child = Command::new(env!("CARGO_BIN_EXE_numaplace"))
        .args(["exporter", "--listen", "127.0.0.1:0", "--root", root])
        .stderr(Stdio::piped())
        .spawn()
        .expect("run numaplace exporter");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let addr = loop {
        let line = lines.next().expect("the exporter says where it serves").expect("stderr line");
        if let Some(rest) = line.strip_prefix("numaplace exporter: serving http://") {
            break rest.trim_end_matches("/metrics").to_string();
        }
    };
    (child, addr)
}

/// Sends `request` and reads the answer until the server closes (a
/// reset after the answer, when the server closed with the request
/// unread, ends the read too).
fn send(addr: &str, request: &[u8]) -> String {
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(std::time::Duration::from_secs(10))).expect("timeout");
    let _ = c.write_all(request);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn the_exporter_answers_a_scrape_and_refuses_the_rest() {
    let (mut child, addr) = exporter();
    let resp = send(&addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let (head, body) = resp.split_once("\r\n\r\n").expect("a head");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("content-type: text/plain; version=0.0.4"), "{head}");
    assert!(lower.contains(&format!("content-length: {}", body.len())), "{head}");
    assert!(lower.contains("connection: close"), "one answer a connection: {head}");
    assert!(body.contains("numaplace_vm_memory_bytes{vm=\"app3\",pid=\"32218\",node=\"0\"} 208822272"), "{body}");
    let head_only = send(&addr, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(head_only.starts_with("HTTP/1.1 200") && head_only.ends_with("\r\n\r\n"), "{head_only}");
    assert!(send(&addr, b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n").starts_with("HTTP/1.1 404"));
    assert!(send(&addr, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").starts_with("HTTP/1.1 405"));
    let huge = format!("GET /metrics HTTP/1.1\r\nHost: x\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    let resp = send(&addr, huge.as_bytes());
    assert!(resp.starts_with("HTTP/1.1 431"), "a head over 8 KiB: {resp}");
    // Still serving after the refusals.
    assert!(send(&addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").starts_with("HTTP/1.1 200"));
    let _ = child.kill();
    let _ = child.wait();
}
