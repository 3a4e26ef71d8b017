//! `spindle load` stops at the first refused transaction, sends nothing after it, waits for
//! every transaction already in flight, and its error names the refused line and says how
//! many transactions were acknowledged: exactly as many as the node then holds. A bad line
//! stops it too, after every line before it was sent.

mod common;

use hyper::{Method, StatusCode};
use spindle_server::client::HttpClient;

const LINES: usize = 40;
const REFUSED: usize = 7;

/// The number in `message` right after `what`.
fn number_after(message: &str, what: &str) -> u64 {
    let at = message.find(what).unwrap_or_else(|| panic!("{message}")) + what.len();
    message[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Whether node `id` reads back once the view has applied `index`.
async fn present(client: &HttpClient, id: &str, index: u64) -> bool {
    let path = format!("/v1/item?node={id}&min_index={index}");
    let (status, _) = client.json(Method::GET, &path, None).await.unwrap();
    match status {
        StatusCode::OK => true,
        StatusCode::NOT_FOUND => false,
        other => panic!("{path}: {other}"),
    }
}

fn line(id: &str, value: &str) -> String {
    format!("{{\"item\":{{\"kind\":\"node\",\"id\":\"{id}\"}},\"value\":{value}}}")
}

#[test]
fn a_refused_transaction_or_a_bad_line_stops_the_load_and_it_says_what_was_acknowledged() {
    let server = common::TestServer::start(|_| {});
    let client = server.http(None);
    server.rt.block_on(async {
        // One write per transaction, 8 in flight; line 7's value is not an object, which
        // only the node refuses.
        let lines: String = (1..=LINES)
            .map(|i| {
                let value = if i == REFUSED {
                    "\"text\"".to_owned()
                } else {
                    format!("{{\"i\":{i}}}")
                };
                line(&format!("n{i}"), &value) + "\n"
            })
            .collect();
        let err = spindle_server::load::load(&client, lines.as_bytes(), 1, 8, |_| {})
            .await
            .unwrap_err();
        let message = format!("{err:#}");
        assert!(message.contains("line 7 was refused"), "{message}");
        let acknowledged = number_after(&message, "the load stopped: ");
        let last = number_after(&message, "the last at index ");
        let mut found = 0;
        for i in 1..=LINES {
            found += u64::from(present(&client, &format!("n{i}"), last).await);
        }
        assert_eq!(found, acknowledged, "{message}");
        assert!(acknowledged >= (REFUSED - 1) as u64, "{message}");
        assert!(
            acknowledged < LINES as u64,
            "lines after the refusal were sent: {message}"
        );

        // A bad line: the lines before it are all sent (the last, partial batch too), none
        // after it.
        let lines = (1..=7)
            .map(|i| {
                if i == 6 {
                    "{not json".to_owned()
                } else {
                    line(&format!("m{i}"), "{}")
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let err = spindle_server::load::load(&client, lines.as_bytes(), 4, 1, |_| {})
            .await
            .unwrap_err();
        let message = format!("{err:#}");
        assert!(message.contains("line 6 is not JSON"), "{message}");
        assert!(message.contains("2 transactions (5 writes)"), "{message}");
        let last = number_after(&message, "the last at index ");
        for i in 1..=7 {
            assert_eq!(
                present(&client, &format!("m{i}"), last).await,
                i <= 5,
                "m{i}"
            );
        }
    });
    server.stop();
}
