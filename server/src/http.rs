//! The HTTP server loop and its limits against slow and hostile clients:
//! at most `max_connections` open connections (more wait in the kernel's
//! backlog, so the process never runs out of file descriptors); a connection
//! whose next request head has not fully arrived within `header_timeout` is
//! closed (an idle keep-alive connection, a slow-loris client dripping
//! headers); a request body not received in full within `body_timeout`
//! fails, and the API answers 408. On shutdown each connection finishes
//! the request it is serving.

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tower::ServiceExt;

/// What one client may hold and for how long.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
}

/// Serves `app` on `listener` until `stop` turns true, then lets the open
/// connections finish their current request (the caller bounds how long).
pub async fn serve(listener: TcpListener, app: Router, limits: Limits, mut stop: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (closing, closing_receiver) = watch::channel(false);
    let mut connections = JoinSet::new();
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = turned_true(&mut stop) => break,
        };
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, say: wait rather than spin.
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = turned_true(&mut stop) => break,
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut request: Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(ConnectInfo(remote));
            app.clone().oneshot(request.map(Body::new))
        });
        let mut closing = closing_receiver.clone();
        connections.spawn(async move {
            let _slot = slot;
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                ended = connection.as_mut() => return log_end(ended),
                () = turned_true(&mut closing) => connection.as_mut().graceful_shutdown(),
            }
            log_end(connection.await);
        });
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    let _ = closing.send(true);
    while connections.join_next().await.is_some() {}
}

/// Says why a connection ended early (a client gone mid-request, a head
/// that did not arrive in time, bytes that are not HTTP), at debug level:
/// `GPUPLANE_LOG=gpuplane_server::http=debug`.
fn log_end(ended: Result<(), hyper::Error>) {
    if let Err(error) = ended {
        tracing::debug!(%error, "connection ended");
    }
}

/// Resolves once the flag is true (or its sender is gone).
async fn turned_true(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|value| *value).await;
}

/// The error a request body gives when it did not arrive within the limit.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyTimedOut(Duration);

/// Middleware: the request's body fails with [`BodyTimedOut`] unless it has
/// all arrived within `timeout` of the request head. The agent's log upload
/// relays a whole file at the agent's pace and is left alone, and so is an
/// MLflow artifact upload (gigabytes, after its token was checked), which
/// fails instead when no data comes for as long (`mlflow::artifacts::store`).
pub async fn limit_body_time(timeout: Duration, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if path.starts_with("/api/v1/agent/log-fetch/")
        || path.starts_with("/api/2.0/mlflow-artifacts/artifacts/")
    {
        return next.run(request).await;
    }
    let request = request.map(|body| {
        // One timer for the whole body, polled only when no data is ready.
        let mut expired = Box::pin(tokio::time::sleep(timeout));
        let mut data = body.into_data_stream();
        let mut ended = false;
        Body::from_stream(futures_util::stream::poll_fn(move |context| {
            if ended {
                return Poll::Ready(None);
            }
            if let Poll::Ready(chunk) = data.poll_next_unpin(context) {
                ended = chunk.is_none();
                return Poll::Ready(chunk);
            }
            if expired.as_mut().poll(context).is_ready() {
                ended = true;
                return Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut(timeout)))));
            }
            Poll::Pending
        }))
    });
    next.run(request).await
}

/// Whether reading a body failed because of [`limit_body_time`].
pub fn body_timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if error.is::<BodyTimedOut>() {
            return true;
        }
        cause = error.source();
    }
    false
}

/// Raises this process's open-file limit to the most it may have, so the
/// connection limit (not the default 1,024 descriptors) is what bounds
/// clients. Returns the limit now in force.
#[cfg(unix)]
pub fn raise_open_file_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 on every Unix
    Some(limit.rlim_cur as u64)
}

#[cfg(not(unix))]
pub fn raise_open_file_limit() -> Option<u64> {
    None
}
