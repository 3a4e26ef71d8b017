//! With a bearer token configured, every HTTP and gRPC request without it (or with a wrong
//! one) is refused with 401 / UNAUTHENTICATED (also for a path that does not exist), but
//! the public routes' (the page, the API description); with it, requests go through.

mod common;

use hyper::{Method, StatusCode};
use spindle_server::client::{grpc_connect, iterate};
use spindle_server::proto::IterateRequest;

const TOKEN: &str = "s3cret-token-0123456789";

#[test]
fn requests_without_the_token_are_refused() {
    let server = common::TestServer::start(|c| c.token = Some(TOKEN.into()));
    let grpc = server.bound.grpc.to_string();
    server.rt.block_on(async {
        for token in [None, Some("wrong-token-0123456789")] {
            let client = server.http(token);
            for (method, path) in [
                (Method::GET, "/v1/status"),
                (Method::GET, "/metrics"),
                (Method::GET, "/v1/item?node=a"),
                (Method::POST, "/v1/txn"),
                // An unknown path is not told apart from a known one without the token.
                (Method::GET, "/v1/no-such-endpoint"),
                (Method::GET, "/openapi.json/"),
                (Method::GET, "/openapi%2Ejson"),
                // A private path with a method it does not take: the token first.
                (Method::DELETE, "/v1/status"),
            ] {
                let (status, answer) = client.json(method, path, None).await.unwrap();
                assert_eq!(status, StatusCode::UNAUTHORIZED, "{path} with {token:?}");
                assert_eq!(answer["error"], "unauthorized");
            }
            // The public routes need no token: the description, and the page.
            for path in ["/openapi.json", "/"] {
                let (status, _) = client.request(Method::GET, path, None).await.unwrap();
                assert_eq!(status, StatusCode::OK, "{path} with {token:?}");
            }
            // A public path with a method it does not take: refused as such, not for the
            // token.
            let (status, _) = client
                .request(Method::POST, "/openapi.json", None)
                .await
                .unwrap();
            assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "with {token:?}");
            let mut g = grpc_connect(&grpc, token).await.unwrap();
            let err = iterate(
                &mut g,
                IterateRequest {
                    view: "disk-0".into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
            assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
        }
        let client = server.http(Some(TOKEN));
        let (status, _) = client.json(Method::GET, "/v1/status", None).await.unwrap();
        assert_eq!(status, StatusCode::OK);
        let mut g = grpc_connect(&grpc, Some(TOKEN)).await.unwrap();
        let mut stream = iterate(
            &mut g,
            IterateRequest {
                view: "disk-0".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        while stream.message().await.unwrap().is_some() {}
    });
    assert_eq!(
        server
            .node
            .metrics
            .unauthorized
            .load(std::sync::atomic::Ordering::Relaxed),
        // Per wrong token: 8 HTTP requests and one gRPC iteration.
        18
    );
    server.stop();
}
