//! Connections the namespace tests script: a client/server pair over a listener, and a
//! transfer on it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

/// Both ends of one connection.
pub struct Pair {
    pub client: TcpStream,
    pub server: TcpStream,
}

/// Connects to `listener` and accepts the connection.
pub fn pair(listener: &TcpListener) -> Pair {
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    Pair { client, server }
}

/// Sends `n` bytes client -> server and reads them.
pub fn transfer(p: &mut Pair, n: usize) {
    p.client.write_all(&vec![7u8; n]).unwrap();
    let mut got = vec![0u8; n];
    p.server.read_exact(&mut got).unwrap();
}
