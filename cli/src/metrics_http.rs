//! `--metrics-addr HOST:PORT`: this process's metrics as Prometheus text
//! over HTTP.
//!
//! [`serve`] installs the Prometheus recorder of `metrics-exporter-prometheus`
//! as the process's global recorder, binds the address (port 0 picks a free
//! port) and answers, on a background task, every `GET /metrics` (and
//! `GET /`) with the rendered metrics; anything else gets 404. One request
//! per connection (`Connection: close`). It must run before the first store
//! opens, so that the library's one-time descriptions (units, help) reach
//! this recorder.
//!
//! Invariant: the returned address is bound and answering before `serve`
//! returns, so a caller may print it and a scraper may connect at once.

use std::net::SocketAddr;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::CliError;

/// The longest request head read; longer requests get 431 and are closed.
const MAX_HEAD: usize = 8 * 1024;
/// How long a connection may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// Installs the Prometheus recorder and serves it on `addr`; returns the
/// bound address.
pub async fn serve(addr: &str) -> Result<SocketAddr, CliError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::Usage(format!("--metrics-addr {addr}: cannot listen: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| CliError::Failed(format!("--metrics-addr {addr}: {e}")))?;
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| CliError::Failed(format!("cannot install the metrics recorder: {e}")))?;
    tokio::spawn(accept(listener, handle));
    Ok(bound)
}

async fn accept(listener: TcpListener, handle: PrometheusHandle) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(answer(stream, handle.clone()));
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics endpoint: accept failed");
                // A full file table clears by itself; do not spin on it.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Answers one request; errors only end the connection.
async fn answer(mut stream: TcpStream, handle: PrometheusHandle) {
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(head)) => head,
        Ok(Err(status)) => {
            let _ = respond(&mut stream, status, "").await;
            return;
        }
        Err(_) => return,
    };
    let mut parts = head.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let response = match (method, path) {
        ("GET", "/metrics" | "/") => {
            handle.run_upkeep();
            respond(&mut stream, "200 OK", &handle.render()).await
        }
        ("GET", _) => respond(&mut stream, "404 Not Found", "try /metrics\n").await,
        _ => respond(&mut stream, "405 Method Not Allowed", "GET only\n").await,
    };
    if let Err(e) = response {
        tracing::debug!(error = %e, "metrics endpoint: the scraper went away");
    }
}

/// The request line and headers, up to the blank line.
async fn read_head(stream: &mut TcpStream) -> Result<String, &'static str> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|_| "400 Bad Request")?;
        if n == 0 {
            return Err("400 Bad Request");
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        if buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n") {
            return String::from_utf8(buf).map_err(|_| "400 Bad Request");
        }
        if buf.len() > MAX_HEAD {
            return Err("431 Request Header Fields Too Large");
        }
    }
}

async fn respond(stream: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
