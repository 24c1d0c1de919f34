//! A secured mesh: CURVE encryption, an allow-list, and authorization by key.
//!
//! The `vault` node has a key pair and an allow-list holding the teller's public key. The
//! teller connects with its own key pair and the vault's public key, and is served; its
//! handler-visible key is the one libzmq authenticated. A stranger with a key not on the
//! list is refused at once with a typed error, and so is a node speaking plaintext. Then
//! the vault revokes the teller's key: the teller is dropped and cannot rejoin.
//!
//! Run it with `cargo run -p examples --bin secure`.

use examples::{address, init_tracing, Result};
use node::{Error, HandlerError, KeyPair, Node, Request};

#[tokio::main]
async fn main() -> Result {
    init_tracing();
    // In production each node makes its pair once (`zeronode keygen FILE`) and the public
    // keys are handed out; here they are made on the spot.
    let vault_keys = KeyPair::generate()?;
    let teller_keys = KeyPair::generate()?;

    let vault = Node::builder()
        .id("vault")
        .curve(vault_keys.clone())
        .allow_keys([teller_keys.public])
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    let teller_key = teller_keys.public;
    vault.on_request("balance", move |req: Request| async move {
        // Authorize by the key libzmq authenticated, not by anything in the message.
        if req.peer_key() != Some(&teller_key) {
            return Err(HandlerError::new("FORBIDDEN", "tellers only"));
        }
        Ok::<_, HandlerError>(1_250_u64)
    });
    let endpoint = address(&vault)?;
    println!("vault: bound {endpoint}, public key {}", vault_keys.public);

    let teller = Node::builder()
        .id("teller")
        .curve(teller_keys)
        .build()
        .await?;
    teller
        .connect_with(
            &endpoint,
            node::ConnectOptions::new().server_key(vault_keys.public),
        )
        .await?;
    let balance: u64 = teller.request("vault", "balance", &()).await?;
    println!("teller: balance {balance} (over an encrypted connection)");

    let stranger = Node::builder()
        .id("stranger")
        .curve(KeyPair::generate()?)
        .build()
        .await?;
    match stranger
        .connect_with(
            &endpoint,
            node::ConnectOptions::new().server_key(vault_keys.public),
        )
        .await
    {
        Err(Error::Refused { reason, .. }) => println!("stranger: refused ({reason})"),
        other => return Err(format!("the stranger was not refused: {other:?}").into()),
    }
    let plain = Node::builder().id("plain").build().await?;
    match plain.connect(&endpoint).await {
        Err(Error::Refused { reason, .. }) => println!("plain: refused ({reason})"),
        other => return Err(format!("plaintext was not refused: {other:?}").into()),
    }

    vault.keys().revoke(&teller_key).await?;
    let after: node::Result<u64> = teller.request("vault", "balance", &()).await;
    match after {
        Err(e) => println!("teller: after revocation: {e}"),
        Ok(_) => return Err("a revoked teller was served".into()),
    }

    for node in [plain, stranger, teller, vault] {
        node.close().await;
    }
    println!("done: one served, two refused, one revoked");
    Ok(())
}
