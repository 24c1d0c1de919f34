//! Errors that reach the caller: a handler's own error (code and message), a request no
//! handler answers, and a payload of the wrong type.
//!
//! A `bank` node answers `withdraw` and refuses amounts over the balance with the code
//! `INSUFFICIENT_FUNDS`. The caller gets `node::Error::Handler { code, message }` and can
//! branch on the code; a request for an event nobody handles is `Error::NoHandler`; every
//! error also has a stable `ErrorCode`.
//!
//! Run it with `cargo run -p examples --bin handler_error`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use examples::{address, init_tracing, unexpected, Result};
use node::{Error, HandlerError, Node, Request};

#[tokio::main]
async fn main() -> Result {
    init_tracing();

    let bank = Node::builder()
        .id("bank")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    let balance = Arc::new(AtomicU64::new(100));
    bank.on_request("withdraw", move |req: Request| {
        let balance = Arc::clone(&balance);
        async move {
            // A payload that is not a u64 fails here, with the code INVALID_ARGUMENT.
            let amount: u64 = req.decode()?;
            balance
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| {
                    b.checked_sub(amount)
                })
                .map(|before| before - amount)
                .map_err(|b| {
                    HandlerError::new(
                        "INSUFFICIENT_FUNDS",
                        format!("cannot withdraw {amount}, the balance is {b}"),
                    )
                })
        }
    });

    let customer = Node::builder().id("customer").build().await?;
    customer.connect(&address(&bank)?).await?;

    let left: u64 = customer.request("bank", "withdraw", &30u64).await?;
    println!("withdraw 30   -> ok, {left} left");

    match customer
        .request::<_, u64>("bank", "withdraw", &500u64)
        .await
    {
        Err(Error::Handler { code, message }) if code == "INSUFFICIENT_FUNDS" => {
            println!("withdraw 500  -> Error::Handler code={code} message={message:?}");
        }
        other => return Err(unexpected(format!("{other:?} for an overdraft"))),
    }

    match customer.request::<_, u64>("bank", "withdraw", "lots").await {
        Err(e @ Error::Handler { .. }) => println!("withdraw lots -> {e} ({:?})", e.code()),
        other => return Err(unexpected(format!("{other:?} for a bad payload"))),
    }

    match customer.request::<_, u64>("bank", "deposit", &10u64).await {
        Err(e @ Error::NoHandler { .. }) => {
            println!("deposit 10    -> Error::NoHandler: {e} ({:?})", e.code())
        }
        other => {
            return Err(unexpected(format!(
                "{other:?} for an event with no handler"
            )))
        }
    }

    // The error is the handler's, not the connection's: the next request works.
    let left: u64 = customer.request("bank", "withdraw", &70u64).await?;
    println!("withdraw 70   -> ok, {left} left");

    customer.close().await;
    bank.close().await;
    Ok(())
}
