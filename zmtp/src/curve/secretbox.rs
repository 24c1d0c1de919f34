//! NaCl's `crypto_secretbox` (XSalsa20, then Poly1305 over the ciphertext) on a 32-byte
//! key, and `crypto_box`'s precomputed key (`crypto_box_beforenm`: X25519, then HSalsa20):
//! the box of every CurveZMQ command and MESSAGE, and of the server's cookie.
//!
//! The stream cipher is the `salsa20` crate's, the X25519 `curve25519-dalek`'s (the crates
//! `crypto_box` is built on); the MAC is ours (`poly1305.rs`, for its cost on short
//! messages). Tested against `crypto_box`'s `SalsaBox` and `crypto_secretbox`, and against
//! libsodium through libzmq in the interop tests.

use crypto_box::SecretKey;
use curve25519_dalek::montgomery::MontgomeryPoint;
use salsa20::cipher::generic_array::GenericArray;
use salsa20::cipher::{KeyIvInit, StreamCipher};
use salsa20::XSalsa20;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::poly1305;

/// A box's nonce.
pub(super) type Nonce = [u8; 24];

/// The key of a box, wiped on drop.
pub(super) struct SecretBox {
    key: Zeroizing<[u8; 32]>,
}

/// A box whose MAC does not match: forged, damaged, or under another key or nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Forged;

impl SecretBox {
    /// A box on this key (the cookie's).
    pub(super) fn new(key: &[u8; 32]) -> SecretBox {
        SecretBox {
            key: Zeroizing::new(*key),
        }
    }

    /// The box between `secret` and the peer's `public` key, as `crypto_box_beforenm`
    /// makes it: HSalsa20 of their X25519 shared point, under a zero nonce. `None` when
    /// that point is all zero: `public` is of small order, and the key would be one anybody
    /// can compute (libsodium refuses these too).
    pub(super) fn between(public: &[u8; 32], secret: &SecretKey) -> Option<SecretBox> {
        let secret = Zeroizing::new(secret.to_bytes());
        let shared = Zeroizing::new(MontgomeryPoint(*public).mul_clamped(*secret));
        if bool::from(shared.as_bytes().ct_eq(&[0u8; 32])) {
            return None;
        }
        let key = Zeroizing::new(salsa20::hsalsa::<salsa20::cipher::consts::U10>(
            GenericArray::from_slice(shared.as_bytes()),
            &GenericArray::default(),
        ));
        let mut bytes = Zeroizing::new([0u8; 32]);
        bytes.copy_from_slice(&key);
        Some(SecretBox { key: bytes })
    }

    /// The cipher at `nonce`, past its first 32 bytes of keystream, and those 32 bytes: the
    /// one-time Poly1305 key.
    fn stream(&self, nonce: &Nonce) -> (XSalsa20, Zeroizing<[u8; 32]>) {
        let mut cipher = XSalsa20::new((&*self.key).into(), nonce.into());
        let mut mac_key = Zeroizing::new([0u8; 32]);
        cipher.apply_keystream(&mut *mac_key);
        (cipher, mac_key)
    }

    /// Encrypts `text` in place and gives its MAC.
    pub(super) fn seal(&self, nonce: &Nonce, text: &mut [u8]) -> [u8; 16] {
        let (mut cipher, mac_key) = self.stream(nonce);
        cipher.apply_keystream(text);
        poly1305::mac(&mac_key, text)
    }

    /// Checks `mac` over `text`, and only then decrypts `text` in place.
    pub(super) fn open(&self, nonce: &Nonce, text: &mut [u8], mac: &[u8]) -> Result<(), Forged> {
        let (mut cipher, mac_key) = self.stream(nonce);
        let expected = poly1305::mac(&mac_key, text);
        if !bool::from(expected.as_slice().ct_eq(mac)) {
            return Err(Forged);
        }
        cipher.apply_keystream(text);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crypto_box::aead::{AeadInPlace, KeyInit};
    use crypto_box::SalsaBox;
    use rand_core::{OsRng, RngCore};

    use super::*;

    fn random<const N: usize>() -> [u8; N] {
        let mut out = [0u8; N];
        OsRng.fill_bytes(&mut out);
        out
    }

    #[test]
    fn boxes_as_crypto_box_does_and_opens_what_it_seals() {
        for len in [0, 1, 15, 16, 17, 31, 32, 33, 100, 1000, 4096] {
            let (ours, theirs) = (
                SecretKey::generate(&mut OsRng),
                SecretKey::generate(&mut OsRng),
            );
            let public = theirs.public_key();
            let nonce: Nonce = random();
            let plain = (0..len).map(|i| i as u8).collect::<Vec<u8>>();
            let mut text = plain.clone();
            let mac = SecretBox::between(public.as_bytes(), &ours)
                .unwrap()
                .seal(&nonce, &mut text);
            let mut reference = plain.clone();
            let tag = SalsaBox::new(&public, &ours)
                .encrypt_in_place_detached(&nonce.into(), b"", &mut reference)
                .unwrap();
            assert_eq!(text, reference, "ciphertext, {len} bytes");
            assert_eq!(mac.as_slice(), tag.as_slice(), "MAC, {len} bytes");
            // The other side's precomputed key is the same.
            let other = SecretBox::between(ours.public_key().as_bytes(), &theirs).unwrap();
            other.open(&nonce, &mut text, &mac).unwrap();
            assert_eq!(text, plain);
        }
    }

    #[test]
    fn a_public_key_of_small_order_makes_no_box() {
        let ours = SecretKey::generate(&mut OsRng);
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
        sealer.open(&nonce, &mut copy, &mac).unwrap();
        assert_eq!(copy, b"a CurveZMQ frame");
    }
}
