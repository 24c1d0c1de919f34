//! NaCl's `crypto_secretbox` (XSalsa20, then Poly1305 over the ciphertext) on a 32-byte
//! key, and `crypto_box`'s precomputed key (`crypto_box_beforenm`: X25519, then HSalsa20):
//! the box of every CurveZMQ command and MESSAGE, and of the server's cookie.
//!
//! Every primitive is libsodium's (`sodium.rs`), as in libzmq's own CURVE. Tested against
//! NaCl's published box and secretbox vectors, against RustCrypto's `crypto_box` and
//! `crypto_secretbox` (an independent implementation) on random keys and lengths, and
//! against libzmq in the interop tests.

use zeroize::Zeroizing;

use super::sodium::{self, KEY, MAC};

/// A box's nonce.
pub(super) type Nonce = [u8; sodium::NONCE];

/// The key of a box, wiped on drop.
pub(super) struct SecretBox {
    key: Zeroizing<[u8; KEY]>,
}

/// A box whose MAC does not match: forged, damaged, or under another key or nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Forged;

impl SecretBox {
    /// A box on this key (the cookie's).
    pub(super) fn new(key: &[u8; KEY]) -> SecretBox {
        SecretBox {
            key: Zeroizing::new(*key),
        }
    }

    /// The box between `secret` and the peer's `public` key, as `crypto_box_beforenm`
    /// makes it. `None` when their X25519 point is all zero: `public` is of small order,
    /// and the key would be one anybody can compute (libsodium refuses these).
    pub(super) fn between(public: &[u8; KEY], secret: &[u8; KEY]) -> Option<SecretBox> {
        sodium::box_key(public, secret).map(|key| SecretBox { key })
    }

    /// Encrypts `text` in place and gives its MAC.
    pub(super) fn seal(&self, nonce: &Nonce, text: &mut [u8]) -> [u8; MAC] {
        sodium::seal(&self.key, nonce, text)
    }

    /// Checks `mac` over `text`, and only then decrypts `text` in place.
    pub(super) fn open(&self, nonce: &Nonce, text: &mut [u8], mac: &[u8]) -> Result<(), Forged> {
        let mac: &[u8; MAC] = mac.try_into().map_err(|_| Forged)?;
        if sodium::open(&self.key, nonce, text, mac) {
            Ok(())
        } else {
            Err(Forged)
        }
    }
}

#[cfg(test)]
mod tests {
    use crypto_box::aead::{AeadInPlace, KeyInit};
    use crypto_box::{PublicKey, SalsaBox, SecretKey};
    use rand_core::{OsRng, RngCore};

    use super::*;

    fn random<const N: usize>() -> [u8; N] {
        let mut out = [0u8; N];
        OsRng.fill_bytes(&mut out);
        out
    }

    fn hex(text: &str) -> Vec<u8> {
        let text: String = text.split_whitespace().collect();
        (0..text.len() / 2)
            .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    }

    fn array<const N: usize>(text: &str) -> [u8; N] {
        hex(text).try_into().unwrap()
    }

    // NaCl's test vector for crypto_box and crypto_secretbox (tests/box.c, box2.c,
    // secretbox.c in NaCl 20110221, also in libsodium's test/default): Alice's and Bob's
    // keys are RFC 7748's (section 6.1).
    const ALICE_SECRET: &str = "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a";
    const ALICE_PUBLIC: &str = "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a";
    const BOB_SECRET: &str = "5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb";
    const BOB_PUBLIC: &str = "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f";
    /// `crypto_box_beforenm(bobpk, alicesk)`: the secretbox test's key ("firstkey").
    const SHARED: &str = "1b27556473e985d462cd51197a9a46c76009549eac6474f206c4ee0844f68389";
    const NONCE: &str = "69696ee955b62b73cd62bda875fc73d68219e0036b7a0b37";
    const PLAIN: &str = "
        be075fc53c81f2d5cf141316ebeb0c7b5228c52a4c62cbd44b66849b64244ffc
        e5ecbaaf33bd751a1ac728d45e6c61296cdc3c01233561f41db66cce314adb31
        0e3be8250c46f06dceea3a7fa1348057e2f6556ad6b1318a024a838f21af1fde
        048977eb48f59ffd4924ca1c60902e52f0a089bc76897040e082f93776384864
        5e0705";
    /// The box: its MAC (16 bytes), then the ciphertext (as long as `PLAIN`).
    const BOXED: &str = "
        f3ffc7703f9400e52a7dfb4b3d3305d9
        8e993b9f48681273c29650ba32fc76ce48332ea7164d96a4476fb8c531a1186a
        c0dfc17c98dce87b4da7f011ec48c97271d2c20f9b928fe2270d6fb863d51738
        b48eeee314a7cc8ab932164548e526ae90224368517acfeabd6bb3732bc0e9da
        99832b61ca01b6de56244a9e88d5f9b37973f622a43d14a6599b1f654cb45a74
        e355a5";

    #[test]
    fn nacl_vectors_box_and_open() {
        let (alice_secret, bob_public) = (array(ALICE_SECRET), array(BOB_PUBLIC));
        let (bob_secret, alice_public) = (array(BOB_SECRET), array(ALICE_PUBLIC));
        assert_eq!(sodium::public_key(&alice_secret), alice_public);
        assert_eq!(sodium::public_key(&bob_secret), bob_public);
        let shared = array::<32>(SHARED);
        assert_eq!(
            *sodium::box_key(&bob_public, &alice_secret).unwrap(),
            shared
        );
        assert_eq!(
            *sodium::box_key(&alice_public, &bob_secret).unwrap(),
            shared
        );

        let nonce: Nonce = array(NONCE);
        let boxed = hex(BOXED);
        let (mac, cipher) = boxed.split_at(MAC);
        // crypto_box from Alice to Bob, and crypto_secretbox on the shared key: the same.
        for sealer in [
            SecretBox::between(&bob_public, &alice_secret).unwrap(),
            SecretBox::new(&shared),
        ] {
            let mut text = hex(PLAIN);
            assert_eq!(sealer.seal(&nonce, &mut text), mac);
            assert_eq!(text, cipher);
        }
        // Bob opens it.
        let mut text = cipher.to_vec();
        SecretBox::between(&alice_public, &bob_secret)
            .unwrap()
            .open(&nonce, &mut text, mac)
            .unwrap();
        assert_eq!(text, hex(PLAIN));
    }

    #[test]
    fn boxes_as_rustcrypto_does_and_opens_what_it_seals() {
        for len in [0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000, 4096] {
            let (ours, theirs): ([u8; 32], [u8; 32]) = (random(), random());
            let public = sodium::public_key(&theirs);
            let nonce: Nonce = random();
            let plain = (0..len).map(|i| i as u8).collect::<Vec<u8>>();
            let mut text = plain.clone();
            let mac = SecretBox::between(&public, &ours)
                .unwrap()
                .seal(&nonce, &mut text);
            let mut reference = plain.clone();
            let tag = SalsaBox::new(&PublicKey::from(public), &SecretKey::from(ours))
                .encrypt_in_place_detached(&nonce.into(), b"", &mut reference)
                .unwrap();
            assert_eq!(text, reference, "ciphertext, {len} bytes");
            assert_eq!(mac.as_slice(), tag.as_slice(), "MAC, {len} bytes");
            // The other side's precomputed key is the same.
            let other = SecretBox::between(&sodium::public_key(&ours), &theirs).unwrap();
            other.open(&nonce, &mut text, &mac).unwrap();
            assert_eq!(text, plain);
        }
    }

    #[test]
    fn a_public_key_of_small_order_makes_no_box() {
        let ours: [u8; 32] = random();
        // u = 0 and u = 1: points of order 1 and 4, whose shared point is all zero for
        // every secret.
        let mut one = [0u8; 32];
        one[0] = 1;
        for public in [[0u8; 32], one] {
            assert!(SecretBox::between(&public, &ours).is_none());
        }
    }

    #[test]
    fn a_changed_byte_mac_nonce_or_key_does_not_open() {
        let key: [u8; 32] = random();
        let nonce: Nonce = random();
        let sealer = SecretBox::new(&key);
        let mut text = b"a CurveZMQ frame".to_vec();
        let mac = sealer.seal(&nonce, &mut text);
        let sealed = text.clone();
        // The same as crypto_secretbox's XSalsa20Poly1305.
        let mut reference = b"a CurveZMQ frame".to_vec();
        let tag = crypto_secretbox::XSalsa20Poly1305::new((&key).into())
            .encrypt_in_place_detached((&nonce).into(), b"", &mut reference)
            .unwrap();
        assert_eq!((sealed.clone(), mac.to_vec()), (reference, tag.to_vec()));

        let mut flipped = sealed.clone();
        flipped[3] ^= 1;
        assert_eq!(sealer.open(&nonce, &mut flipped, &mac), Err(Forged));
        let mut bad_mac = mac;
        bad_mac[0] ^= 0x80;
        let mut copy = sealed.clone();
        assert_eq!(sealer.open(&nonce, &mut copy, &bad_mac), Err(Forged));
        assert_eq!(copy, sealed, "a box that does not open is left as it was");
        let mut other_nonce = nonce;
        other_nonce[23] ^= 1;
        assert_eq!(sealer.open(&other_nonce, &mut copy, &mac), Err(Forged));
        let other_key = SecretBox::new(&random());
        assert_eq!(other_key.open(&nonce, &mut copy, &mac), Err(Forged));
        assert_eq!(
            sealer.open(&nonce, &mut copy, &mac[..15]),
            Err(Forged),
            "a short MAC"
        );
        assert_eq!(copy, sealed);
        sealer.open(&nonce, &mut copy, &mac).unwrap();
        assert_eq!(copy, b"a CurveZMQ frame");
    }
}
