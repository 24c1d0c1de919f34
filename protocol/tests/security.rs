//! CURVE at the protocol layer: a refused connection is a typed error from `connect`, in
//! bounded time, and handlers see the key libzmq authenticated.

use std::time::Duration;

use bytes::Bytes;
use protocol::{request_fn, Client, Error, Server, DEFAULT_MAX_PAYLOAD};
use transport::{Curve, HandshakeFailure, KeyPair, Options};

const WAIT: Duration = Duration::from_secs(5);

async fn curve_server(keys: &KeyPair) -> Server {
    let options = Options::default().curve(Curve::server(keys));
    let (server, _events) = Server::bind_with("tcp://127.0.0.1:0", options, DEFAULT_MAX_PAYLOAD)
        .await
        .unwrap();
    server.on_request(
        "whoami",
        request_fn(|req| async move {
            let key = req.peer_key().map(|k| k.to_z85()).unwrap_or_default();
            Ok(Bytes::from(key))
        }),
    );
    server
}

async fn connect(server: &Server, options: Options) -> protocol::Result<Client> {
    Client::connect_with(server.endpoint(), options, DEFAULT_MAX_PAYLOAD, WAIT).await
}

#[tokio::test]
async fn handlers_see_the_authenticated_client_key() {
    let (server_keys, client_keys) = (KeyPair::generate().unwrap(), KeyPair::generate().unwrap());
    let server = curve_server(&server_keys).await;
    let options = Options::default().curve(Curve::client(&client_keys, server_keys.public));
    let client = connect(&server, options).await.unwrap();
    let reply = client
        .peer()
        .request("whoami", Bytes::new(), WAIT)
        .await
        .unwrap();
    assert_eq!(
        reply.payload(),
        &Bytes::from(client_keys.public.to_z85()),
        "the handler saw the client's public key"
    );
    client.close().await;
    server.close().await;
}

#[tokio::test]
async fn an_unlisted_key_is_refused_by_connect_not_left_to_time_out() {
    let (server_keys, client_keys) = (KeyPair::generate().unwrap(), KeyPair::generate().unwrap());
    let server = curve_server(&server_keys).await;
    server.allow_keys([]).unwrap();
    let options = Options::default().curve(Curve::client(&client_keys, server_keys.public));
    let started = tokio::time::Instant::now();
    match connect(&server, options).await {
        Err(Error::Refused { reason, .. }) => assert_eq!(reason, HandshakeFailure::Auth),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(
        started.elapsed() < WAIT,
        "refused before the connect timeout"
    );
    assert_eq!(server.stats().requests_handled, 0);

    // Listed now: a new connect gets in.
    server.allow_key(client_keys.public).unwrap();
    let options = Options::default().curve(Curve::client(&client_keys, server_keys.public));
    let client = connect(&server, options).await.unwrap();
    client
        .peer()
        .request("whoami", Bytes::new(), WAIT)
        .await
        .unwrap();
    client.close().await;
    server.close().await;
}

#[tokio::test]
async fn a_plaintext_client_is_refused_by_a_curve_server() {
    let server = curve_server(&KeyPair::generate().unwrap()).await;
    let err = connect(&server, Options::default()).await.unwrap_err();
    assert!(
        matches!(err, Error::Refused { .. }),
        "expected a refusal, got {err:?}"
    );
    assert_eq!(err.code(), protocol::ErrorCode::Refused);
    server.close().await;
}

#[tokio::test]
async fn a_wrong_server_key_is_refused_by_connect() {
    let server = curve_server(&KeyPair::generate().unwrap()).await;
    let (client_keys, impostor) = (KeyPair::generate().unwrap(), KeyPair::generate().unwrap());
    let options = Options::default().curve(Curve::client(&client_keys, impostor.public));
    let err = connect(&server, options).await.unwrap_err();
    assert!(
        matches!(err, Error::Refused { .. }),
        "expected a refusal, got {err:?}"
    );
    assert_eq!(server.stats().requests_handled, 0);
    server.close().await;
}
