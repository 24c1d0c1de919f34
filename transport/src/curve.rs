//! CurveZMQ security: keys, key pairs and the [`Curve`] setting of a socket.
//!
//! CURVE (ZMTP's CurveZMQ mechanism, RFC 26) encrypts and authenticates every connection with
//! Curve25519 keys. The side that accepts connections is the *server*: it has a key pair and
//! publishes its public key. A *client* has its own key pair and must know the server's public
//! key before it connects; a client that has the wrong one never completes the handshake.
//! The server learns each client's public key during the handshake and may refuse keys it does
//! not know (the allow-list, see [`Router::allow_keys`](crate::Router::allow_keys)).
//!
//! Keys are 32 bytes. As text they are 40 characters of Z85 (ZeroMQ's base-85 encoding,
//! RFC 32), the form libzmq's tools and the `zmq_curve_keypair` API use.
//!
//! Z85 is encoded and decoded here rather than with `zmq::z85_decode`, which (in zmq 0.10)
//! ignores libzmq's error return, so a malformed key would decode to arbitrary bytes instead
//! of an error, and leaks its input string on every call. The unit tests check both directions
//! against libzmq's own `zmq_z85_encode` / `zmq_z85_decode`.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use parking_lot::RwLock;

use crate::error::{Error, Result};

/// The Z85 alphabet (RFC 32): the character for each base-85 digit.
const Z85_ALPHABET: &[u8; 85] =
    b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/// Length of a key in Z85 text: 5 characters per 4 bytes.
const Z85_LEN: usize = KEY_LEN / 4 * 5;

/// Length of a CURVE key in bytes.
const KEY_LEN: usize = 32;

/// A CURVE public key: 32 bytes, shown as 40 characters of Z85.
///
/// Public keys are not secret: they print in full (`Display` and `Debug` give the Z85 text).
///
/// ```
/// use transport::Key;
///
/// // The server key of the CurveZMQ RFC's example.
/// let key: Key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7".parse()?;
/// assert_eq!(key.to_z85(), "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7");
/// assert!(matches!(
///     "too short".parse::<Key>(),
///     Err(transport::Error::KeyLength { .. })
/// ));
/// # Ok::<(), transport::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key([u8; KEY_LEN]);

/// A CURVE secret key: 32 bytes. Its `Debug` output hides the key, so it never ends up in a
/// log by accident; [`to_z85`](Self::to_z85) gives the text when you mean to store it. Its
/// bytes are zeroed when it is dropped.
#[derive(Clone)]
pub struct SecretKey([u8; KEY_LEN]);

impl Drop for SecretKey {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

impl Key {
    /// The key's length in bytes.
    pub const LEN: usize = KEY_LEN;

    /// A key from its 32 bytes.
    pub const fn from_bytes(bytes: [u8; KEY_LEN]) -> Key {
        Key(bytes)
    }

    /// The key's 32 bytes.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// Parses the 40-character Z85 form. A wrong length is [`Error::KeyLength`], a character
    /// outside Z85 (or a group that overflows 32 bits) is [`Error::KeyEncoding`].
    pub fn from_z85(text: &str) -> Result<Key> {
        z85_decode(text).map(Key)
    }

    /// The 40-character Z85 form.
    pub fn to_z85(&self) -> String {
        z85_encode(&self.0)
    }
}

impl SecretKey {
    /// The key's length in bytes.
    pub const LEN: usize = KEY_LEN;

    /// A secret key from its 32 bytes.
    pub const fn from_bytes(bytes: [u8; KEY_LEN]) -> SecretKey {
        SecretKey(bytes)
    }

    /// The key's 32 bytes.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// Parses the 40-character Z85 form (errors as for [`Key::from_z85`]).
    pub fn from_z85(text: &str) -> Result<SecretKey> {
        z85_decode(text).map(SecretKey)
    }

    /// The 40-character Z85 form: the secret itself, handle with care.
    pub fn to_z85(&self) -> String {
        z85_encode(&self.0)
    }
}

impl TryFrom<&[u8]> for Key {
    type Error = Error;

    /// A key from a slice that must be exactly 32 bytes long.
    fn try_from(bytes: &[u8]) -> Result<Key> {
        <[u8; KEY_LEN]>::try_from(bytes)
            .map(Key)
            .map_err(|_| Error::KeyLength {
                actual: bytes.len(),
            })
    }
}

impl TryFrom<&[u8]> for SecretKey {
    type Error = Error;

    /// A secret key from a slice that must be exactly 32 bytes long.
    fn try_from(bytes: &[u8]) -> Result<SecretKey> {
        Key::try_from(bytes).map(|key| SecretKey(key.0))
    }
}

impl FromStr for Key {
    type Err = Error;

    fn from_str(text: &str) -> Result<Key> {
        Key::from_z85(text)
    }
}

impl FromStr for SecretKey {
    type Err = Error;

    fn from_str(text: &str) -> Result<SecretKey> {
        SecretKey::from_z85(text)
    }
}

impl fmt::Display for Key {
    /// The Z85 form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_z85())
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({self})")
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(<hidden>)")
    }
}

/// A CURVE key pair: a public key to hand out and the secret key that goes with it.
///
/// ```
/// use transport::KeyPair;
///
/// let server = KeyPair::generate()?;
/// println!("give clients this key: {}", server.public);
/// # Ok::<(), transport::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct KeyPair {
    /// The public key: what peers are told.
    pub public: Key,
    /// The secret key: never leaves this process.
    pub secret: SecretKey,
}

impl KeyPair {
    /// A fresh random key pair: 32 bytes from the operating system's random number generator
    /// and their X25519 public key, computed by libsodium (what libzmq's
    /// `zmq_curve_keypair` does). It needs no libzmq, so it works in every build, with or
    /// without the `libzmq` feature; the `Result` is kept for the API's sake (it is always
    /// `Ok`).
    pub fn generate() -> Result<KeyPair> {
        let pair = zmtp::curve::CurveKeys::generate();
        Ok(KeyPair {
            public: Key(pair.public),
            secret: SecretKey(*pair.secret()),
        })
    }

    /// A key pair from keys stored earlier. The two must belong together: a client whose
    /// public key does not match its secret key fails every handshake.
    pub fn new(public: Key, secret: SecretKey) -> KeyPair {
        KeyPair { public, secret }
    }
}

/// The CURVE setting of a socket ([`Options::curve`](crate::Options::curve)).
///
/// Either side may bind or connect; what matters is who is the server. In zeronode the
/// [`Router`](crate::Router) is the server and the [`Dealer`](crate::Dealer) the client.
///
/// ```
/// use transport::{Curve, KeyPair, Options};
///
/// let server_keys = KeyPair::generate()?;
/// let client_keys = KeyPair::generate()?;
/// let server = Options::default().curve(Curve::server(&server_keys));
/// let client = Options::default().curve(Curve::client(&client_keys, server_keys.public));
/// # Ok::<(), transport::Error>(())
/// ```
#[derive(Clone, Debug)]
pub enum Curve {
    /// Accept CURVE clients. libzmq derives the public key from the secret one. Which client
    /// keys are accepted is the socket's allow-list (none set: any client that knows our
    /// public key).
    Server {
        /// Our own secret key.
        secret_key: SecretKey,
    },
    /// Connect to a CURVE server.
    Client {
        /// Our public key: what the server sees and may check against its allow-list.
        public_key: Key,
        /// Our secret key (it must belong to `public_key`).
        secret_key: SecretKey,
        /// The server's public key. A wrong one makes every handshake fail.
        server_key: Key,
    },
}

impl Curve {
    /// The server setting for our key pair.
    pub fn server(keys: &KeyPair) -> Curve {
        Curve::Server {
            secret_key: keys.secret.clone(),
        }
    }

    /// The client setting for our key pair and the server's public key.
    pub fn client(keys: &KeyPair, server_key: Key) -> Curve {
        Curve::Client {
            public_key: keys.public,
            secret_key: keys.secret.clone(),
            server_key,
        }
    }

    /// Whether this is the server side.
    pub fn is_server(&self) -> bool {
        matches!(self, Curve::Server { .. })
    }
}

/// The client keys one server socket accepts. `None`: any client that knows the server's
/// public key (CURVE itself still authenticates the server and encrypts everything).
#[derive(Debug, Default)]
pub(crate) struct AllowList {
    keys: RwLock<Option<HashSet<Key>>>,
}

impl AllowList {
    /// Replaces the list (an empty one refuses every client).
    pub(crate) fn set(&self, keys: Option<HashSet<Key>>) {
        *self.keys.write() = keys;
    }

    /// Adds a key, starting a list that holds only it if there was none.
    pub(crate) fn insert(&self, key: Key) {
        self.keys
            .write()
            .get_or_insert_with(HashSet::new)
            .insert(key);
    }

    /// Removes a key; whether it was on the list.
    pub(crate) fn remove(&self, key: &Key) -> bool {
        self.keys
            .write()
            .as_mut()
            .is_some_and(|keys| keys.remove(key))
    }

    /// The keys on the list, `None` when there is no list.
    pub(crate) fn keys(&self) -> Option<Vec<Key>> {
        self.keys
            .read()
            .as_ref()
            .map(|keys| keys.iter().copied().collect())
    }

    /// Whether a client with this key may connect.
    pub(crate) fn allows(&self, key: &Key) -> bool {
        self.keys
            .read()
            .as_ref()
            .is_none_or(|keys| keys.contains(key))
    }
}

/// Encodes 32 bytes as 40 characters of Z85: each 4-byte group, big-endian, as 5 base-85
/// digits, most significant first (RFC 32).
fn z85_encode(bytes: &[u8; KEY_LEN]) -> String {
    let mut text = String::with_capacity(Z85_LEN);
    for group in bytes.chunks_exact(4) {
        let mut value = u32::from_be_bytes([group[0], group[1], group[2], group[3]]);
        let mut digits = [0u8; 5];
        for digit in digits.iter_mut().rev() {
            *digit = Z85_ALPHABET[(value % 85) as usize];
            value /= 85;
        }
        text.extend(digits.iter().map(|&d| char::from(d)));
    }
    text
}

/// Decodes 40 characters of Z85 into 32 bytes, checking every character (libzmq's decoder
/// accepts some characters outside the alphabet).
fn z85_decode(text: &str) -> Result<[u8; KEY_LEN]> {
    let text = text.as_bytes();
    if text.len() != Z85_LEN {
        return Err(Error::KeyLength { actual: text.len() });
    }
    let mut bytes = [0u8; KEY_LEN];
    for (index, (group, out)) in text
        .chunks_exact(5)
        .zip(bytes.chunks_exact_mut(4))
        .enumerate()
    {
        let mut value: u64 = 0;
        for (offset, &c) in group.iter().enumerate() {
            let digit = z85_digit(c).ok_or(Error::KeyEncoding {
                position: index * 5 + offset,
            })?;
            value = value * 85 + u64::from(digit);
        }
        // Five base-85 digits reach 85^5 - 1 > u32::MAX: such a group encodes no 4 bytes.
        let value = u32::try_from(value).map_err(|_| Error::KeyEncoding {
            position: index * 5,
        })?;
        out.copy_from_slice(&value.to_be_bytes());
    }
    Ok(bytes)
}

/// The value of one Z85 character, `None` outside the alphabet.
fn z85_digit(c: u8) -> Option<u8> {
    Z85_ALPHABET
        .iter()
        .position(|&a| a == c)
        .and_then(|p| u8::try_from(p).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 32's test vector, repeated to key length.
    #[test]
    fn z85_matches_the_rfc_vector() {
        let hello = [0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B];
        let mut bytes = [0u8; 32];
        for chunk in bytes.chunks_exact_mut(8) {
            chunk.copy_from_slice(&hello);
        }
        let text = z85_encode(&bytes);
        assert_eq!(text, "HelloWorld".repeat(4));
        assert_eq!(z85_decode(&text).unwrap(), bytes);
    }

    #[test]
    fn z85_agrees_with_libzmq() {
        for seed in 0..64u8 {
            let bytes: [u8; 32] = std::array::from_fn(|i| {
                (i as u8)
                    .wrapping_mul(37)
                    .wrapping_add(seed.wrapping_mul(101))
            });
            let ours = z85_encode(&bytes);
            assert_eq!(ours, zmq::z85_encode(&bytes).unwrap());
            assert_eq!(zmq::z85_decode(&ours).unwrap(), bytes.to_vec());
            assert_eq!(z85_decode(&ours).unwrap(), bytes);
        }
        for edge in [[0u8; 32], [0xFF; 32]] {
            let text = z85_encode(&edge);
            assert_eq!(text, zmq::z85_encode(&edge).unwrap());
            assert_eq!(z85_decode(&text).unwrap(), edge);
        }
    }

    #[test]
    fn malformed_keys_are_typed_errors() {
        assert!(matches!(
            Key::from_z85(""),
            Err(Error::KeyLength { actual: 0 })
        ));
        assert!(matches!(
            Key::from_z85(&"a".repeat(41)),
            Err(Error::KeyLength { actual: 41 })
        ));
        // '"' and '~' are not Z85; libzmq's own decoder takes '~' without complaint.
        let mut text = "0".repeat(40);
        text.replace_range(7..8, "\"");
        assert!(matches!(
            Key::from_z85(&text),
            Err(Error::KeyEncoding { position: 7 })
        ));
        text.replace_range(7..8, "~");
        assert!(matches!(
            Key::from_z85(&text),
            Err(Error::KeyEncoding { position: 7 })
        ));
        // "#####" is 85^5 - 1, more than 32 bits hold.
        let overflow = format!("{}{}", "0".repeat(35), "#####");
        assert!(matches!(
            Key::from_z85(&overflow),
            Err(Error::KeyEncoding { position: 35 })
        ));
        // Multi-byte UTF-8 counts in bytes and is not Z85.
        let mut text = "0".repeat(38);
        text.push('é');
        assert!(matches!(
            Key::from_z85(&text),
            Err(Error::KeyEncoding { position: 38 })
        ));
        assert!(matches!(
            Key::try_from(&[0u8; 31][..]),
            Err(Error::KeyLength { actual: 31 })
        ));
    }

    #[test]
    fn secret_keys_do_not_print() {
        let pair = KeyPair::new(Key::from_bytes([1; 32]), SecretKey::from_bytes([2; 32]));
        let shown = format!("{pair:?} {:?}", Curve::server(&pair));
        assert!(!shown.contains(&pair.secret.to_z85()), "{shown}");
        assert!(shown.contains(&pair.public.to_z85()), "{shown}");
    }

    #[test]
    fn generated_pairs_differ_and_round_trip_as_text() {
        let a = KeyPair::generate().unwrap();
        let b = KeyPair::generate().unwrap();
        assert_ne!(a.public, b.public);
        assert_ne!(a.secret.as_bytes(), b.secret.as_bytes());
        // The public half is the secret's: X25519 with the base point.
        assert_eq!(
            a.public.as_bytes(),
            &zmtp::curve::public_from_secret(a.secret.as_bytes())
        );
        assert_eq!(Key::from_z85(&a.public.to_z85()).unwrap(), a.public);
        assert_eq!(
            SecretKey::from_z85(&a.secret.to_z85()).unwrap().as_bytes(),
            a.secret.as_bytes()
        );
    }
}
