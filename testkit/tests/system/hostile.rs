//! Slow and hostile clients against the server binary: a thousand idle
//! connections and slow-loris clients (headers or a body a few bytes at a
//! time) do not stop health checks and submits; the server closes what
//! dawdles past its timeouts (408 for a body) and holds no more
//! connections than `--max-connections`.

use gpuplane_testkit::process::ServerProcess;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const IDLE: usize = 1000;
const SLOW: usize = 25;

async fn server(flags: &[&str]) -> (tempfile::TempDir, ServerProcess, String) {
    let dir = tempfile::tempdir().unwrap();
    let (data, token, _) = ServerProcess::bootstrap(dir.path(), 0).await;
    let server = ServerProcess::start(&data, flags).await;
    (dir, server, token)
}

fn address(server: &ServerProcess) -> String {
    server.url.trim_start_matches("http://").to_string()
}

/// Reads what the server sends until it closes the connection (or `wait` passes).
async fn read_until_closed(stream: &mut TcpStream, wait: Duration) -> Option<String> {
    let mut answer = Vec::new();
    match tokio::time::timeout(wait, stream.read_to_end(&mut answer)).await {
        Ok(_) => Some(String::from_utf8_lossy(&answer).into_owned()),
        Err(_) => None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_connections_and_slow_loris_clients_do_not_stop_the_api() {
    let (_dir, server, token) = server(&["--header-timeout-s", "3", "--request-body-timeout-s", "3"]).await;
    let address = address(&server);
    let mut idle = Vec::new();
    for _ in 0..IDLE {
        idle.push(TcpStream::connect(&address).await.unwrap());
    }
    // Slow headers: a byte of the request head every 100 ms, never finished in time.
    let mut slow_heads = Vec::new();
    for _ in 0..SLOW {
        let address = address.clone();
        slow_heads.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(&address).await.unwrap();
            for byte in b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: "
                .iter()
                .cycle()
                .take(200)
            {
                if stream.write_all(&[*byte]).await.is_err() {
                    break; // closed by the server
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            read_until_closed(&mut stream, Duration::from_secs(1)).await
        }));
    }
    // Slow bodies: a submit whose 10,000-byte body comes a byte every 100 ms.
    let mut slow_bodies = Vec::new();
    for _ in 0..SLOW {
        let (address, token) = (address.clone(), token.clone());
        slow_bodies.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(&address).await.unwrap();
            let head = format!(
                "POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
                 Content-Type: application/json\r\nContent-Length: 10000\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).await.unwrap();
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(6) {
                if stream.write_all(b" ").await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                let mut peek = [0u8; 1];
                if let Ok(Ok(n)) =
                    tokio::time::timeout(Duration::from_millis(1), stream.peek(&mut peek)).await
                    && n > 0
                {
                    break; // the answer came
                }
            }
            read_until_closed(&mut stream, Duration::from_secs(2)).await
        }));
    }

    // Meanwhile the API answers at its usual pace.
    let http = reqwest::Client::new();
    let mut slowest = Duration::ZERO;
    for n in 0..20 {
        let started = Instant::now();
        let health = http
            .get(format!("{}/api/v1/health", server.url))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), 200);
        let submit = http
            .post(format!("{}/api/v1/jobs", server.url))
            .bearer_auth(&token)
            .json(&json!({"name": format!("meanwhile-{n}"), "command": ["true"]}))
            .send()
            .await
            .unwrap();
        assert_eq!(submit.status(), 201);
        slowest = slowest.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        slowest < Duration::from_secs(1),
        "a health check and a submit took {slowest:?}"
    );

    for slow in slow_heads {
        let answer = slow.await.unwrap();
        assert!(
            answer.is_some_and(|text| !text.contains("200 OK")),
            "a slow head is cut off, not served"
        );
    }
    for slow in slow_bodies {
        let answer = slow
            .await
            .unwrap()
            .expect("the server answers a slow body and closes");
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("request_timeout"), "{answer}");
    }
    // The idle connections were closed too (header timeout: 3 s).
    let mut closed = 0;
    for stream in &mut idle {
        if read_until_closed(stream, Duration::from_secs(5)).await.is_some() {
            closed += 1;
        }
    }
    assert_eq!(closed, IDLE, "every idle connection is closed by the server");
    println!(
        "hostile: {IDLE} idle connections, {SLOW} slow heads, {SLOW} slow bodies: the slowest health check + submit took {slowest:?}; \
         slow bodies answered 408, slow heads and idle connections closed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn connections_past_the_limit_wait_until_one_closes() {
    let (_dir, server, _token) = server(&["--max-connections", "10"]).await;
    let address = address(&server);
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(TcpStream::connect(&address).await.unwrap());
    }
    let http = reqwest::Client::new();
    let health = || {
        http.get(format!("{}/api/v1/health", server.url))
            .timeout(Duration::from_millis(500))
            .send()
    };
    assert!(
        health().await.is_err(),
        "an eleventh connection is not served while ten are open"
    );
    held.pop();
    let answer = health().await.expect("one slot is free again");
    assert_eq!(answer.status(), 200);
}
