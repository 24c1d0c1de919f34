//! CURVE key files: `zeronode keygen` writes them, `--key`, `--server-key` and `--allow` read
//! them.
//!
//! A key pair file holds both keys and must stay private (written with mode 0600); its
//! public half goes to `FILE.pub` for the nodes that connect or the allow-lists that list it:
//!
//! ```text
//! # zeronode CURVE key pair: keep this file private
//! public-key = rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7
//! secret-key = JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6
//! ```
//!
//! Wherever a public key is asked for, the 40 characters of Z85 work as well as a file.

use std::path::{Path, PathBuf};

use node::{Key, KeyPair, Node, NodeBuilder, PeerInfo, SecretKey};

use crate::args::SecurityArgs;
use crate::error::Error;

/// A command's security, once its files are read.
#[derive(Debug, Clone, Default)]
pub(crate) struct Security {
    /// The node's key pair.
    pub(crate) keys: Option<KeyPair>,
    /// The key of the node(s) `--connect` reaches: connects are secured.
    pub(crate) server_key: Option<Key>,
    /// The engine the node's sockets run on, when `--engine` chose one.
    pub(crate) engine: Option<node::Engine>,
}

impl Security {
    /// Reads `--key` and `--server-key`. A command that only connects (`one_time`) gets a
    /// fresh key pair when it has a server key and no key of its own.
    pub(crate) fn load(args: &SecurityArgs, one_time: bool) -> Result<Security, Error> {
        let mut keys = args.key.as_deref().map(read_pair).transpose()?;
        let server_key = args.server_key.as_deref().map(read_public).transpose()?;
        if keys.is_none() && server_key.is_some() && one_time {
            keys = Some(KeyPair::generate().map_err(|e| Error::Key {
                what: "a one-time key pair".into(),
                reason: e.to_string(),
            })?);
        }
        if server_key.is_some() && keys.is_none() {
            return Err(Error::Usage(
                "--server-key needs --key: this node's own key pair (zeronode keygen FILE)".into(),
            ));
        }
        Ok(Security {
            keys,
            server_key,
            engine: args.engine,
        })
    }

    /// The builder with this node's key pair, if any, and the chosen engine.
    pub(crate) fn apply(&self, builder: NodeBuilder) -> NodeBuilder {
        let builder = match self.engine {
            Some(engine) => builder.engine(engine),
            None => builder,
        };
        match &self.keys {
            Some(keys) => builder.curve(keys.clone()),
            None => builder,
        }
    }

    /// Connects, secured when a server key was given.
    pub(crate) async fn connect(&self, node: &Node, address: &str) -> node::Result<PeerInfo> {
        match self.server_key {
            Some(key) => {
                node.connect_with(address, node::ConnectOptions::new().server_key(key))
                    .await
            }
            None => node.connect(address).await,
        }
    }
}

/// The line that names the public key.
const PUBLIC: &str = "public-key";
/// The line that names the secret key.
const SECRET: &str = "secret-key";

/// The text of a key pair file.
pub(crate) fn pair_text(keys: &KeyPair) -> String {
    format!(
        "# zeronode CURVE key pair: keep this file private\n{PUBLIC} = {}\n{SECRET} = {}\n",
        keys.public.to_z85(),
        keys.secret.to_z85()
    )
}

/// The text of a public key file.
pub(crate) fn public_text(key: &Key) -> String {
    format!(
        "# zeronode CURVE public key: give it to the nodes that connect to this one\n{PUBLIC} = {}\n",
        key.to_z85()
    )
}

/// The value of `name = value` in a key file, if the line is there.
fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once('='))
        .find(|(key, _)| key.trim() == name)
        .map(|(_, value)| value.trim())
}

/// Parses a key pair file's text.
pub(crate) fn parse_pair(text: &str) -> Result<KeyPair, String> {
    let public = field(text, PUBLIC).ok_or("no `public-key = ...` line")?;
    let secret = field(text, SECRET)
        .ok_or("no `secret-key = ...` line (is this a public key file? --key needs the pair)")?;
    let public = Key::from_z85(public).map_err(|e| format!("public key: {e}"))?;
    let secret = SecretKey::from_z85(secret).map_err(|e| format!("secret key: {e}"))?;
    Ok(KeyPair::new(public, secret))
}

/// Parses a public key: 40 characters of Z85, or the text of a key file (either kind).
pub(crate) fn parse_public(text: &str) -> Result<Key, String> {
    let z85 = field(text, PUBLIC).unwrap_or(text.trim());
    Key::from_z85(z85).map_err(|e| e.to_string())
}

/// Reads the key pair file behind `--key`.
pub(crate) fn read_pair(path: &Path) -> Result<KeyPair, Error> {
    let text = read(path)?;
    parse_pair(&text).map_err(|reason| Error::Key {
        what: path.display().to_string(),
        reason,
    })
}

/// A public key given on the command line: Z85 text, or a file that holds one. A file
/// that exists wins: a path of 40 characters can be valid Z85 too (`/`, `-`, `.`, letters
/// and digits all are), and reading it as a key would connect with the wrong one.
pub(crate) fn read_public(arg: &str) -> Result<Key, Error> {
    let path = Path::new(arg);
    if !path.is_file() {
        if let Ok(key) = Key::from_z85(arg) {
            return Ok(key);
        }
    }
    if !path.exists() {
        return Err(Error::Key {
            what: arg.to_owned(),
            reason: "neither 40 characters of Z85 nor an existing key file".into(),
        });
    }
    let text = read(path)?;
    parse_public(&text).map_err(|reason| Error::Key {
        what: arg.to_owned(),
        reason,
    })
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|e| Error::Key {
        what: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// `zeronode keygen FILE`: a fresh key pair in `FILE` (private) and its public key in
/// `FILE.pub`. Existing files are kept unless `force`. Returns the public key file's path.
pub(crate) fn keygen(path: &Path, force: bool) -> Result<(KeyPair, PathBuf), Error> {
    let public_path = public_path(path);
    if !force {
        for existing in [path, public_path.as_path()] {
            if existing.exists() {
                return Err(Error::Usage(format!(
                    "{} exists: not overwritten (--force replaces it)",
                    existing.display()
                )));
            }
        }
    }
    let keys = KeyPair::generate().map_err(|e| Error::Key {
        what: "a new key pair".into(),
        reason: e.to_string(),
    })?;
    write_private(path, &pair_text(&keys))?;
    std::fs::write(&public_path, public_text(&keys.public)).map_err(|e| Error::Key {
        what: public_path.display().to_string(),
        reason: e.to_string(),
    })?;
    Ok((keys, public_path))
}

/// `FILE.pub`.
fn public_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

/// Writes a file only its owner can read (Unix), replacing any previous one.
fn write_private(path: &Path, text: &str) -> Result<(), Error> {
    use std::io::Write;
    let failed = |e: std::io::Error| Error::Key {
        what: path.display().to_string(),
        reason: e.to_string(),
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(failed)?;
    // An existing file keeps its mode through `open`: make sure it is private.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(failed)?;
    }
    file.write_all(text.as_bytes()).map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key file whose path is 40 characters of the Z85 alphabet is read as a file.
    #[test]
    fn a_key_file_whose_path_is_valid_z85_is_read_as_a_file() {
        let keys = KeyPair::generate().unwrap();
        let dir = std::env::temp_dir().join(format!("zn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let base = dir.display().to_string();
        // Padded to 40 characters with a name of the Z85 alphabet.
        let name: String = "k".repeat(40 - base.len() - 1);
        let path = format!("{base}/{name}");
        assert_eq!(path.len(), 40);
        assert!(Key::from_z85(&path).is_ok(), "the path itself is valid Z85");
        std::fs::write(&path, public_text(&keys.public)).unwrap();
        let read = read_public(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(read, keys.public);
    }

    #[test]
    fn a_pair_survives_its_file() {
        let keys = KeyPair::generate().unwrap();
        let back = parse_pair(&pair_text(&keys)).unwrap();
        assert_eq!(back.public, keys.public);
        assert_eq!(back.secret.as_bytes(), keys.secret.as_bytes());
        assert_eq!(
            parse_public(&public_text(&keys.public)).unwrap(),
            keys.public
        );
        // The pair file also gives its public key.
        assert_eq!(parse_public(&pair_text(&keys)).unwrap(), keys.public);
    }

    #[test]
    fn malformed_files_say_what_is_wrong() {
        let keys = KeyPair::generate().unwrap();
        let public_only = public_text(&keys.public);
        assert!(parse_pair(&public_only).unwrap_err().contains("secret-key"));
        assert!(parse_pair("nothing here")
            .unwrap_err()
            .contains("public-key"));
        let short = "public-key = abc\nsecret-key = def\n";
        assert!(parse_pair(short).unwrap_err().starts_with("public key:"));
        assert!(parse_public("not a key").is_err());
    }

    #[test]
    fn keygen_writes_a_private_pair_and_refuses_to_overwrite() {
        let dir = std::env::temp_dir().join(format!("zeronode-keygen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("node.key");
        let (keys, public) = keygen(&path, true).unwrap();
        assert_eq!(read_pair(&path).unwrap().public, keys.public);
        assert_eq!(read_public(public.to_str().unwrap()).unwrap(), keys.public);
        assert_eq!(read_public(&keys.public.to_z85()).unwrap(), keys.public);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "the pair file is private");
        }
        assert!(matches!(keygen(&path, false), Err(Error::Usage(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
