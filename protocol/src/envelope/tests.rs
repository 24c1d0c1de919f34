//! Tests of the parent module.
use super::*;

const MAX: usize = 16 * 1024 * 1024;

fn sample() -> Envelope {
    Envelope::new(
        Kind::Request,
        0x0102_0304_0506_0708,
        "hello",
        Bytes::from_static(b"\x80"),
        Bytes::from_static(b"payload"),
    )
}

#[test]
fn header_layout_is_byte_exact() {
    let frames = vec![sample().encode_header(), Bytes::from_static(b"payload")];
    assert_eq!(
        &frames[0][..],
        &[
            0x5A, 1, 1, 0, // magic, version, kind=request, flags
            1, 2, 3, 4, 5, 6, 7, 8, // id
            0, 5, b'h', b'e', b'l', b'l', b'o', // event
            0, 0, 0, 1, 0x80, // metadata
        ][..]
    );
    assert_eq!(Envelope::decode(&frames, MAX).unwrap(), sample());
}

/// The pieces the conversation sends are byte for byte what `encode` writes.
#[test]
fn encoded_pieces_match_encode() {
    let big = Bytes::from(vec![7u8; INLINE_MAX + 1]);
    for (event, metadata, payload) in [
        (
            "hello",
            Bytes::from_static(b"\x80"),
            Bytes::from_static(b"payload"),
        ),
        ("_system:x", Bytes::new(), Bytes::new()),
        ("e", Bytes::new(), big),
    ] {
        let envelope = Envelope::new(Kind::Tick, 42, event, metadata.clone(), payload.clone());
        let encoded = Encoded::new(Kind::Tick, 42, event, &metadata, &payload);
        let pieces = encoded.pieces();
        let frames: Vec<Vec<u8>> = pieces
            .frames()
            .as_slice()
            .iter()
            .map(|frame| frame.concat())
            .collect();
        let expected: Vec<Vec<u8>> = envelope.encode().iter().map(|f| f.to_vec()).collect();
        assert_eq!(frames, expected, "{event}");
    }
}

#[test]
fn small_payloads_ride_inline() {
    let frames = sample().encode();
    assert_eq!(frames.len(), 1);
    assert_eq!(
        &frames[0][..],
        &[
            0x5A,
            1,
            1,
            FLAG_INLINE, // magic, version, kind=request, flags
            1,
            2,
            3,
            4,
            5,
            6,
            7,
            8, // id
            0,
            5,
            b'h',
            b'e',
            b'l',
            b'l',
            b'o', // event
            0,
            0,
            0,
            1,
            0x80, // metadata
            b'p',
            b'a',
            b'y',
            b'l',
            b'o',
            b'a',
            b'd', // payload
        ][..]
    );
    let decoded = Envelope::decode(&frames, MAX).unwrap();
    assert_eq!(decoded, sample());
    assert_eq!(decoded.metadata(), &Bytes::from_static(b"\x80"));
}

#[test]
fn large_payloads_travel_as_their_own_frame() {
    let big = Bytes::from(vec![1u8; INLINE_MAX + 1]);
    let envelope = Envelope::new(Kind::Reply, 1, "", Bytes::new(), big.clone());
    let frames = envelope.encode();
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[1].as_ptr(), big.as_ptr(), "not copied");
    assert_eq!(Envelope::decode(&frames, MAX).unwrap(), envelope);
}

#[test]
fn inline_flag_with_a_payload_frame_is_refused() {
    let mut header = sample().encode_header().to_vec();
    header[3] = FLAG_INLINE;
    let frames = vec![Bytes::from(header), Bytes::from_static(b"p")];
    assert_eq!(
        Envelope::decode(&frames, MAX),
        Err(DecodeError::TooManyFrames(2))
    );
}

#[test]
fn event_names_short_and_long_decode_to_the_same_envelope() {
    // 30 bytes are kept inline, longer ones as a slice of the received frame.
    for event in ["e", &"x".repeat(30), &"y".repeat(31), &"é".repeat(200)] {
        let sent = Envelope::new(
            Kind::Request,
            7,
            event,
            Bytes::from_static(b"meta"),
            Bytes::from_static(b"payload"),
        );
        let decoded = Envelope::decode(&sent.encode(), MAX).expect("valid");
        assert_eq!(decoded.event(), event);
        assert_eq!(decoded.event_bytes(), event.as_bytes());
        assert_eq!(decoded, sent);
        assert_eq!(decoded.clone(), sent);
    }
}

#[test]
fn round_trip_keeps_everything() {
    let envelope = sample();
    let decoded = Envelope::decode(&envelope.encode(), MAX).unwrap();
    assert_eq!(decoded, envelope);
    assert_eq!(decoded.event(), "hello");
}

#[test]
fn empty_payload_is_one_frame() {
    let envelope = Envelope::new(Kind::Tick, 1, "t", Bytes::new(), Bytes::new());
    let frames = envelope.encode();
    assert_eq!(frames.len(), 1);
    assert_eq!(Envelope::decode(&frames, MAX).unwrap(), envelope);
}

#[test]
fn payload_is_not_copied() {
    let payload = Bytes::from(vec![7u8; 4096]);
    let frames = vec![sample().encode_header(), payload.clone()];
    let decoded = Envelope::decode(&frames, MAX).unwrap();
    assert_eq!(decoded.payload().as_ptr(), payload.as_ptr());
}

#[test]
fn system_messages_are_flagged() {
    let envelope = Envelope::new(
        Kind::Tick,
        1,
        "_system:heartbeat",
        Bytes::new(),
        Bytes::new(),
    );
    assert!(envelope.is_system());
    assert_eq!(envelope.encode()[0][3], FLAG_SYSTEM);
    assert!(Envelope::decode(&envelope.encode(), MAX)
        .unwrap()
        .is_system());
}

fn header_with(f: impl FnOnce(&mut Vec<u8>)) -> Vec<Bytes> {
    let mut header = sample().encode_header().to_vec();
    f(&mut header);
    vec![Bytes::from(header)]
}

#[test]
fn no_frames() {
    assert_eq!(Envelope::decode(&[], MAX), Err(DecodeError::NoFrames));
}

#[test]
fn too_many_frames() {
    let frames = vec![Bytes::new(), Bytes::new(), Bytes::new()];
    assert_eq!(
        Envelope::decode(&frames, MAX),
        Err(DecodeError::TooManyFrames(3))
    );
}

#[test]
fn truncated_fixed_header() {
    let frames = header_with(|h| h.truncate(9));
    assert_eq!(
        Envelope::decode(&frames, MAX),
        Err(DecodeError::Truncated { needed: 14, got: 9 })
    );
    assert_eq!(
        Envelope::decode(&[Bytes::new()], MAX),
        Err(DecodeError::Truncated { needed: 14, got: 0 })
    );
}

#[test]
fn bad_magic() {
    let frames = header_with(|h| h[0] = b'G');
    assert_eq!(
        Envelope::decode(&frames, MAX),
        Err(DecodeError::BadMagic(b'G'))
    );
    // Even when short, a stranger is reported as such.
    assert_eq!(
        Envelope::decode(&[Bytes::from_static(b"GET")], MAX),
        Err(DecodeError::BadMagic(b'G'))
    );
}

#[test]
fn unsupported_version() {
    let frames = header_with(|h| h[1] = 2);
    assert_eq!(
        Envelope::decode(&frames, MAX),
        Err(DecodeError::UnsupportedVersion(2))
    );
}

#[test]
fn unknown_kind() {
    let frames = header_with(|h| h[2] = 9);
    assert_eq!(
        Envelope::decode(&frames, MAX),
        Err(DecodeError::UnknownKind(9))
    );
}

#[test]
fn unknown_flags() {
    let frames = header_with(|h| h[3] = 0x84);
    assert_eq!(
        Envelope::decode(&frames, MAX),
        Err(DecodeError::UnknownFlags(0x84))
    );
}

#[test]
fn stream_kinds_and_flags_are_byte_exact() {
    let request = sample().with_stream_flags(FLAG_REPLY_STREAMED | FLAG_BODY_STREAMED);
    let frames = request.encode();
    // Bit 1 (inline), bit 2 (reply streamed), bit 3 (body streamed).
    assert_eq!(frames[0][3], 0b0000_1110);
    let decoded = Envelope::decode(&frames, MAX).unwrap();
    assert!(decoded.reply_streamed() && decoded.body_streamed() && !decoded.is_end());
    let end = Envelope::new(Kind::StreamItem, 9, "", Bytes::new(), Bytes::new())
        .with_stream_flags(FLAG_END);
    let frames = end.encode();
    assert_eq!(&frames[0][..4], &[0x5A, 1, 5, 0b0001_0000]);
    assert!(Envelope::decode(&frames, MAX).unwrap().is_end());
    let credit = Envelope::new(
        Kind::Credit,
        9,
        "",
        Bytes::new(),
        Bytes::from_static(&[0, 0, 0, 32]),
    );
    let decoded = Envelope::decode(&credit.encode(), MAX).unwrap();
    assert_eq!(decoded.kind(), Kind::Credit);
    assert_eq!(&decoded.payload()[..], &[0, 0, 0, 32]);
    let encoded = Encoded::new(Kind::Request, 1, "e", &[], &[]).with_flags(FLAG_REPLY_STREAMED);
    assert_eq!(
        encoded.pieces().frames().as_slice()[0][0][3],
        FLAG_REPLY_STREAMED
    );
}

/// A stream bit on a kind it does not belong to is refused, as an old peer refuses them all.
#[test]
fn stream_flags_on_the_wrong_kind_are_refused() {
    for (kind, flag) in [
        (Kind::Reply, FLAG_REPLY_STREAMED),
        (Kind::Tick, FLAG_BODY_STREAMED),
        (Kind::Request, FLAG_END),
        (Kind::Credit, FLAG_END),
        (Kind::Cancel, FLAG_BODY_STREAMED),
        (Kind::StreamItem, FLAG_REPLY_STREAMED),
    ] {
        let frames = header_with(|h| {
            h[2] = kind as u8;
            h[3] |= flag;
        });
        assert_eq!(
            Envelope::decode(&frames, MAX),
            Err(DecodeError::UnknownFlags(flag)),
            "{kind:?}"
        );
    }
    assert_eq!(
        kind_and_id(&header_with(|h| h[2] = 5)),
        Some((Kind::StreamItem, 0x0102_0304_0506_0708, 0))
    );
}

#[test]
fn event_length_beyond_the_buffer() {
    let frames = header_with(|h| {
        h[12] = 0xff;
        h[13] = 0xff;
    });
    assert_eq!(
        Envelope::decode(&frames, MAX),
        Err(DecodeError::Truncated {
            needed: 14 + 0xffff + 4,
            got: 24
        })
    );
}

#[test]
fn metadata_length_beyond_the_buffer() {
    let frames = header_with(|h| {
        let at = 14 + 5;
        h[at..at + 4].copy_from_slice(&u32::MAX.to_be_bytes());
    });
    assert_eq!(
        Envelope::decode(&frames, MAX),
        Err(DecodeError::LengthMismatch {
            declared: u32::MAX as usize,
            available: 1
        })
    );
}

#[test]
fn trailing_bytes_are_refused() {
    let frames = header_with(|h| h.push(0));
    assert!(matches!(
        Envelope::decode(&frames, MAX),
        Err(DecodeError::LengthMismatch { .. })
    ));
}

#[test]
fn invalid_utf8_event() {
    let frames = header_with(|h| h[14] = 0xff);
    assert_eq!(
        Envelope::decode(&frames, MAX),
        Err(DecodeError::InvalidUtf8)
    );
}

#[test]
fn system_flag_must_match_the_namespace() {
    let frames = header_with(|h| h[3] = FLAG_SYSTEM);
    assert_eq!(
        Envelope::decode(&frames, MAX),
        Err(DecodeError::SystemFlagMismatch)
    );
}

#[test]
fn payload_too_large() {
    let frames = vec![sample().encode_header(), Bytes::from(vec![0u8; 11])];
    assert_eq!(
        Envelope::decode(&frames, 10),
        Err(DecodeError::TooLarge { size: 11, max: 10 })
    );
    assert!(Envelope::decode(&frames, 11).is_ok());
    // The same limit applies inline.
    let inline = Envelope::new(Kind::Tick, 1, "t", Bytes::new(), Bytes::from(vec![0u8; 11]));
    assert_eq!(
        Envelope::decode(&inline.encode(), 10),
        Err(DecodeError::TooLarge { size: 11, max: 10 })
    );
}

#[test]
fn typed_payloads() {
    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Job {
        name: String,
        weight: u32,
    }
    let job = Job {
        name: "x".into(),
        weight: 3,
    };
    let envelope = Envelope::new(
        Kind::Request,
        1,
        "job",
        Bytes::new(),
        encode_value(&job).unwrap(),
    );
    let decoded = Envelope::decode(&envelope.encode(), MAX).unwrap();
    assert_eq!(decoded.decode_payload::<Job>().unwrap(), job);
    assert!(matches!(
        decoded.decode_payload::<Vec<u64>>(),
        Err(Error::Decode(_))
    ));
}

#[test]
fn reserved_and_invalid_event_names() {
    assert!(matches!(
        check_user_event("_system:handshake"),
        Err(Error::ReservedEvent(_))
    ));
    assert!(matches!(check_user_event(""), Err(Error::InvalidEvent(_))));
    assert!(matches!(
        check_user_event(&"x".repeat(MAX_EVENT_LEN + 1)),
        Err(Error::InvalidEvent(_))
    ));
    assert!(check_user_event("user:created").is_ok());
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn kind() -> impl Strategy<Value = Kind> {
        prop_oneof![
            Just(Kind::Request),
            Just(Kind::Reply),
            Just(Kind::Error),
            Just(Kind::Tick),
            Just(Kind::StreamItem),
            Just(Kind::Credit),
            Just(Kind::Cancel)
        ]
    }

    proptest! {
        #[test]
        fn encode_then_decode_is_identity(
            kind in kind(),
            id in any::<u64>(),
            event in "[^\u{0}]{1,40}",
            metadata in proptest::collection::vec(any::<u8>(), 0..64),
            payload in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let envelope = Envelope::new(kind, id, &event, Bytes::from(metadata), Bytes::from(payload));
            let decoded = Envelope::decode(&envelope.encode(), MAX).unwrap();
            prop_assert_eq!(decoded, envelope);
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..4),
        ) {
            let frames: Vec<Bytes> = frames.into_iter().map(Bytes::from).collect();
            let _ = Envelope::decode(&frames, 1024);
        }

        #[test]
        fn corrupted_headers_never_panic(
            position in 0usize..32,
            byte in any::<u8>(),
            cut in 0usize..40,
        ) {
            let mut header = sample().encode_header().to_vec();
            if position < header.len() {
                header[position] = byte;
            }
            header.truncate(cut);
            let _ = Envelope::decode(&[Bytes::from(header), Bytes::from_static(b"p")], MAX);
        }
    }
}
