//! The cryptography of CurveZMQ, all of it libsodium's (the library libzmq's own CURVE
//! uses), built from source by `libsodium-sys-stable`: X25519 (`crypto_scalarmult_base`,
//! `crypto_box_beforenm`) and NaCl's secretbox, XSalsa20 then Poly1305
//! (`crypto_secretbox_detached`, `crypto_secretbox_open_detached`).
//!
//! This module is the only `unsafe` code in zmtp: each block is one call into libsodium on
//! buffers whose sizes the Rust types fix or the call is given, and nothing is kept
//! across calls.
#![allow(unsafe_code)]

use std::sync::Once;

use libsodium_sys as ffi;
use zeroize::Zeroizing;

/// The length of a key (public, secret, shared or secretbox).
pub(super) const KEY: usize = 32;
/// The length of a secretbox's nonce.
pub(super) const NONCE: usize = 24;
/// The length of a secretbox's MAC.
pub(super) const MAC: usize = 16;

// libsodium's own sizes, checked against ours when the crate is compiled.
const _: () = assert!(ffi::crypto_box_BEFORENMBYTES as usize == KEY);
const _: () = assert!(ffi::crypto_scalarmult_BYTES as usize == KEY);
const _: () = assert!(ffi::crypto_secretbox_KEYBYTES as usize == KEY);
const _: () = assert!(ffi::crypto_secretbox_NONCEBYTES as usize == NONCE);
const _: () = assert!(ffi::crypto_secretbox_MACBYTES as usize == MAC);

/// Calls `sodium_init` once per process, before the first primitive.
///
/// It picks the fastest implementation of each primitive for this CPU (Salsa20, Poly1305,
/// X25519) and is safe to call from any thread and more than once (libzmq calls it too).
/// Its only failure (-1) is a lock it could not take; the primitives are then the portable
/// ones, which give the same results, so there is nothing to report.
fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        // SAFETY: sodium_init takes no arguments and is thread-safe and idempotent.
        let _ = unsafe { ffi::sodium_init() };
    });
}

/// X25519 of `secret` with the base point: the public key of a secret key.
pub(super) fn public_key(secret: &[u8; KEY]) -> [u8; KEY] {
    init();
    let mut public = [0u8; KEY];
    // SAFETY: both buffers are KEY (crypto_scalarmult_BYTES, crypto_scalarmult_SCALARBYTES)
    // bytes, as the function reads and writes. It cannot fail: a clamped scalar times the
    // base point is never the identity (its result is not checked by libsodium either).
    let _ = unsafe { ffi::crypto_scalarmult_base(public.as_mut_ptr(), secret.as_ptr()) };
    public
}

/// The shared key of a box between `secret` and the peer's `public` key
/// (`crypto_box_beforenm`: HSalsa20 of their X25519 point). `None` when that point is all
/// zero: `public` is of small order, and the key would be one anybody can compute.
pub(super) fn box_key(public: &[u8; KEY], secret: &[u8; KEY]) -> Option<Zeroizing<[u8; KEY]>> {
    init();
    let mut key = Zeroizing::new([0u8; KEY]);
    // SAFETY: the three buffers are KEY (crypto_box_BEFORENMBYTES, _PUBLICKEYBYTES,
    // _SECRETKEYBYTES) bytes; the output does not overlap the inputs.
    let rc =
        unsafe { ffi::crypto_box_beforenm(key.as_mut_ptr(), public.as_ptr(), secret.as_ptr()) };
    (rc == 0).then_some(key)
}

/// Encrypts `text` in place under `key` and `nonce` and gives its MAC
/// (`crypto_secretbox_detached`).
pub(super) fn seal(key: &[u8; KEY], nonce: &[u8; NONCE], text: &mut [u8]) -> [u8; MAC] {
    init();
    let mut mac = [0u8; MAC];
    let ptr = text.as_mut_ptr();
    // SAFETY: `text` is read and written over its own length (libsodium allows the
    // ciphertext and message to be the same buffer); `mac`, `nonce` and `key` are the
    // sizes the function uses (checked above). It always returns 0.
    let _ = unsafe {
        ffi::crypto_secretbox_detached(
            ptr,
            mac.as_mut_ptr(),
            ptr,
            text.len() as u64,
            nonce.as_ptr(),
            key.as_ptr(),
        )
    };
    mac
}

/// Checks `mac` over `text` under `key` and `nonce` and, only if it matches, decrypts
/// `text` in place (`crypto_secretbox_open_detached`; the MAC is compared in constant
/// time). `false`, with `text` untouched, when it does not.
pub(super) fn open(key: &[u8; KEY], nonce: &[u8; NONCE], text: &mut [u8], mac: &[u8; MAC]) -> bool {
    init();
    let ptr = text.as_mut_ptr();
    // SAFETY: as in `seal`: `text` in place over its own length, the fixed-size arguments
    // at their sizes. libsodium writes nothing to `text` unless the MAC matched.
    let rc = unsafe {
        ffi::crypto_secretbox_open_detached(
            ptr,
            ptr,
            mac.as_ptr(),
            text.len() as u64,
            nonce.as_ptr(),
            key.as_ptr(),
        )
    };
    rc == 0
}
