//! A TCP proxy on 127.0.0.1 that delays every chunk of a server's replies
//! by a random 30–100 ms (or as given), in order: a slow network in front
//! of one instance. Requests pass at once. Runs in the test's runtime and
//! stops when dropped.

use std::ops::RangeInclusive;
use std::time::Duration;

use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct DelayProxy {
    pub port: u16,
    task: JoinHandle<()>,
}

impl DelayProxy {
    /// A proxy to `127.0.0.1:upstream` delaying replies by `delay_ms`.
    pub async fn start(upstream: u16, delay_ms: RangeInclusive<u64>) -> DelayProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("proxy addr").port();
        let task = tokio::spawn(async move {
            let mut conns = Vec::new();
            while let Ok((client, _)) = listener.accept().await {
                let delay = delay_ms.clone();
                conns.push(tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else { return };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let up = tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut cr, &mut sw).await;
                        let _ = sw.shutdown().await;
                    });
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
                    up.abort();
                }));
                conns.retain(|c: &JoinHandle<()>| !c.is_finished());
            }
            for c in conns {
                c.abort();
            }
        });
        DelayProxy { port, task }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
