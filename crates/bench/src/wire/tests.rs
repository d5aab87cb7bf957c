use std::io::Cursor;

use proptest::prelude::*;

use super::*;

fn bytes_of(h: &Header) -> [u8; HEADER_LEN] {
    let mut b = [0u8; HEADER_LEN];
    h.encode(&mut b);
    b
}

/// Decoding a header whose fields are given one by one, reserved flags included.
fn raw(magic: u16, version: u8, kind: u8, frame_len: u32, reply_len: u32, flags: u32) -> [u8; 24] {
    let mut b = [0u8; HEADER_LEN];
    b[0..2].copy_from_slice(&magic.to_be_bytes());
    b[2] = version;
    b[3] = kind;
    b[4..8].copy_from_slice(&frame_len.to_be_bytes());
    b[8..12].copy_from_slice(&reply_len.to_be_bytes());
    b[12..16].copy_from_slice(&flags.to_be_bytes());
    b[16..24].copy_from_slice(&7u64.to_be_bytes());
    b
}

/// The protocol's rules restated independently of `decode`, as the oracle for the property
/// tests.
fn is_valid(b: &[u8; HEADER_LEN]) -> bool {
    let u32_at = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap());
    let in_range = |n: u32| (24..=16 * 1024 * 1024).contains(&n);
    let (frame_len, reply_len) = (u32_at(4), u32_at(8));
    b[0] == b'T'
        && b[1] == b'T'
        && b[2] == 1
        && (1..=7).contains(&b[3])
        && u32_at(12) == 0
        && in_range(frame_len)
        && match b[3] {
            3 => in_range(reply_len),
            4 => reply_len == 0,
            6 => reply_len == 0 && frame_len == 24,
            7 => reply_len == 0 && frame_len <= 24 + 256 * 1024,
            _ => reply_len == 0 && frame_len <= 24 + 65536,
        }
}

fn kind() -> impl Strategy<Value = FrameKind> {
    prop_oneof![
        Just(FrameKind::Hello),
        Just(FrameKind::Welcome),
        Just(FrameKind::Request),
        Just(FrameKind::Response),
        Just(FrameKind::Error),
        Just(FrameKind::StatsRequest),
        Just(FrameKind::StatsReply),
    ]
}

fn valid_header() -> impl Strategy<Value = Header> {
    (kind(), 24u32..=MAX_FRAME_LEN, 24u32..=MAX_FRAME_LEN, any::<u64>()).prop_map(
        |(kind, frame_len, reply_len, seq)| match kind {
            FrameKind::Request => Header::request(seq, frame_len, reply_len),
            FrameKind::Response => Header::response(seq, frame_len),
            FrameKind::StatsRequest => Header { kind, frame_len: 24, reply_len: 0, seq },
            FrameKind::StatsReply => {
                Header { kind, frame_len: 24 + frame_len % (256 * 1024 + 1), reply_len: 0, seq }
            }
            _ => Header { kind, frame_len: 24 + frame_len % 65537, reply_len: 0, seq },
        },
    )
}

/// Lengths around every boundary the decoder checks, plus anything.
fn interesting_len() -> impl Strategy<Value = u32> {
    prop_oneof![
        prop::sample::select(vec![
            0,
            1,
            3,
            23,
            24,
            25,
            65536 + 23,
            65536 + 24,
            65536 + 25,
            256 * 1024 + 23,
            256 * 1024 + 24,
            256 * 1024 + 25,
            MAX_FRAME_LEN - 1,
            MAX_FRAME_LEN,
            MAX_FRAME_LEN + 1,
            1 << 30,
            u32::MAX,
        ]),
        any::<u32>(),
        0u32..=MAX_FRAME_LEN,
    ]
}

/// Headers that get past the magic and version checks most of the time, so the deeper rules
/// are exercised too.
fn nearly_valid_bytes() -> impl Strategy<Value = [u8; HEADER_LEN]> {
    (
        prop_oneof![9 => Just(MAGIC), 1 => any::<u16>()],
        prop_oneof![9 => Just(VERSION), 1 => any::<u8>()],
        0u8..10,
        interesting_len(),
        interesting_len(),
        prop_oneof![9 => Just(0u32), 1 => any::<u32>()],
    )
        .prop_map(|(m, v, k, f, r, fl)| raw(m, v, k, f, r, fl))
}

proptest! {
    #[test]
    fn encode_decode_round_trip(h in valid_header()) {
        prop_assert_eq!(h.validate(), Ok(()));
        prop_assert_eq!(Header::decode(&bytes_of(&h)), Ok(h));
    }

    #[test]
    fn decode_accepts_exactly_the_valid_headers(b in any::<[u8; HEADER_LEN]>()) {
        check_decode(&b)?;
    }

    #[test]
    fn decode_accepts_exactly_the_valid_nearly_valid_headers(b in nearly_valid_bytes()) {
        check_decode(&b)?;
    }

    #[test]
    fn parser_reassembles_any_chunking(
        frames in prop::collection::vec((24u32..200, 24u32..=MAX_FRAME_LEN, any::<u64>()), 1..20),
        cuts in prop::collection::vec(1usize..64, 1..50),
    ) {
        let mut stream = Vec::new();
        for &(len, reply, seq) in &frames {
            let mut frame = vec![0xAB; len as usize];
            encode_request(&mut frame, seq, reply);
            stream.extend_from_slice(&frame);
        }
        let mut parser = FrameParser::new(FrameKind::Request, 200);
        let mut got = Vec::new();
        let (mut fed, mut consumed, mut cut) = (0, 0, cuts.iter().cycle());
        while consumed < stream.len() {
            fed = (fed + cut.next().unwrap()).min(stream.len());
            loop {
                let (used, frame) = parser.advance(&stream[consumed..fed]).unwrap();
                prop_assert!(used <= fed - consumed);
                consumed += used;
                match frame {
                    Some(h) => got.push((h.frame_len, h.reply_len, h.seq)),
                    None => break,
                }
            }
            prop_assert!(fed - consumed < HEADER_LEN, "parser left a whole header unread");
        }
        prop_assert!(parser.is_idle());
        prop_assert_eq!(got, frames);
    }

    #[test]
    fn parser_returns_stats_requests_between_requests_in_any_chunking(
        frames in prop::collection::vec(prop::option::of((24u32..200, any::<u64>())), 1..30),
        cuts in prop::collection::vec(1usize..64, 1..50),
    ) {
        let mut stream = Vec::new();
        let mut expected = Vec::new();
        for frame in &frames {
            match *frame {
                Some((len, seq)) => {
                    let mut bytes = vec![0xAB; len as usize];
                    encode_request(&mut bytes, seq, 64);
                    stream.extend_from_slice(&bytes);
                    expected.push((FrameKind::Request, seq));
                }
                None => {
                    write_stats_request(&mut stream).unwrap();
                    expected.push((FrameKind::StatsRequest, 0));
                }
            }
        }
        let mut parser = FrameParser::new(FrameKind::Request, 200).with_stats_requests();
        let (mut got, mut consumed, mut fed, mut cut) = (Vec::new(), 0, 0, 0);
        while consumed < stream.len() {
            fed = (fed + cuts[cut % cuts.len()]).min(stream.len());
            cut += 1;
            loop {
                let (used, header) = parser.advance(&stream[consumed..fed]).unwrap();
                consumed += used;
                match header {
                    Some(h) => got.push((h.kind, h.seq)),
                    None => break,
                }
            }
        }
        prop_assert_eq!(got, expected);
        // Without the opt-in, a StatsRequest is the wrong kind.
        let mut strict = FrameParser::new(FrameKind::Request, 200);
        let mut bare = Vec::new();
        write_stats_request(&mut bare).unwrap();
        let refused = matches!(strict.advance(&bare), Err(WireError::UnexpectedKind { .. }));
        prop_assert!(refused, "a StatsRequest without the opt-in");
    }

    #[test]
    fn parser_never_panics(data in prop::collection::vec(any::<u8>(), 0..300), max in any::<u32>()) {
        let mut parser = FrameParser::new(FrameKind::Request, max);
        let mut at = 0;
        while let Ok((used, frame)) = parser.advance(&data[at..]) {
            prop_assert!(used <= data.len() - at);
            at += used;
            if frame.is_none() {
                break;
            }
        }
    }

    #[test]
    fn read_frame_never_panics(data in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = read_frame(&mut Cursor::new(&data), &mut Vec::new());
    }
}

fn check_decode(b: &[u8; HEADER_LEN]) -> Result<(), TestCaseError> {
    match Header::decode(b) {
        Ok(h) => {
            prop_assert!(is_valid(b), "accepted an invalid header: {h:?}");
            prop_assert_eq!(&bytes_of(&h), b, "encoding is not canonical");
        }
        Err(e) => prop_assert!(!is_valid(b), "rejected a valid header: {e}"),
    }
    Ok(())
}

#[test]
fn errors_name_the_problem() {
    let cases: [([u8; 24], WireError, &str); 9] = [
        (raw(0x4854, 1, 3, 64, 64, 0), WireError::BadMagic { found: [0x48, 0x54] }, "0x48 0x54"),
        (raw(MAGIC, 9, 3, 64, 64, 0), WireError::UnsupportedVersion { found: 9 }, "version 9"),
        (raw(MAGIC, 1, 0, 64, 64, 0), WireError::UnknownKind { found: 0 }, "kind 0"),
        (
            raw(MAGIC, 1, 3, 3, 64, 0),
            WireError::FrameTooShort { field: LengthField::FrameLen, len: 3 },
            "frame_len 3 is shorter",
        ),
        (
            raw(MAGIC, 1, 3, 1 << 30, 64, 0),
            WireError::FrameTooLong { field: LengthField::FrameLen, len: 1 << 30 },
            "frame_len 1073741824 exceeds the 16777216-byte",
        ),
        (
            raw(MAGIC, 1, 3, 64, 1 << 30, 0),
            WireError::FrameTooLong { field: LengthField::ReplyLen, len: 1 << 30 },
            "reply_len 1073741824",
        ),
        (raw(MAGIC, 1, 3, 64, 64, 2), WireError::ReservedFlags { flags: 2 }, "0x00000002"),
        (
            raw(MAGIC, 1, 4, 64, 64, 0),
            WireError::UnexpectedReplyLen { kind: FrameKind::Response, reply_len: 64 },
            "Response frame carries reply_len 64",
        ),
        (
            raw(MAGIC, 1, 1, 24 + 65537, 0, 0),
            WireError::PayloadTooLarge { kind: FrameKind::Hello, len: 65537 },
            "Hello payload of 65537 bytes exceeds the 65536-byte limit",
        ),
    ];
    for (bytes, want, text) in cases {
        let got = Header::decode(&bytes).unwrap_err();
        assert_eq!(got, want);
        assert!(got.to_string().contains(text), "{got:?} displays as '{got}', not '{text}'");
    }
}

#[test]
fn encode_request_keeps_the_payload() {
    let mut buf = vec![9u8; 100];
    encode_request(&mut buf, 42, 64);
    assert!(buf[HEADER_LEN..].iter().all(|&b| b == 9));
    let h = Header::decode(buf[..HEADER_LEN].try_into().unwrap()).unwrap();
    assert_eq!(h, Header::request(42, 100, 64));
    encode_response(&mut buf, 43);
    assert_eq!(
        Header::decode(buf[..HEADER_LEN].try_into().unwrap()),
        Ok(Header::response(43, 100))
    );
}

#[test]
#[should_panic(expected = "outside 24..=16777216")]
fn encode_request_rejects_a_buffer_shorter_than_a_header() {
    encode_request(&mut [0u8; 10], 1, 64);
}

fn hello() -> HelloConfig {
    HelloConfig {
        profile: Profile { name: "test".into(), ..Profile::default() },
        server_cpu: Some(1),
        spin: true,
        request_len: 64,
        reply_len: 1 << 20,
    }
}

#[test]
fn hello_round_trips_through_a_frame() {
    let mut wire = Vec::new();
    write_hello(&mut wire, &hello()).unwrap();
    let h = Header::decode(wire[..HEADER_LEN].try_into().unwrap()).unwrap();
    assert_eq!((h.kind, h.frame_len as usize), (FrameKind::Hello, wire.len()));
    assert_eq!(read_hello(&mut Cursor::new(&wire)).unwrap(), hello());
}

#[test]
fn hello_lengths_are_checked() {
    let mut bad = hello();
    bad.request_len = 0;
    let mut wire = Vec::new();
    write_hello(&mut wire, &bad).unwrap();
    assert!(matches!(
        read_hello(&mut Cursor::new(&wire)),
        Err(FrameError::Wire(WireError::FrameTooShort { field: LengthField::HelloRequestLen, .. }))
    ));
}

#[test]
fn hello_with_broken_json_is_bad_json() {
    let mut wire = Vec::new();
    write_frame(&mut wire, FrameKind::Hello, 0, b"{\"profile\":").unwrap();
    let err = read_hello(&mut Cursor::new(&wire)).unwrap_err();
    assert!(matches!(err, FrameError::Wire(WireError::BadJson { kind: FrameKind::Hello, .. })));
}

#[test]
fn a_request_instead_of_a_hello_is_refused_before_its_payload_is_read() {
    let mut wire = vec![0u8; 1000];
    encode_request(&mut wire, 1, 64);
    let mut cursor = Cursor::new(&wire);
    let err = read_hello(&mut cursor).unwrap_err();
    assert!(matches!(
        err,
        FrameError::Wire(WireError::UnexpectedKind {
            found: FrameKind::Request,
            expected: FrameKind::Hello
        })
    ));
    assert_eq!(cursor.position(), HEADER_LEN as u64);
}

#[test]
fn an_error_frame_instead_of_a_welcome_carries_the_reason() {
    let mut wire = Vec::new();
    write_error(&mut wire, "server busy").unwrap();
    match read_welcome(&mut Cursor::new(&wire)) {
        Err(FrameError::Peer(reason)) => assert_eq!(reason, "server busy"),
        other => panic!("expected the peer's reason, got {other:?}"),
    }
}

#[test]
fn long_error_reasons_are_cut_at_a_character_boundary() {
    let reason = "é".repeat(MAX_CONTROL_PAYLOAD);
    let mut wire = Vec::new();
    write_error(&mut wire, &reason).unwrap();
    let mut payload = Vec::new();
    let h = read_frame(&mut Cursor::new(&wire), &mut payload).unwrap();
    assert_eq!((h.kind, payload.len()), (FrameKind::Error, MAX_CONTROL_PAYLOAD));
    assert!(std::str::from_utf8(&payload).is_ok());
}

#[test]
fn a_truncated_payload_is_an_unexpected_eof() {
    let mut wire = Vec::new();
    write_hello(&mut wire, &hello()).unwrap();
    wire.truncate(wire.len() - 1);
    match read_hello(&mut Cursor::new(&wire)) {
        Err(FrameError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof),
        other => panic!("expected EOF, got {other:?}"),
    }
}

#[test]
fn parser_refuses_what_the_hello_did_not_promise() {
    let mut parser = FrameParser::new(FrameKind::Request, 64);
    let mut frame = vec![0u8; 65];
    encode_request(&mut frame, 1, 64);
    assert_eq!(
        parser.advance(&frame),
        Err(WireError::LargerThanPromised { kind: FrameKind::Request, len: 65, promised: 64 })
    );
    let mut hello_frame = Vec::new();
    write_hello(&mut hello_frame, &hello()).unwrap();
    assert_eq!(
        parser.advance(&hello_frame),
        Err(WireError::UnexpectedKind { found: FrameKind::Hello, expected: FrameKind::Request })
    );
}

#[test]
fn parser_refuses_a_reply_larger_than_the_hello_negotiated() {
    let mut parser = FrameParser::new(FrameKind::Request, 64).with_max_reply_len(100);
    let mut frame = vec![0u8; 64];
    encode_request(&mut frame, 1, 100);
    assert_eq!(
        parser.advance(&frame).map(|(n, h)| (n, h.map(|h| h.reply_len))),
        Ok((64, Some(100)))
    );
    encode_request(&mut frame, 2, 101);
    let err = parser.advance(&frame).unwrap_err();
    assert_eq!(err, WireError::ReplyLargerThanNegotiated { reply_len: 101, negotiated: 100 });
    assert!(err.to_string().contains("reply_len of 101 bytes, more than the 100 bytes"), "{err}");
    // Nothing was consumed: the offending header is still at the front.
    assert!(parser.is_idle());
}

#[test]
fn parser_skips_large_payloads_without_holding_them() {
    let mut parser = FrameParser::new(FrameKind::Request, MAX_FRAME_LEN);
    let mut head = vec![0u8; HEADER_LEN];
    Header::request(5, MAX_FRAME_LEN, 64).encode((&mut head[..]).try_into().unwrap());
    assert_eq!(parser.advance(&head), Ok((HEADER_LEN, None)));
    let chunk = vec![0u8; 64 * 1024];
    let mut left = MAX_FRAME_LEN as usize - HEADER_LEN;
    while left > chunk.len() {
        assert_eq!(parser.advance(&chunk), Ok((chunk.len(), None)));
        left -= chunk.len();
    }
    let (used, done) = parser.advance(&chunk).unwrap();
    assert_eq!((used, done.map(|h| h.seq)), (left, Some(5)));
    assert!(parser.is_idle());
}
