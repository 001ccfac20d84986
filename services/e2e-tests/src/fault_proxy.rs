//! A TCP proxy between mneme's processes and a server they depend on, for
//! the network faults that stopping a process cannot make:
//!
//! - [`LinkFault::Latency`]: every chunk waits before it is delivered, in
//!   both directions (a slow or distant link).
//! - [`LinkFault::Hold`]: nothing is delivered and nothing is closed; both
//!   sides wait with their connections open, as behind a partition or a
//!   hung peer. What was held is delivered, in order, once the fault ends.
//! - [`LinkFault::Reset`]: every open connection is reset (RST to both
//!   sides) and every new one is reset as soon as it is accepted, as when a
//!   load balancer or a restarted NAT drops its connection table.
//!
//! Faults apply at once to open connections too. The proxy stops, with all
//! its connections, when it is dropped.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the link does to the bytes it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkFault {
    /// Bytes pass as they come.
    None,
    /// Each chunk is delivered this long after it was read.
    Latency(Duration),
    /// Nothing is delivered until the fault changes.
    Hold,
    /// Open connections are reset, new ones are reset on accept.
    Reset,
}

/// A loopback TCP proxy to one upstream address.
#[derive(Debug)]
pub struct FaultProxy {
    pub port: u16,
    fault: watch::Sender<LinkFault>,
    accepting: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards every connection to
    /// `upstream`, passing bytes as they come until told otherwise.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (fault, faults) = watch::channel(LinkFault::None);
        let accepting = tokio::spawn(accept(listener, upstream, faults));
        Self {
            port,
            fault,
            accepting,
        }
    }

    /// Applies `fault` to open and new connections from now on.
    pub fn set(&self, fault: LinkFault) {
        self.fault.send_replace(fault);
    }

    /// Resets every open connection, then carries new ones normally again.
    pub async fn reset_all(&self) {
        self.set(LinkFault::Reset);
        // Each connection's task sees the change at its next poll.
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.set(LinkFault::None);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Aborting the accept task drops its set of connection tasks,
        // which aborts them and closes their sockets.
        self.accepting.abort();
    }
}

async fn accept(listener: TcpListener, upstream: SocketAddr, faults: watch::Receiver<LinkFault>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                if *faults.borrow() == LinkFault::Reset {
                    reset(&client);
                    continue;
                }
                connections.spawn(carry(client, upstream, faults.clone()));
            }
            // Reaps finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// How one direction of a connection ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    Closed,
    Reset,
}

/// Carries one connection until either side closes it or the link resets.
async fn carry(mut client: TcpStream, upstream: SocketAddr, faults: watch::Receiver<LinkFault>) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        reset(&client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let ended = {
        let (from_client, to_client) = client.split();
        let (from_server, to_server) = server.split();
        tokio::select! {
            ended = pump(from_client, to_server, faults.clone()) => ended,
            ended = pump(from_server, to_client, faults) => ended,
        }
    };
    if ended == Ended::Reset {
        reset(&client);
        reset(&server);
    }
}

/// Moves bytes one way, each chunk subject to the fault in force when it is
/// about to be delivered.
async fn pump(
    mut from: ReadHalf<'_>,
    mut to: WriteHalf<'_>,
    mut faults: watch::Receiver<LinkFault>,
) -> Ended {
    let mut resets = faults.clone();
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            () = until_reset(&mut resets) => return Ended::Reset,
        };
        let Ok(n @ 1..) = read else {
            return Ended::Closed;
        };
        loop {
            let fault = *faults.borrow_and_update();
            match fault {
                LinkFault::None => break,
                LinkFault::Latency(delay) => {
                    tokio::time::sleep(delay).await;
                    break;
                }
                LinkFault::Hold => {
                    if faults.changed().await.is_err() {
                        return Ended::Closed;
                    }
                }
                LinkFault::Reset => return Ended::Reset,
            }
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return Ended::Closed;
        }
    }
}

/// Returns once the link is set to reset (never, if the proxy is gone).
async fn until_reset(faults: &mut watch::Receiver<LinkFault>) {
    loop {
        if *faults.borrow_and_update() == LinkFault::Reset {
            return;
        }
        if faults.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Closes a socket with RST rather than FIN: a zero linger makes the
/// kernel drop unsent data and reset the connection.
fn reset(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}
