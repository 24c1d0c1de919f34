//! The malformed inputs, each with the error it must give.

use super::*;

/// A valid header frame to break.
fn base() -> Vec<u8> {
    wire(Kind::Request, 1, "echo", None, &[], &mp("hi"), 0)[0].to_vec()
}

fn with(mut bytes: Vec<u8>, at: usize, value: u8) -> Vec<u8> {
    bytes[at] = value;
    bytes
}

pub(super) fn malformed() -> Vec<Case> {
    let empty_reply = wire(Kind::Reply, 1, "", None, &[], &[], 0)[0].to_vec();
    let mut long_meta = wire(Kind::Tick, 1, "t", None, &[], &[], 0)[0].to_vec();
    // Declares 5 metadata bytes where none follow (no inline payload).
    let n = long_meta.len();
    long_meta[n - 1] = 5;
    let mut short_meta = wire(
        Kind::Tick,
        1,
        "t",
        None,
        &meta(&[("k", MetaValue::Text("v"))]),
        &[],
        0,
    )[0]
    .to_vec();
    // Declares fewer metadata bytes than follow, without the inline flag.
    short_meta[14 + 1 + 3] -= 1;
    let mut bad_utf8 = base();
    bad_utf8[14] = 0xff;
    let mut long_event = base();
    long_event[13] = 200;
    let system_no_prefix = with(base(), 3, 0x03);
    let prefix_no_flag = with(
        wire(Kind::Tick, 1, "_system:heartbeat", None, &[], &[], 0)[0].to_vec(),
        3,
        0x00,
    );
    vec![
        invalid("malformed_no_frames", "A message of no frames.", vec![]),
        invalid(
            "malformed_three_frames",
            "More than header and payload.",
            vec![empty_reply.clone(), vec![1], vec![2]],
        ),
        invalid(
            "malformed_short_header",
            "A header of 5 bytes (the fixed part is 14).",
            vec![base()[..5].to_vec()],
        ),
        invalid(
            "malformed_bad_magic",
            "The first byte is not 0x5A: not a zeronode peer.",
            vec![with(base(), 0, 0x00)],
        ),
        invalid(
            "malformed_bad_magic_short",
            "A short frame with the wrong first byte reports the magic, not the length.",
            vec![vec![0x47, 0x45, 0x54]],
        ),
        invalid(
            "malformed_version_2",
            "Envelope version 2.",
            vec![with(base(), 1, 2)],
        ),
        invalid("malformed_kind_0", "Kind 0.", vec![with(base(), 2, 0)]),
        invalid("malformed_kind_8", "Kind 8.", vec![with(base(), 2, 8)]),
        invalid(
            "malformed_unknown_flag_bit5",
            "Flag bit 5 on a request.",
            vec![with(base(), 3, 0x22)],
        ),
        invalid(
            "malformed_end_flag_on_request",
            "Bit 4 (end) is only known on a stream item.",
            vec![with(base(), 3, 0x12)],
        ),
        invalid(
            "malformed_stream_flag_on_reply",
            "Bit 2 (reply streamed) is only known on a request.",
            vec![with(empty_reply.clone(), 3, 0x04)],
        ),
        invalid(
            "malformed_body_flag_on_cancel",
            "Bit 3 is not known on a cancel.",
            vec![with(
                wire(Kind::Cancel, 1, "", None, &[], &[], 0)[0].to_vec(),
                3,
                0x08,
            )],
        ),
        invalid(
            "malformed_inline_and_payload_frame",
            "The inline flag set and a payload frame too.",
            vec![base(), vec![1, 2, 3]],
        ),
        invalid(
            "malformed_event_not_utf8",
            "The event name is not UTF-8.",
            vec![bad_utf8],
        ),
        invalid(
            "malformed_event_past_end",
            "The event length runs past the frame.",
            vec![long_event],
        ),
        invalid(
            "malformed_system_flag_without_prefix",
            "The system flag on an event outside `_system:`.",
            vec![system_no_prefix],
        ),
        invalid(
            "malformed_prefix_without_system_flag",
            "An event in `_system:` without the system flag.",
            vec![prefix_no_flag],
        ),
        invalid(
            "malformed_metadata_past_end",
            "The metadata length runs past the frame.",
            vec![long_meta],
        ),
        invalid(
            "malformed_metadata_short",
            "Without the inline flag, the metadata must end the frame exactly.",
            vec![short_meta],
        ),
    ]
}
