//! The accept loop: every connection served by hyper with a deadline for its
//! request head (which is also how long a kept-alive connection may sit idle),
//! a cap on how many are served at once, and a shutdown that ends in bounded
//! time.
//!
//! Past the cap a connection is not dropped unanswered: a second, smaller pool
//! serves it with a short head deadline and no keep-alive, answering
//! `/healthz` for real (so a probe still gets through while the server is
//! flooded) and everything else with 503 and a JSON error saying why. Past
//! that pool too, a connection whose request line arrives at once as
//! `GET /healthz` is still answered (it waits up to `PEEK` for one of the
//! few that look at such connections); any other gets that 503 and is closed.
//! Both pools together stay inside the process's file limit, which is raised
//! to its hard maximum first.
//!
//! One client address holds at most `max_per_client` connections at once, so
//! that one client cannot take the pools from everyone; a connection past it
//! is answered as one past both pools (a health probe still gets through),
//! with 429 and a message naming the cap. Every request carries its
//! connection's address ([`crate::throttle::ClientAddr`]).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::response::Response;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// How the server treats connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How long a connection has to send a request head, and how long a kept-
    /// alive connection may stay idle between requests.
    pub header_timeout: Duration,
    /// Most connections served at once (the file limit may lower it).
    pub max_connections: usize,
    /// Most connections one client address may hold at once.
    pub max_per_client: usize,
    /// How long a shutdown waits for requests in flight before it returns.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_timeout: Duration::from_secs(10),
            max_connections: 4096,
            max_per_client: DEFAULT_MAX_PER_CLIENT,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// [`Limits::max_per_client`] unless set.
pub const DEFAULT_MAX_PER_CLIENT: usize = 512;

/// The refusal written to a connection past its address's cap.
fn per_client_refusal(cap: usize) -> Arc<[u8]> {
    let body = format!(
        "{{\"error\":{{\"code\":\"too_many_connections_from_client\",\"message\":\"this address holds {cap} connections already, the most one client may; close some, or try again shortly\"}}}}"
    );
    format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nconnection: close\r\nretry-after: 1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
    .into()
}

/// Connections held, by client address.
#[derive(Debug, Default)]
struct Clients(Mutex<HashMap<IpAddr, usize>>);

/// One connection of a client, counted until dropped.
struct Held {
    clients: Arc<Clients>,
    addr: IpAddr,
}

impl Clients {
    /// A connection for `addr`, unless it holds `cap` already.
    fn hold(self: &Arc<Self>, addr: IpAddr, cap: usize) -> Option<Held> {
        let mut held = self.0.lock().ok()?;
        let count = held.entry(addr).or_insert(0);
        if *count >= cap {
            return None;
        }
        *count += 1;
        Some(Held {
            clients: Arc::clone(self),
            addr,
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Ok(mut held) = self.clients.0.lock()
            && let Some(count) = held.get_mut(&self.addr)
        {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.addr);
            }
        }
    }
}

/// The head deadline of a connection past the cap.
const OVERFLOW_HEADER_TIMEOUT: Duration = Duration::from_secs(1);
/// Connections past both pools looked at at once for a health probe.
const PEEKERS: usize = 64;
/// How long such a connection has to show it is one.
const PEEK: Duration = Duration::from_millis(100);
/// Files kept free for the store, the sandbox and the rest of the process.
const RESERVED_FILES: usize = 64;

/// The refusal written to a connection past both pools.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\nretry-after: 1\r\ncontent-length: 121\r\n\r\n{\"error\":{\"code\":\"too_many_connections\",\"message\":\"the server is serving all the connections it can; try again shortly\"}}";

/// (main pool, overflow pool) for `limits` under this process's file limit,
/// raising the soft limit to the hard one first.
fn pools(limits: &Limits) -> (usize, usize) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let files = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => {
            if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
                hard
            } else {
                soft
            }
        }
        Err(_) => 1024,
    };
    let budget = usize::try_from(files)
        .unwrap_or(usize::MAX)
        .saturating_sub(RESERVED_FILES)
        .max(32);
    let main = limits.max_connections.min(budget * 3 / 4).max(1);
    let overflow = (budget - main).clamp(16, 1024);
    (main, overflow)
}

/// Serves `app` on `listener` until `shutdown` fires; then stops accepting,
/// lets requests in flight finish (event streams end on the same signal) and
/// returns within `limits.shutdown_grace`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    overflow_app: Router,
    shutdown: CancellationToken,
    limits: Limits,
) -> std::io::Result<()> {
    let (main_size, overflow_size) = pools(&limits);
    let main = Arc::new(Semaphore::new(main_size));
    let overflow = Arc::new(Semaphore::new(overflow_size));
    let peekers = Arc::new(Semaphore::new(PEEKERS));
    let clients = Arc::new(Clients::default());
    // Written whole to refused connections, made once. Only a client past
    // its own cap is lingered over: the server is not out of files then.
    let refusal = Refusal {
        bytes: REFUSAL.into(),
        lingerers: None,
    };
    let per_client = Refusal {
        bytes: per_client_refusal(limits.max_per_client),
        lingerers: Some(Arc::new(Semaphore::new(LINGERERS))),
    };
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    // A connection not served: a health probe on it still gets its answer,
    // anything else `refusal`.
    let probe = |stream, addr, refusal: &Refusal| {
        let app = with_addr(overflow_app.clone(), addr);
        tokio::spawn(probe_when_free(
            stream,
            app,
            Arc::clone(&peekers),
            refusal.clone(),
        ));
    };
    loop {
        let (stream, addr) = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => (stream, peer.ip()),
                Err(e) => {
                    // Out of files or a connection reset before it was taken:
                    // breathe, and go on.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let Some(held) = clients.hold(addr, limits.max_per_client.max(1)) else {
            probe(stream, addr, &per_client);
            continue;
        };
        let (permit, service, head, keep_alive) =
            if let Ok(p) = Arc::clone(&main).try_acquire_owned() {
                (p, app.clone(), limits.header_timeout, true)
            } else if let Ok(p) = Arc::clone(&overflow).try_acquire_owned() {
                (p, overflow_app.clone(), OVERFLOW_HEADER_TIMEOUT, false)
            } else {
                // Both pools full.
                probe(stream, addr, &refusal);
                continue;
            };
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(head)
            .keep_alive(keep_alive);
        let service = hyper_util::service::TowerToHyperService::new(with_addr(service, addr));
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
            drop(permit);
            drop(held);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace = ?limits.shutdown_grace,
            "connections still open at the end of the shutdown grace: closing them"
        );
    }
    Ok(())
}

/// `app` with every request marked with the address of its connection.
fn with_addr(app: Router, addr: IpAddr) -> impl Served<Future = impl Send> {
    tower::ServiceExt::map_request(app, move |mut request: Request| {
        request
            .extensions_mut()
            .insert(crate::throttle::ClientAddr(addr));
        request
    })
}

/// What serves a connection: an app, each request marked with its
/// connection's address ([`with_addr`]).
trait Served:
    tower::Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static
{
}

impl<S> Served for S where
    S: tower::Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static
{
}

/// A request as a connection reads it.
type Request = axum::http::Request<hyper::body::Incoming>;

/// A connection past both pools (or its address's cap), looked at as soon as
/// one of the [`PEEKERS`] is free, for up to [`PEEK`]: a flood of refused
/// connections taking them all at once must not turn a health probe that
/// comes right after away unlooked at. Refused if none comes free in time.
async fn probe_when_free<S>(
    stream: tokio::net::TcpStream,
    overflow_app: S,
    peekers: Arc<Semaphore>,
    refusal: Refusal,
) where
    S: Served,
    S::Future: Send,
{
    match tokio::time::timeout(PEEK, peekers.acquire_owned()).await {
        Ok(Ok(permit)) => probe_or_refuse(stream, overflow_app, permit, refusal).await,
        _ => refuse(stream, refusal).await,
    }
}

/// A connection past both pools (or its address's cap): served if it is a
/// health probe (its request line, seen within [`PEEK`], is `GET
/// /healthz`), refused with `refusal` otherwise.
async fn probe_or_refuse<S>(
    stream: tokio::net::TcpStream,
    overflow_app: S,
    permit: tokio::sync::OwnedSemaphorePermit,
    refusal: Refusal,
) where
    S: Served,
    S::Future: Send,
{
    const PROBE: &[u8] = b"GET /healthz ";
    let mut head = [0u8; PROBE.len()];
    let seen = tokio::time::timeout(PEEK, async {
        loop {
            match stream.peek(&mut head).await {
                Ok(n) if n >= PROBE.len() || n == 0 => return n,
                Ok(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                Err(_) => return 0,
            }
        }
    })
    .await
    .unwrap_or(0);
    if seen < PROBE.len() || head != PROBE {
        drop(permit);
        return refuse(stream, refusal).await;
    }
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(OVERFLOW_HEADER_TIMEOUT)
        .keep_alive(false);
    let service = hyper_util::service::TowerToHyperService::new(overflow_app);
    let _ = builder
        .serve_connection(TokioIo::new(stream), service)
        .await;
    drop(permit);
}

/// What a refused connection is written, and whether it may be lingered
/// over (at most [`LINGERERS`] at once).
#[derive(Clone)]
struct Refusal {
    bytes: Arc<[u8]>,
    lingerers: Option<Arc<Semaphore>>,
}

/// Writes the refusal and closes. A client past its own cap is lingered
/// over first, when one of the [`LINGERERS`] is free: what it still sends
/// (the rest of its request) is read and dropped for up to [`LINGER`],
/// because closing with it unread resets the connection, and the reset can
/// cost the client the refusal it has not read yet (and fails its next
/// write). A server out of connections closes at once: its files are short.
async fn refuse(mut stream: tokio::net::TcpStream, refusal: Refusal) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&refusal.bytes)).await;
    let _ = stream.shutdown().await;
    let Some(_lingering) = refusal.lingerers.and_then(|l| l.try_acquire_owned().ok()) else {
        return;
    };
    let _ = tokio::time::timeout(LINGER, async {
        let mut sink = [0u8; 1024];
        while let Ok(n) = stream.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}

/// How long a refused connection is read from before it is closed.
const LINGER: Duration = Duration::from_millis(500);

/// Most refused connections lingered over at once.
const LINGERERS: usize = 64;

#[cfg(test)]
mod tests {
    #[test]
    fn the_refusal_says_its_length_right() {
        let text = std::str::from_utf8(super::REFUSAL).unwrap_or_default();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or_default();
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        assert!(
            serde_json::from_str::<serde_json::Value>(body).is_ok(),
            "{body}"
        );
    }
}
