//! A TCP proxy on 127.0.0.1 that delays every chunk of a server's replies
//! by a random 30–100 ms (or as given), in order: a slow network in front
//! of one instance. Requests pass at once. Runs in the test's runtime and
//! stops when dropped, closing every connection through it: dropping it
//! cuts the network between its clients and the server, which sees the
//! connections close.

use std::ops::RangeInclusive;
use std::time::Duration;

use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct DelayProxy {
    pub port: u16,
    task: JoinHandle<()>,
    conns: std::sync::Arc<std::sync::Mutex<Vec<JoinHandle<()>>>>,
}

impl DelayProxy {
    /// A proxy to `127.0.0.1:upstream` delaying replies by `delay_ms`.
    pub async fn start(upstream: u16, delay_ms: RangeInclusive<u64>) -> DelayProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("proxy addr").port();
        let conns = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = std::sync::Arc::clone(&conns);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let delay = delay_ms.clone();
                let conn = tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else { return };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let up = AbortOnDrop(tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut cr, &mut sw).await;
                        let _ = sw.shutdown().await;
                    }));
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match sr.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        let ms = rand::rng().random_range(delay.clone());
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        if cw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    drop(up);
                });
                if let Ok(mut conns) = kept.lock() {
                    conns.retain(|c: &JoinHandle<()>| !c.is_finished());
                    conns.push(conn);
                }
            }
        });
        DelayProxy { port, task, conns }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// The request direction's task, ended with the connection's own task (a
/// socket closes only once both of its halves are gone).
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.task.abort();
        // Each connection's task owns its two sockets: aborted, it closes them.
        if let Ok(mut conns) = self.conns.lock() {
            for c in conns.drain(..) {
                c.abort();
            }
        }
    }
}
