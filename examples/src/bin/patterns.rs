//! Handlers by regex pattern, and removing them with `off_request`.
//!
//! A `users` node answers every request whose event matches `^user:` with one handler
//! (`user:create`, `user:delete`, ...), answers `user:export` with a handler of its own (an
//! exact name wins over a pattern), and counts every `^audit:` tick with one tick handler.
//! Then it removes the pattern handler: `user:create` finds no handler any more, while the
//! exact `user:export` still answers.
//!
//! Run it with `cargo run -p examples --bin patterns`.

use examples::{address, init_tracing, unexpected, within, Result};
use node::{Error, HandlerError, Node, Request};
use regex::Regex;

#[tokio::main]
async fn main() -> Result {
    init_tracing();

    let users = Node::builder()
        .id("users")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    // One handler for a whole family of events; `req.event()` tells them apart.
    let user_events = Regex::new("^user:")?;
    users.on_request(user_events.clone(), |req: Request| async move {
        let name: String = req.decode()?;
        let action = req.event().trim_start_matches("user:").to_owned();
        Ok::<_, HandlerError>(format!("{action} {name}: done by the ^user: handler"))
    });
    users.on_request("user:export", |_req: Request| async move {
        Ok::<_, HandlerError>("export: done by the exact user:export handler".to_owned())
    });
    let (audit_tx, mut audit) = tokio::sync::mpsc::unbounded_channel();
    users.on_tick(Regex::new("^audit:")?, move |req: Request| {
        let audit = audit_tx.clone();
        async move {
            let _ = audit.send(req.event().to_owned());
        }
    });

    let admin = Node::builder().id("admin").build().await?;
    admin.connect(&address(&users)?).await?;

    for event in ["user:create", "user:delete", "user:export"] {
        let reply: String = admin.request("users", event, "ada").await?;
        println!("{event:<12} -> {reply}");
    }
    for event in ["audit:login", "audit:logout"] {
        admin.tick("users", event, &()).await?;
        let seen = within("an audit tick", audit.recv()).await?;
        println!(
            "{event:<12} -> tick seen by the ^audit: handler as {}",
            seen.unwrap_or_default()
        );
    }

    // Remove the pattern handler: it is named by the same regex it was registered with.
    let removed = users.off_request(user_events);
    println!("off_request(^user:) removed a handler: {removed}");
    match admin
        .request::<_, String>("users", "user:create", "bob")
        .await
    {
        Err(e @ Error::NoHandler { .. }) => println!("user:create  -> error, as expected: {e}"),
        other => return Err(unexpected(format!("{other:?} after off_request"))),
    }
    let reply: String = admin.request("users", "user:export", "bob").await?;
    println!("user:export  -> {reply}");

    admin.close().await;
    users.close().await;
    Ok(())
}
