//! `zeronode keygen` and secured nodes from the command line: key files, `--key`,
//! `--server-key`, `--allow`, and the refusals a user meets.

mod support;

use std::path::{Path, PathBuf};

use support::{zeronode, NodeProcess};

/// A fresh directory for this test's key files.
fn key_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("zeronode-cli-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// `zeronode keygen DIR/NAME`; returns the pair file and the public file.
fn keygen(dir: &Path, name: &str) -> (String, String) {
    let pair = dir.join(name);
    let pair = pair.to_str().expect("utf-8 temp path").to_owned();
    let run = zeronode(&["keygen", &pair]);
    let out = run.ok();
    assert!(out.starts_with("public key "), "{out}");
    (pair.clone(), format!("{pair}.pub"))
}

/// A secured `zeronode node` with the given extra flags; returns it once ready.
fn secured_node(pair: &str, extra: &[&str]) -> NodeProcess {
    let mut args = vec![
        "--id",
        "vault",
        "--bind",
        "tcp://127.0.0.1:0",
        "--key",
        pair,
    ];
    args.extend_from_slice(extra);
    let mut node = NodeProcess::start(&args);
    let key_line = node.next_line();
    assert!(key_line.starts_with("public key "), "{key_line}");
    assert_eq!(node.next_line(), "node vault ready");
    node
}

#[test]
fn keygen_writes_a_pair_and_does_not_overwrite_it() {
    let dir = key_dir("keygen");
    let (pair, public) = keygen(&dir, "node.key");
    let pair_text = std::fs::read_to_string(&pair).unwrap();
    let public_text = std::fs::read_to_string(&public).unwrap();
    assert!(pair_text.contains("secret-key = "));
    assert!(
        !public_text.contains("secret"),
        "the .pub file holds no secret"
    );
    let key_line = public_text
        .lines()
        .find(|l| l.starts_with("public-key = "))
        .unwrap();
    assert!(pair_text.contains(key_line), "the two files agree");

    let again = zeronode(&["keygen", &pair]);
    assert!(again.failed().contains("--force"));
    assert_eq!(std::fs::read_to_string(&pair).unwrap(), pair_text, "kept");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn listed_keys_get_answers_and_others_are_refused() {
    let dir = key_dir("allow");
    let (server_pair, server_public) = keygen(&dir, "vault.key");
    let (friend_pair, friend_public) = keygen(&dir, "friend.key");
    let (stranger_pair, _) = keygen(&dir, "stranger.key");
    let node = secured_node(&server_pair, &["--allow", &friend_public]);
    let address = node.address.clone();

    // The listed key, with the server's public key file.
    let run = zeronode(&[
        "request",
        "--connect",
        &address,
        "--key",
        &friend_pair,
        "--server-key",
        &server_public,
        "echo",
        r#""sealed""#,
    ]);
    assert_eq!(run.ok(), r#""sealed""#);

    // An unlisted key, a one-time key, and plaintext: refused at once, one clear line.
    let stranger = [
        "request",
        "--connect",
        &address,
        "--key",
        &stranger_pair,
        "--server-key",
        &server_public,
        "ping",
    ];
    let one_time = [
        "request",
        "--connect",
        &address,
        "--server-key",
        &server_public,
        "ping",
    ];
    let plaintext = ["request", "--connect", &address, "ping"];
    for args in [&stranger[..], &one_time[..], &plaintext[..]] {
        let run = zeronode(args);
        assert_eq!(run.status.code(), Some(1), "{run:?}");
        assert!(run.failed().contains("refused"), "{run:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn without_an_allow_list_a_one_time_key_is_enough() {
    let dir = key_dir("open");
    let (server_pair, server_public) = keygen(&dir, "vault.key");
    let node = secured_node(&server_pair, &[]);
    // The public key can also be given as its 40 characters.
    let text = std::fs::read_to_string(&server_public).unwrap();
    let z85 = text
        .lines()
        .find_map(|l| l.strip_prefix("public-key = "))
        .unwrap()
        .to_owned();
    let run = zeronode(&[
        "request",
        "--connect",
        &node.address,
        "--server-key",
        &z85,
        "ping",
    ]);
    assert_eq!(run.ok(), r#""pong""#);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unusable_keys_are_input_errors() {
    let dir = key_dir("bad");
    let (_, public) = keygen(&dir, "only.key");
    // A public key file where the pair is needed.
    let run = zeronode(&["node", "--key", &public]);
    assert_eq!(run.status.code(), Some(2));
    assert!(run.failed().contains("secret-key"));
    // Neither Z85 nor a file.
    let run = zeronode(&[
        "request",
        "--connect",
        "tcp://127.0.0.1:9",
        "--server-key",
        "nonsense",
        "ping",
    ]);
    assert_eq!(run.status.code(), Some(2));
    assert!(run.failed().contains("nonsense"));
    // --allow on a node without a key.
    let run = zeronode(&["node", "--allow", &public]);
    assert_eq!(run.status.code(), Some(2));
    assert!(run.failed().contains("--allow needs --key"));
    std::fs::remove_dir_all(&dir).unwrap();
}
