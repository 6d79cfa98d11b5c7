//! A TCP link between a client under test and a server, which the test can cut and
//! mend: the network between a gateway and Redis gone, with nothing sent meanwhile
//! reaching the server. A stalled server (SIGSTOP) is not that: when it wakes, it runs
//! what waited in its sockets, the calls its clients gave up on included.
//!
//! Cut, the link closes every connection it carries and holds new ones open without
//! forwarding a byte (what arrives is read and dropped), so a call fails — at once on
//! a closed connection, at its deadline on a held one — and never runs. Mended, it
//! closes the held ones too (the client reconnects) and forwards again.
//!
//! Written by hand on `std` threads: a few dozen lines, and no crate does "close
//! everything now, then swallow" without a runtime of its own.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

/// A link to `127.0.0.1:<port>` on a free loopback port of its own.
pub struct Link {
    addr: SocketAddr,
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    cut: AtomicBool,
    closed: AtomicBool,
    /// Every socket the link holds open (both ends of each forwarded connection).
    open: Mutex<Vec<TcpStream>>,
}

impl State {
    fn hold(&self, s: &TcpStream) {
        if let Ok(s) = s.try_clone() {
            self.open.lock().unwrap_or_else(|e| e.into_inner()).push(s);
        }
    }

    /// Closes every connection the link carries or holds.
    fn close_all(&self) {
        for s in self
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Link {
    /// A link to the server on `127.0.0.1:<port>`, forwarding.
    pub fn to(port: u16) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind a free loopback port");
        let addr = listener.local_addr().expect("the link's address");
        let state = Arc::new(State::default());
        let st = state.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if st.closed.load(Ordering::Acquire) {
                    return;
                }
                let Ok(client) = client else { continue };
                st.hold(&client);
                if st.cut.load(Ordering::Acquire) {
                    thread::spawn(move || swallow(client));
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                st.hold(&server);
                let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                    continue;
                };
                thread::spawn(move || pump(client, server));
                thread::spawn(move || pump(s2, c2));
            }
        });
        Self { addr, state }
    }

    /// The link's port: what the client under test connects to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `redis://127.0.0.1:<the link's port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port())
    }

    /// Cuts the link: every connection closed, new ones held without forwarding.
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::Release);
        self.state.close_all();
    }

    /// Mends the link: the held connections closed, new ones forwarded again.
    pub fn mend(&self) {
        self.state.cut.store(false, Ordering::Release);
        self.state.close_all();
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.state.closed.store(true, Ordering::Release);
        self.state.close_all();
        // Wakes the accepting thread so it sees `closed` and ends.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Copies `from` to `to` until either end closes, then closes both.
fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// Reads and drops what `s` sends until it closes (or the link closes it).
fn swallow(mut s: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
}
