//! What a project that depends on `node` with one line gets: both kinds of request on the
//! default (native) engine, and a typed error for the engine it did not build.

use std::time::Duration;

use node::{ConnectOptions, Engine, HandlerError, KeyPair, Node, Request};

/// Bounds each step, so a hang fails the test instead of CI's overall timeout. Generous: the
/// machine may be busy; a healthy step takes milliseconds.
const STEP: Duration = Duration::from_secs(30);

async fn bounded<T>(step: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, step)
        .await
        .expect("a step took over 30 s")
}

#[tokio::test]
async fn a_plain_request() {
    let worker = bounded(
        Node::builder()
            .id("worker")
            .engine(Engine::Native)
            .bind("tcp://127.0.0.1:0")
            .build(),
    )
    .await
    .unwrap();
    worker.on_request("sum", |req: Request| async move {
        let numbers: Vec<i64> = req.decode()?;
        Ok::<_, HandlerError>(numbers.iter().sum::<i64>())
    });
    let client = bounded(Node::builder().id("client").build()).await.unwrap();
    bounded(client.connect(&worker.address().unwrap()))
        .await
        .unwrap();
    let sum: i64 = bounded(client.request("worker", "sum", &vec![1, 2, 3]))
        .await
        .unwrap();
    assert_eq!(sum, 6);
    client.close().await;
    worker.close().await;
}

#[tokio::test]
async fn a_curve_request_with_keys_made_without_libzmq() {
    let server_keys = KeyPair::generate().unwrap();
    let client_keys = KeyPair::generate().unwrap();
    let server = bounded(
        Node::builder()
            .id("vault")
            .curve(server_keys.clone())
            .allow_keys([client_keys.public])
            .bind("tcp://127.0.0.1:0")
            .build(),
    )
    .await
    .unwrap();
    // The handler answers with the key CURVE authenticated: the client's own.
    server.on_request("who", |req: Request| async move {
        Ok::<_, HandlerError>(req.peer_key().map(|key| key.to_z85()))
    });
    let client = bounded(
        Node::builder()
            .id("teller")
            .curve(client_keys.clone())
            .build(),
    )
    .await
    .unwrap();
    bounded(client.connect_with(
        &server.address().unwrap(),
        ConnectOptions::new().server_key(server_keys.public),
    ))
    .await
    .unwrap();
    let seen: Option<String> = bounded(client.request("vault", "who", &())).await.unwrap();
    assert_eq!(seen, Some(client_keys.public.to_z85()));
    client.close().await;
    server.close().await;
}

#[tokio::test]
async fn the_libzmq_engine_without_its_feature_is_a_typed_error() {
    assert!(!Engine::Libzmq.is_available());
    // A node that binds and one that only connects: both fail at start, on the engine they
    // asked for, and no native node runs in their place.
    for bind in [Some("tcp://127.0.0.1:0"), None] {
        let mut builder = Node::builder().id("on-libzmq").engine(Engine::Libzmq);
        if let Some(address) = bind {
            builder = builder.bind(address);
        }
        match bounded(builder.build()).await {
            Err(node::Error::Protocol(protocol::Error::Transport(
                transport::Error::EngineUnavailable { engine },
            ))) => assert_eq!(engine, Engine::Libzmq),
            Err(other) => panic!("another error: {other:?}"),
            Ok(_) => panic!("a node on the libzmq engine started in a build without it"),
        }
    }
    // Below the node too: a transport socket asked for on libzmq.
    let options = transport::Options::default().engine(Engine::Libzmq);
    assert!(matches!(
        transport::Router::with_options(options),
        Err(transport::Error::EngineUnavailable {
            engine: Engine::Libzmq
        })
    ));
}
