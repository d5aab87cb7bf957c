use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use super::*;

/// A connected loopback pair with NODELAY on both ends.
fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    client.set_nodelay(true).unwrap();
    server.set_nodelay(true).unwrap();
    (client, server)
}

fn quickack(s: &TcpStream) -> bool {
    SockRef::from(s).tcp_quickack().unwrap()
}

/// Puts `server` into delayed-ACK (pingpong) mode the way a real service does: it replies
/// right after a receive. Then the client sends `msg` and we wait until it is readable.
fn interactive_then_send(client: &mut TcpStream, server: &mut TcpStream, msg: &[u8]) {
    let mut buf = [0u8; 64];
    client.write_all(b"request").unwrap();
    server.read_exact(&mut buf[..7]).unwrap();
    server.write_all(b"reply!!").unwrap();
    client.read_exact(&mut buf[..7]).unwrap();
    client.write_all(msg).unwrap();
    wait_readable(server);
}

fn wait_readable(s: &TcpStream) {
    let mut probe = [0u8; 1];
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.peek(&mut probe).unwrap();
}

/// The proof that the re-arm happens: right before the call the kernel reports QUICKACK off
/// (the socket is in pingpong mode after replying); right after a plain receive it is still
/// off; right after a re-arming receive it is on. The delayed-ACK timer can also take the
/// socket out of pingpong mode if this thread is descheduled for ~40 ms, so an attempt where
/// the flag was already on before the call proves nothing and is retried.
#[test]
fn rearm_is_observable_right_after_the_receive() {
    let (mut client, mut server) = pair();
    let mut buf = [0u8; 64];
    let (mut plain_seen, mut rearm_seen) = (false, false);
    for _ in 0..50 {
        interactive_then_send(&mut client, &mut server, b"tick");
        if quickack(&server) {
            recv_with_policy(server.as_fd(), &mut buf, QuickAck::Off).unwrap();
            continue;
        }
        let n = recv_with_policy(server.as_fd(), &mut buf, QuickAck::Off).unwrap();
        assert_eq!(&buf[..n], b"tick");
        plain_seen |= !quickack(&server);
        interactive_then_send(&mut client, &mut server, b"tock");
        if quickack(&server) {
            recv_with_policy(server.as_fd(), &mut buf, QuickAck::Off).unwrap();
            continue;
        }
        let n = recv_with_policy(server.as_fd(), &mut buf, QuickAck::Rearm).unwrap();
        assert_eq!(&buf[..n], b"tock");
        assert!(quickack(&server), "TCP_QUICKACK must read 1 right after a re-arming receive");
        rearm_seen = true;
        if plain_seen {
            break;
        }
    }
    assert!(plain_seen, "never saw QUICKACK stay off after a plain receive on this kernel");
    assert!(rearm_seen, "never got a clean attempt (socket never entered pingpong mode)");
}

#[test]
fn no_rearm_at_end_of_stream_and_eagain_passes_through() {
    let (mut client, mut server) = pair();
    let mut buf = [0u8; 16];
    let e = recv_with_policy_flags(server.as_fd(), &mut buf, QuickAck::Rearm, RecvFlags::DONT_WAIT)
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    interactive_then_send(&mut client, &mut server, b"x");
    recv_with_policy(server.as_fd(), &mut buf, QuickAck::Off).unwrap();
    // In pingpong mode now (if the timer did not fire); EOF must not re-arm.
    server.write_all(b"y").unwrap();
    client.read_exact(&mut buf[..1]).unwrap();
    let before = quickack(&server);
    drop(client);
    wait_readable(&server);
    assert_eq!(recv_with_policy(server.as_fd(), &mut buf, QuickAck::Rearm).unwrap(), 0);
    if !before {
        assert!(!quickack(&server), "a zero-byte receive re-armed QUICKACK");
    }
}

#[test]
fn stream_wrapper_rearms_and_passes_writes() {
    let (mut client, server) = pair();
    let mut server = QuickAckStream::new(server, QuickAck::Rearm);
    assert_eq!(server.policy(), QuickAck::Rearm);
    let mut buf = [0u8; 16];
    let mut rearmed = false;
    for _ in 0..50 {
        client.write_all(b"req").unwrap();
        server.read_exact(&mut buf[..3]).unwrap();
        server.write_all(b"rep").unwrap();
        client.read_exact(&mut buf[..3]).unwrap();
        client.write_all(b"next").unwrap();
        wait_readable(server.get_ref());
        if quickack(server.get_ref()) {
            server.read_exact(&mut buf[..4]).unwrap();
            continue;
        }
        server.read_exact(&mut buf[..4]).unwrap();
        assert!(quickack(server.get_ref()));
        rearmed = true;
        break;
    }
    assert!(rearmed, "never got a clean attempt");
    let _ = server.into_inner();
}
