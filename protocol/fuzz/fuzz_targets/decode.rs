//! Feeds arbitrary bytes to the envelope decoder: split into up to three frames by the first
//! two input bytes, decoded with a small payload limit. The decoder must return a value or a
//! typed error, never panic; what decodes must re-encode to frames that decode the same.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use protocol::Envelope;

fuzz_target!(|data: &[u8]| {
    let (cuts, rest) = data.split_at(data.len().min(2));
    let mut frames = Vec::new();
    let mut rest = rest;
    for &cut in cuts {
        let at = usize::from(cut).min(rest.len());
        let (head, tail) = rest.split_at(at);
        frames.push(Bytes::copy_from_slice(head));
        rest = tail;
    }
    frames.push(Bytes::copy_from_slice(rest));
    for count in 1..=frames.len() {
        if let Ok(envelope) = Envelope::decode(&frames[..count], 1 << 16) {
            let again = Envelope::decode(&envelope.encode(), 1 << 16)
                .expect("a decoded envelope re-encodes to a valid one");
            assert_eq!(again, envelope);
        }
    }
});
