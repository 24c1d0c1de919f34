//! Unit tests: our client against our server, in memory.

use bytes::BytesMut;

use super::*;
use crate::command::{put_property, Properties};
use crate::frame;

/// Our metadata as a DEALER (client) or ROUTER (server) sends it.
fn metadata(socket_type: &[u8], identity: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    put_property(&mut out, b"Socket-Type", socket_type);
    if let Some(identity) = identity {
        put_property(&mut out, b"Identity", identity);
    }
    out
}

/// Every command body of one handshake, and where it left both sides.
struct Handshake {
    client: CurveClient,
    server: CurveServer,
    client_keys: CurveKeys,
    hello: Vec<u8>,
    welcome: Vec<u8>,
    initiate: Vec<u8>,
}

/// Runs the handshake up to (not including) READY.
fn until_authorize() -> (Handshake, [u8; 32], Vec<u8>) {
    let server_keys = CurveKeys::generate();
    let client_keys = CurveKeys::generate();
    let mut client = CurveClient::new(&client_keys, server_keys.public).unwrap();
    let mut server = CurveServer::new(&server_keys);
    let hello = client.hello();
    let ServerStep::Send(welcome) = server.on_command(&hello).unwrap() else {
        panic!("HELLO must be answered with WELCOME");
    };
    let ClientStep::Send(initiate) = client
        .on_command(&welcome, &metadata(b"DEALER", Some(b"")))
        .unwrap()
    else {
        panic!("WELCOME must be answered with INITIATE");
    };
    let ServerStep::Authorize {
        client_key,
        properties,
    } = server.on_command(&initiate).unwrap()
    else {
        panic!("INITIATE must ask for authorization");
    };
    (
        Handshake {
            client,
            server,
            client_keys,
            hello,
            welcome,
            initiate,
        },
        client_key,
        properties,
    )
}

/// A whole handshake: the client's cipher, the server's, and READY's body.
fn handshake() -> (Cipher, Cipher, Vec<u8>) {
    let (mut hs, client_key, properties) = until_authorize();
    assert_eq!(client_key, hs.client_keys.public);
    let props = Properties::parse(&properties).unwrap();
    assert_eq!(props.get("Socket-Type").unwrap().as_ref(), b"DEALER");
    assert_eq!(props.get("Identity").unwrap().as_ref(), b"");
    let ready = hs.server.ready(&metadata(b"ROUTER", None));
    let ClientStep::Ready { properties } = hs.client.on_command(&ready, &[]).unwrap() else {
        panic!("READY must end the handshake");
    };
    let props = Properties::parse(&properties).unwrap();
    assert_eq!(props.get("Socket-Type").unwrap().as_ref(), b"ROUTER");
    (hs.client.into_cipher(), hs.server.into_cipher(), ready)
}

/// Splits one frame off `wire`: (outer flags, body).
fn next_frame(wire: &mut BytesMut) -> (u8, BytesMut) {
    let header = frame::parse_header(wire, u64::MAX).unwrap().unwrap();
    let _ = wire.split_to(header.header_len);
    (header.flags, wire.split_to(header.body_len as usize))
}

#[test]
fn the_commands_have_libzmqs_layout_and_nonces() {
    let (hs, _, _) = until_authorize();
    // HELLO: 200 bytes, version 1.0, 72 zero bytes of padding, C', short nonce 1.
    assert_eq!(hs.hello.len(), 200);
    assert_eq!(&hs.hello[..6], b"\x05HELLO");
    assert_eq!(&hs.hello[6..8], &[1, 0]);
    assert!(hs.hello[8..80].iter().all(|&b| b == 0));
    assert_eq!(&hs.hello[112..120], &1u64.to_be_bytes());
    // WELCOME: 168 bytes.
    assert_eq!(hs.welcome.len(), 168);
    assert_eq!(&hs.welcome[..8], b"\x07WELCOME");
    // INITIATE: 257 bytes and the metadata, short nonce 2, the cookie echoed from WELCOME
    // (it is inside WELCOME's box, so only its length shows here).
    let md = metadata(b"DEALER", Some(b""));
    assert_eq!(hs.initiate.len(), 257 + md.len());
    assert_eq!(&hs.initiate[..9], b"\x08INITIATE");
    assert_eq!(&hs.initiate[105..113], &2u64.to_be_bytes());

    let (mut client, mut server, ready) = handshake();
    // READY: 30 bytes and the metadata, short nonce 1.
    assert_eq!(ready.len(), 30 + metadata(b"ROUTER", None).len());
    assert_eq!(&ready[..6], b"\x05READY");
    assert_eq!(&ready[6..14], &1u64.to_be_bytes());
    // The first MESSAGEs: nonce 3 from the client, 2 from the server.
    let mut wire = BytesMut::new();
    client.encrypt(false, &[b"x"], &mut wire);
    let (flags, body) = next_frame(&mut wire);
    assert_eq!(flags, 0, "libzmq's MESSAGE frames carry no outer flags");
    assert_eq!(&body[..8], b"\x07MESSAGE");
    assert_eq!(&body[8..16], &3u64.to_be_bytes());
    assert_eq!(body.len(), MESSAGE_OVERHEAD + 1);
    server.encrypt(true, &[b"y"], &mut wire);
    let (flags, body) = next_frame(&mut wire);
    assert_eq!(flags, 0, "MORE travels inside the box only");
    assert_eq!(&body[8..16], &2u64.to_be_bytes());
}

#[test]
fn messages_flow_both_ways_multipart_empty_and_64_kib() {
    let (mut client, mut server, _) = handshake();
    exchange(&mut client, &mut server);
    exchange(&mut server, &mut client);
}

/// Sends a multipart message with empty and 64 KiB frames three times, and checks it.
fn exchange(sender: &mut Cipher, receiver: &mut Cipher) {
    let big = vec![0xA5u8; 64 * 1024];
    let frames: [&[u8]; 4] = [b"", b"hello", &big, b""];
    for round in 0..3 {
        let mut wire = BytesMut::new();
        for (i, f) in frames.iter().enumerate() {
            let more = i + 1 < frames.len();
            // The 64 KiB frame in two pieces: the pieces are concatenated.
            if f.len() > 1000 {
                sender.encrypt(more, &[&f[..1000], &f[1000..]], &mut wire);
            } else {
                sender.encrypt(more, &[f], &mut wire);
            }
        }
        for (i, f) in frames.iter().enumerate() {
            let (flags, body) = next_frame(&mut wire);
            assert_eq!(flags & !frame::LONG, 0);
            let got = if round % 2 == 0 {
                receiver.decrypt(flags, &body).unwrap()
            } else {
                receiver.decrypt_owned(flags, body).unwrap()
            };
            assert_eq!(got.payload.as_ref(), *f);
            assert_eq!(got.more, i + 1 < frames.len());
            assert!(!got.command);
        }
        assert!(wire.is_empty());
    }
}

#[test]
fn commands_travel_inside_message_with_the_command_flag() {
    let (mut client, mut server, _) = handshake();
    let ping = crate::command::body(b"PING", &[0, 30, b'c', b't', b'x']);
    let mut wire = BytesMut::new();
    client.encrypt_command(&[&ping], &mut wire);
    let (flags, body) = next_frame(&mut wire);
    assert_eq!(flags, 0);
    let got = server.decrypt(flags, &body).unwrap();
    assert!(got.command && !got.more);
    let cmd = crate::command::Command::parse(&got.payload).unwrap();
    assert_eq!(cmd.name, b"PING");
    assert_eq!(cmd.data, &[0, 30, b'c', b't', b'x']);
}

#[test]
fn a_tampered_message_is_refused_anywhere() {
    let (mut client, mut server, _) = handshake();
    let mut wire = BytesMut::new();
    client.encrypt(false, &[b"some payload"], &mut wire);
    let (_, body) = next_frame(&mut wire);
    // Every byte after the name: the nonce (a different nonce opens nothing), the MAC, the
    // ciphertext.
    for at in 8..body.len() {
        let mut bad = body.to_vec();
        bad[at] ^= 0x01;
        let err = server.decrypt(0, &bad).unwrap_err();
        assert!(matches!(err, Error::Crypto { .. }), "byte {at}: {err:?}");
    }
    // A tampered name is not a MESSAGE.
    let mut bad = body.to_vec();
    bad[1] = b'N';
    assert!(matches!(
        server.decrypt(0, &bad),
        Err(Error::Unexpected { .. })
    ));
    // Failed attempts did not move the nonce: the original still opens.
    assert_eq!(
        server.decrypt(0, &body).unwrap().payload.as_ref(),
        b"some payload"
    );
}

#[test]
fn outer_more_or_command_flags_are_refused() {
    let (mut client, mut server, _) = handshake();
    let mut wire = BytesMut::new();
    client.encrypt(false, &[b"x"], &mut wire);
    let (_, body) = next_frame(&mut wire);
    for flags in [frame::MORE, frame::COMMAND, frame::MORE | frame::LONG] {
        assert!(matches!(
            server.decrypt(flags, &body),
            Err(Error::Unexpected { .. })
        ));
    }
    // LONG only says how the size was written.
    assert!(server.decrypt(frame::LONG, &body).is_ok());
}

#[test]
fn a_replayed_or_reordered_nonce_is_refused() {
    let (mut client, mut server, _) = handshake();
    let mut wire = BytesMut::new();
    client.encrypt(false, &[b"one"], &mut wire);
    client.encrypt(false, &[b"two"], &mut wire);
    let (_, first) = next_frame(&mut wire);
    let (_, second) = next_frame(&mut wire);
    assert_eq!(server.decrypt(0, &first).unwrap().payload.as_ref(), b"one");
    assert!(matches!(
        server.decrypt(0, &first),
        Err(Error::Crypto { .. })
    ));
    assert_eq!(server.decrypt(0, &second).unwrap().payload.as_ref(), b"two");
    assert!(matches!(
        server.decrypt(0, &first),
        Err(Error::Crypto { .. })
    ));
    assert!(matches!(
        server.decrypt(0, &second),
        Err(Error::Crypto { .. })
    ));

    // Reordered: a later nonce first, then the earlier one is refused.
    client.encrypt(false, &[b"three"], &mut wire);
    client.encrypt(false, &[b"four"], &mut wire);
    let (_, third) = next_frame(&mut wire);
    let (_, fourth) = next_frame(&mut wire);
    assert_eq!(
        server.decrypt(0, &fourth).unwrap().payload.as_ref(),
        b"four"
    );
    assert!(matches!(
        server.decrypt(0, &third),
        Err(Error::Crypto { .. })
    ));

    // The other direction too; a client-to-server MESSAGE does not open at the client
    // (another nonce prefix).
    let mut wire = BytesMut::new();
    server.encrypt(false, &[b"back"], &mut wire);
    let (_, back) = next_frame(&mut wire);
    assert_eq!(client.decrypt(0, &back).unwrap().payload.as_ref(), b"back");
    assert!(matches!(
        client.decrypt(0, &back),
        Err(Error::Crypto { .. })
    ));
    let mut wire = BytesMut::new();
    client.encrypt(false, &[b"loop"], &mut wire);
    let (_, looped) = next_frame(&mut wire);
    assert!(matches!(
        client.decrypt(0, &looped),
        Err(Error::Crypto { .. })
    ));
}

#[test]
fn a_wrong_server_key_fails_the_handshake() {
    let server_keys = CurveKeys::generate();
    let client_keys = CurveKeys::generate();
    // The client holds another server's key: our server cannot open HELLO.
    let mut client = CurveClient::new(&client_keys, CurveKeys::generate().public).unwrap();
    let mut server = CurveServer::new(&server_keys);
    let hello = client.hello();
    assert!(matches!(
        server.on_command(&hello),
        Err(Error::Crypto { .. })
    ));

    // An impostor answers HELLO with its own key: the client cannot open WELCOME.
    let mut client = CurveClient::new(&client_keys, server_keys.public).unwrap();
    let hello = client.hello();
    let mut impostor = CurveServer::new(&CurveKeys {
        public: server_keys.public,
        secret: Zeroizing::new(*CurveKeys::generate().secret()),
    });
    // The impostor cannot open HELLO either; forge its WELCOME from another handshake.
    assert!(matches!(
        impostor.on_command(&hello),
        Err(Error::Crypto { .. })
    ));
    let other_keys = CurveKeys::generate();
    let mut other = CurveServer::new(&other_keys);
    let mut other_client = CurveClient::new(&client_keys, other_keys.public).unwrap();
    let ServerStep::Send(welcome) = other.on_command(&other_client.hello()).unwrap() else {
        panic!("HELLO must be answered with WELCOME");
    };
    assert!(matches!(
        client.on_command(&welcome, &[]),
        Err(Error::Crypto { .. })
    ));
}

#[test]
fn a_mismatched_key_pair_fails_at_the_vouch() {
    let server_keys = CurveKeys::generate();
    // A public key that is not the secret key's: the vouch does not open.
    let liar = CurveKeys::new(
        CurveKeys::generate().public,
        *CurveKeys::generate().secret(),
    );
    let mut client = CurveClient::new(&liar, server_keys.public).unwrap();
    let mut server = CurveServer::new(&server_keys);
    let ServerStep::Send(welcome) = server.on_command(&client.hello()).unwrap() else {
        panic!("HELLO must be answered with WELCOME");
    };
    let ClientStep::Send(initiate) = client.on_command(&welcome, &[]).unwrap() else {
        panic!("WELCOME must be answered with INITIATE");
    };
    assert!(matches!(
        server.on_command(&initiate),
        Err(Error::Crypto { what }) if what.contains("vouch")
    ));
}

#[test]
fn tampered_handshake_boxes_are_refused() {
    let (hs, _, _) = until_authorize();
    // Rerun against fresh machines, tampering each command's boxes.
    let server_keys = CurveKeys::generate();
    let mut client = CurveClient::new(&hs.client_keys, server_keys.public).unwrap();
    let mut server = CurveServer::new(&server_keys);
    let hello = client.hello();
    for at in 112..200 {
        let mut bad = hello.clone();
        bad[at] ^= 0x80;
        assert!(
            matches!(server.on_command(&bad), Err(Error::Crypto { .. })),
            "HELLO byte {at}"
        );
    }
    let ServerStep::Send(welcome) = server.on_command(&hello).unwrap() else {
        panic!("HELLO must be answered with WELCOME");
    };
    for at in 8..168 {
        let mut bad = welcome.clone();
        bad[at] ^= 0x80;
        assert!(
            matches!(client.on_command(&bad, &[]), Err(Error::Crypto { .. })),
            "WELCOME byte {at}"
        );
    }
    let ClientStep::Send(initiate) = client.on_command(&welcome, b"").unwrap() else {
        panic!("WELCOME must be answered with INITIATE");
    };
    // Cookie (9..105), nonce and box (105..): each change is refused.
    for at in 9..initiate.len() {
        let mut bad = initiate.clone();
        bad[at] ^= 0x80;
        assert!(
            matches!(server.on_command(&bad), Err(Error::Crypto { .. })),
            "INITIATE byte {at}"
        );
    }
    // A cookie from another connection of the same server does not open here.
    let mut spliced = initiate.clone();
    spliced[9..105].copy_from_slice(&hs.initiate[9..105]);
    assert!(matches!(
        server.on_command(&spliced),
        Err(Error::Crypto { .. })
    ));
    assert!(matches!(
        server.on_command(&initiate),
        Ok(ServerStep::Authorize { .. })
    ));
    let ready = server.ready(b"");
    for at in 6..ready.len() {
        let mut bad = ready.clone();
        bad[at] ^= 0x80;
        assert!(
            matches!(client.on_command(&bad, &[]), Err(Error::Crypto { .. })),
            "READY byte {at}"
        );
    }
    assert!(matches!(
        client.on_command(&ready, &[]),
        Ok(ClientStep::Ready { .. })
    ));
}

#[test]
fn a_truncated_command_is_an_error_at_every_length() {
    let server_keys = CurveKeys::generate();
    let client_keys = CurveKeys::generate();
    let md = metadata(b"DEALER", Some(b"id"));
    let mut client = CurveClient::new(&client_keys, server_keys.public).unwrap();
    let mut server = CurveServer::new(&server_keys);
    let hello = client.hello();
    for n in 0..hello.len() {
        assert!(server.on_command(&hello[..n]).is_err(), "HELLO cut at {n}");
    }
    let mut longer = hello.clone();
    longer.push(0);
    assert!(matches!(
        server.on_command(&longer),
        Err(Error::MalformedCommand { .. })
    ));
    let ServerStep::Send(welcome) = server.on_command(&hello).unwrap() else {
        panic!("HELLO must be answered with WELCOME");
    };
    for n in 0..welcome.len() {
        assert!(
            client.on_command(&welcome[..n], &md).is_err(),
            "WELCOME cut at {n}"
        );
    }
    let ClientStep::Send(initiate) = client.on_command(&welcome, &md).unwrap() else {
        panic!("WELCOME must be answered with INITIATE");
    };
    for n in 0..initiate.len() {
        assert!(
            server.on_command(&initiate[..n]).is_err(),
            "INITIATE cut at {n}"
        );
    }
    assert!(matches!(
        server.on_command(&initiate),
        Ok(ServerStep::Authorize { .. })
    ));
    let ready = server.ready(&metadata(b"ROUTER", None));
    for n in 0..ready.len() {
        assert!(
            client.on_command(&ready[..n], &md).is_err(),
            "READY cut at {n}"
        );
    }
    assert!(matches!(
        client.on_command(&ready, &md),
        Ok(ClientStep::Ready { .. })
    ));
    let (mut client, mut server) = (client.into_cipher(), server.into_cipher());
    let mut wire = BytesMut::new();
    client.encrypt(false, &[b"payload"], &mut wire);
    let (_, body) = next_frame(&mut wire);
    for n in 0..body.len() {
        assert!(server.decrypt(0, &body[..n]).is_err(), "MESSAGE cut at {n}");
        assert!(
            server.decrypt_owned(0, BytesMut::from(&body[..n])).is_err(),
            "MESSAGE cut at {n}"
        );
    }
    assert!(server.decrypt(0, &body).is_ok());
}

#[test]
fn error_refuses_and_commands_out_of_turn_are_unexpected() {
    let (mut hs, _, _) = until_authorize();
    let error = hs.server.refuse("400");
    assert!(matches!(
        hs.client.on_command(&error, &[]),
        Err(Error::Refused { reason }) if reason == "400"
    ));
    // ERROR while waiting for WELCOME too.
    let server_keys = CurveKeys::generate();
    let mut client = CurveClient::new(&hs.client_keys, server_keys.public).unwrap();
    let mut server = CurveServer::new(&server_keys);
    assert!(matches!(
        client.on_command(&error, &[]),
        Err(Error::Unexpected { .. })
    ));
    let hello = client.hello();
    assert!(matches!(
        client.on_command(&error, &[]),
        Err(Error::Refused { .. })
    ));
    // A malformed ERROR.
    assert!(matches!(
        client.on_command(b"\x05ERROR\x09ab", &[]),
        Err(Error::MalformedCommand { .. })
    ));
    assert!(matches!(
        client.on_command(&hs.initiate, &[]),
        Err(Error::Unexpected { .. })
    ));
    assert!(matches!(
        server.on_command(&hs.initiate),
        Err(Error::Unexpected { .. })
    ));
    let ServerStep::Send(welcome) = server.on_command(&hello).unwrap() else {
        panic!("HELLO must be answered with WELCOME");
    };
    assert!(matches!(
        server.on_command(&hello),
        Err(Error::Unexpected { .. })
    ));
    assert!(matches!(
        client.on_command(&hs.welcome, &[]),
        Err(Error::Crypto { .. })
    ));
    let ClientStep::Send(_) = client.on_command(&welcome, &[]).unwrap() else {
        panic!("WELCOME must be answered with INITIATE");
    };
    assert!(matches!(
        client.on_command(&welcome, &[]),
        Err(Error::Unexpected { .. })
    ));
    // A HELLO of another version.
    let mut v2 = hello.clone();
    v2[6] = 2;
    let mut fresh = CurveServer::new(&server_keys);
    assert!(matches!(
        fresh.on_command(&v2),
        Err(Error::MalformedCommand { .. })
    ));
}

#[test]
fn keys_derive_and_hide_their_secret() {
    let keys = CurveKeys::generate();
    assert_eq!(public_from_secret(keys.secret()), keys.public);
    let again = CurveKeys::from_secret(*keys.secret());
    assert_eq!(again.public, keys.public);
    let shown = format!("{keys:?}");
    assert!(shown.contains("<hidden>"));
    assert!(!shown.contains(&format!("{:?}", keys.secret())));
    // RFC 7748's X25519 test vector (Alice's key pair, section 6.1).
    let secret = hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
    let public = hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
    assert_eq!(public_from_secret(&secret), public);
}

/// 32 bytes from 64 hex digits.
fn hex(text: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

proptest::proptest! {
    // Each case runs a whole handshake (X25519 in a debug build): 64 cases keep it short.
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Any bytes, with or without a command's name in front, are an error or a step:
    /// never a panic.
    #[test]
    fn arbitrary_commands_never_panic(
        prefix in 0usize..6,
        tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
    ) {
        let names: [&[u8]; 6] = [
            b"", b"\x05HELLO", b"\x07WELCOME", b"\x08INITIATE", b"\x05READY", b"\x07MESSAGE",
        ];
        let mut body = names[prefix].to_vec();
        body.extend_from_slice(&tail);
        let keys = CurveKeys::generate();
        let mut server = CurveServer::new(&keys);
        let _ = server.on_command(&body);
        let mut client = CurveClient::new(&keys, keys.public).unwrap();
        let _ = client.on_command(&body, &[]);
        let _ = client.hello();
        let _ = client.on_command(&body, &[]);
        let (mut client, mut server, _) = handshake();
        let _ = client.decrypt(0, &body);
        let _ = server.decrypt_owned(0, BytesMut::from(&body[..]));
    }
}
