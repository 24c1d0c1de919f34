//! Poly1305 (RFC 8439, section 2.5), the MAC of every CurveZMQ box: the whole message at
//! once, in three 44/44/42-bit limbs with 64-bit multiplies into 128 bits.
//!
//! Ours because of its cost on short messages. The `poly1305` crate picks its AVX2 backend
//! at run time on this machine's CPU, and there it costs more than the rest of a CURVE
//! message together: with 100 requests of 100 B in flight (`node-native-curve`, two
//! processes), its functions took about a third of each side's CPU (its intrinsics are
//! called, not inlined), and the same build with that crate's portable backend
//! (`--cfg poly1305_force_soft`) ran 1.8-2.2x faster. A box's message is one frame (a
//! request, a few hundred bytes), where four-block vectors do not pay for their setup;
//! this is the portable form, and it needs no build flag from the crates that use us.
//!
//! Constant time: no branch or index depends on the key or the message's content, only on
//! its length; the final reduction selects with a mask. Tested against RFC 8439's vectors
//! and against the `poly1305` crate on random keys and every length to 600 bytes.

use zeroize::Zeroize;

const MASK44: u64 = (1 << 44) - 1;
const MASK42: u64 = (1 << 42) - 1;

/// The 16-byte tag of `message` under the one-time `key` (`r` then `s`).
pub(crate) fn mac(key: &[u8; 32], message: &[u8]) -> [u8; 16] {
    let mut state = State::new(key);
    let mut blocks = message.chunks_exact(16);
    for block in &mut blocks {
        let mut whole = [0u8; 16];
        whole.copy_from_slice(block);
        state.block(&whole, 1 << 40);
    }
    let rest = blocks.remainder();
    if !rest.is_empty() {
        // The last partial block: its bytes, a 1, then zeros (the 2^128 bit is not set).
        let mut last = [0u8; 16];
        last[..rest.len()].copy_from_slice(rest);
        last[rest.len()] = 1;
        state.block(&last, 0);
        last.zeroize();
    }
    state.finish()
}

/// Little-endian `u64` of eight bytes of a block.
fn le(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[..8]);
    u64::from_le_bytes(word)
}

/// The accumulator `h`, the clamped `r` (with `r1 * 20`, `r2 * 20` for the reduction) and
/// the pad `s`, all wiped on drop.
struct State {
    r: [u64; 3],
    /// `r1 * 20` and `r2 * 20`: a product that reaches 2^130 folds back times 5 (2^130 is
    /// 5 mod p), and the limbs above it sit 2 bits further (44 + 88 = 132).
    folded: [u64; 2],
    h: [u64; 3],
    pad: [u64; 2],
}

impl State {
    fn new(key: &[u8; 32]) -> State {
        let (t0, t1) = (le(&key[0..8]), le(&key[8..16]));
        // The limbs of r, clamped as RFC 8439 says (r &= 0x0ffffffc0ffffffc0ffffffc0fffffff).
        let r0 = t0 & 0xffc_0fff_ffff;
        let r1 = ((t0 >> 44) | (t1 << 20)) & 0xfff_ffc0_ffff;
        let r2 = (t1 >> 24) & 0x00f_ffff_fc0f;
        State {
            r: [r0, r1, r2],
            folded: [r1 * 20, r2 * 20],
            h: [0; 3],
            pad: [le(&key[16..24]), le(&key[24..32])],
        }
    }

    /// Adds one 16-byte block (with `high` as its 2^128 bit, in the top limb's terms) and
    /// multiplies by `r`, mod 2^130 - 5 (partly reduced: limbs may exceed their width by a
    /// little until `finish`).
    fn block(&mut self, block: &[u8; 16], high: u64) {
        let (t0, t1) = (le(&block[0..8]), le(&block[8..16]));
        let [r0, r1, r2] = self.r;
        let [s1, s2] = self.folded;
        let h0 = self.h[0] + (t0 & MASK44);
        let h1 = self.h[1] + (((t0 >> 44) | (t1 << 20)) & MASK44);
        let h2 = self.h[2] + (((t1 >> 24) & MASK42) | high);
        let m = |a: u64, b: u64| u128::from(a) * u128::from(b);
        let d0 = m(h0, r0) + m(h1, s2) + m(h2, s1);
        let mut d1 = m(h0, r1) + m(h1, r0) + m(h2, s2);
        let mut d2 = m(h0, r2) + m(h1, r1) + m(h2, r0);
        // Carries: the limbs fit in 64 bits again.
        let mut h0 = (d0 as u64) & MASK44;
        d1 += d0 >> 44;
        let mut h1 = (d1 as u64) & MASK44;
        d2 += d1 >> 44;
        let h2 = (d2 as u64) & MASK42;
        let carry = (d2 >> 42) as u64;
        h0 += carry * 5;
        h1 += h0 >> 44;
        h0 &= MASK44;
        self.h = [h0, h1, h2];
    }

    /// Reduces `h` fully mod 2^130 - 5, adds the pad, and gives the low 128 bits.
    fn finish(self) -> [u8; 16] {
        let [mut h0, mut h1, mut h2] = self.h;
        // Two rounds of carries bring every limb under its width.
        for _ in 0..2 {
            h2 += h1 >> 44;
            h1 &= MASK44;
            h0 += (h2 >> 42) * 5;
            h2 &= MASK42;
            h1 += h0 >> 44;
            h0 &= MASK44;
        }
        h2 += h1 >> 44;
        h1 &= MASK44;
        // g = h + 5 - 2^130 = h - p; keep it where it did not go below zero (h >= p).
        let mut g0 = h0 + 5;
        let mut g1 = h1 + (g0 >> 44);
        g0 &= MASK44;
        let g2 = (h2 + (g1 >> 44)).wrapping_sub(1 << 42);
        g1 &= MASK44;
        let take_g = (g2 >> 63).wrapping_sub(1);
        h0 = (h0 & !take_g) | (g0 & take_g);
        h1 = (h1 & !take_g) | (g1 & take_g);
        h2 = (h2 & !take_g) | (g2 & take_g);
        // h + s, mod 2^128.
        let [s0, s1] = self.pad;
        h0 += s0 & MASK44;
        h1 += (((s0 >> 44) | (s1 << 20)) & MASK44) + (h0 >> 44);
        h0 &= MASK44;
        h2 += ((s1 >> 24) & MASK42) + (h1 >> 44);
        h1 &= MASK44;
        h2 &= MASK42;
        let low = h0 | (h1 << 44);
        let high = (h1 >> 20) | (h2 << 24);
        let mut tag = [0u8; 16];
        tag[..8].copy_from_slice(&low.to_le_bytes());
        tag[8..].copy_from_slice(&high.to_le_bytes());
        tag
    }
}

impl Drop for State {
    fn drop(&mut self) {
        self.r.zeroize();
        self.folded.zeroize();
        self.h.zeroize();
        self.pad.zeroize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> Vec<u8> {
        let text: String = text.split_whitespace().collect();
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    fn key(text: &str) -> [u8; 32] {
        hex(text).try_into().unwrap()
    }

    #[test]
    fn rfc_8439_vectors() {
        // Section 2.5.2.
        let k = key("85d6be7857556d337f4452fe42d506a80103808afb0db2fd4abff6af4149f51b");
        let tag = mac(&k, b"Cryptographic Forum Research Group");
        assert_eq!(tag.to_vec(), hex("a8061dc1305136c6c22b8baf0c0127a9"));
        // Appendix A.3, #1: the zero key of a zero message.
        assert_eq!(mac(&[0; 32], &[0; 64]), [0; 16]);
        // A.3 #2: r = 0, so the tag is s.
        let k = key("0000000000000000000000000000000036e5f6b5c5e06070f0efca96227a863e");
        let text = b"Any submission to the IETF intended by the Contributor for publication as all or part of an IETF Internet-Draft or RFC and any statement made within the context of an IETF activity is considered an \"IETF Contribution\". Such statements include oral statements in IETF sessions, as well as written and electronic communications made at any time or place, which are addressed to";
        assert_eq!(
            mac(&k, text).to_vec(),
            hex("36e5f6b5c5e06070f0efca96227a863e")
        );
        // A.3 #3: s = 0.
        let k = key("36e5f6b5c5e06070f0efca96227a863e00000000000000000000000000000000");
        assert_eq!(
            mac(&k, text).to_vec(),
            hex("f3477e7cd95417af89a6b8794c310cf0")
        );
        // A.3 #4.
        let k = key("1c9240a5eb55d38af333888604f6b5f0473917c1402b80099dca5cbc207075c0");
        let text = b"'Twas brillig, and the slithy toves\nDid gyre and gimble in the wabe:\nAll mimsy were the borogoves,\nAnd the mome raths outgrabe.";
        assert_eq!(
            mac(&k, text).to_vec(),
            hex("4541669a7eaaee61e708dc7cbcc5eb62")
        );
    }

    #[test]
    fn rfc_8439_edge_cases_of_the_reduction() {
        // Appendix A.3, #5 to #11: h lands on or around 2^130 - 5.
        let cases = [
            (
                "0200000000000000000000000000000000000000000000000000000000000000",
                "ffffffffffffffffffffffffffffffff",
                "03000000000000000000000000000000",
            ),
            (
                "02000000000000000000000000000000ffffffffffffffffffffffffffffffff",
                "02000000000000000000000000000000",
                "03000000000000000000000000000000",
            ),
            (
                "0100000000000000000000000000000000000000000000000000000000000000",
                "ffffffffffffffffffffffffffffffff f0ffffffffffffffffffffffffffffff 11000000000000000000000000000000",
                "05000000000000000000000000000000",
            ),
            (
                "0100000000000000000000000000000000000000000000000000000000000000",
                "ffffffffffffffffffffffffffffffff fbfefefefefefefefefefefefefefefe 01010101010101010101010101010101",
                "00000000000000000000000000000000",
            ),
            (
                "0200000000000000000000000000000000000000000000000000000000000000",
                "fdffffffffffffffffffffffffffffff",
                "faffffffffffffffffffffffffffffff",
            ),
            (
                "0100000000000000040000000000000000000000000000000000000000000000",
                "e33594d7505e43b900000000000000003394d7505e4379cd01000000000000000000000000000000000000000000000001000000000000000000000000000000",
                "14000000000000005500000000000000",
            ),
            (
                "0100000000000000040000000000000000000000000000000000000000000000",
                "e33594d7505e43b900000000000000003394d7505e4379cd010000000000000000000000000000000000000000000000",
                "13000000000000000000000000000000",
            ),
        ];
        for (k, text, tag) in cases {
            assert_eq!(mac(&key(k), &hex(text)).to_vec(), hex(tag), "{text}");
        }
    }

    #[test]
    fn agrees_with_the_poly1305_crate_on_every_length() {
        use poly1305::universal_hash::KeyInit;
        // A fixed xorshift stream: the same cases on every run.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut bytes = |n: usize| (0..n).map(|_| next() as u8).collect::<Vec<u8>>();
        for len in 0..=600 {
            for round in 0..3 {
                let mut k: [u8; 32] = bytes(32).try_into().unwrap();
                if round == 2 {
                    // All ones: the largest r and s, the most carries.
                    k = [0xff; 32];
                }
                let message = if round == 2 {
                    vec![0xff; len]
                } else {
                    bytes(len)
                };
                let theirs = poly1305::Poly1305::new((&k).into()).compute_unpadded(&message);
                assert_eq!(
                    mac(&k, &message),
                    theirs.as_slice(),
                    "length {len}, round {round}"
                );
            }
        }
    }
}
