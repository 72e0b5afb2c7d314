//! A network link a test can cut: a TCP relay between an agent and the
//! server. [`Link::cut`] resets every open connection (a request sent may
//! have been stored without its answer getting back) and refuses new ones
//! until [`Link::heal`].

use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Link {
    /// The address to give the agent instead of the server's.
    pub url: String,
    cut: watch::Sender<bool>,
    relay: tokio::task::JoinHandle<()>,
}

impl Link {
    /// Relays to the server at `server_url` (`http://127.0.0.1:PORT`).
    pub async fn start(server_url: &str) -> Link {
        let upstream: SocketAddr = server_url
            .trim_start_matches("http://")
            .parse()
            .expect("the server listens on IP:PORT");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (cut, _) = watch::channel(false);
        let relay = tokio::spawn(relay(listener, upstream, cut.subscribe()));
        Link { url, cut, relay }
    }

    /// Resets every open connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    pub fn heal(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.relay.abort();
    }
}

async fn relay(listener: TcpListener, upstream: SocketAddr, cut: watch::Receiver<bool>) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            continue;
        };
        if *cut.borrow() {
            reset(inbound);
            continue;
        }
        let mut cut = cut.clone();
        tokio::spawn(async move {
            let Ok(outbound) = TcpStream::connect(upstream).await else {
                return reset(inbound);
            };
            let (mut inbound, mut outbound) = (inbound, outbound);
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                _ = cut.wait_for(|cut| *cut) => {
                    reset(inbound);
                    reset(outbound);
                }
            }
        });
    }
}

/// Closes with a TCP reset, as a link that went down mid-exchange.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}
