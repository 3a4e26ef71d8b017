//! The served `/openapi.json` is a valid OpenAPI 3.1 document by a standard validator
//! (`openapi-spec-validator`, installed by `scripts/openapi-validator.sh`, which the test
//! command runs): every schema, `$ref`, parameter and response is well formed.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::TestServer;
use hyper::Method;

/// The validator: `SPINDLE_OPENAPI_VALIDATOR` (set by the test command; then it must exist),
/// else where `scripts/openapi-validator.sh` installs it, else none.
fn validator() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("SPINDLE_OPENAPI_VALIDATOR").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "SPINDLE_OPENAPI_VALIDATOR={} does not exist",
            path.display()
        );
        return Some(path);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    let dir = std::fs::read_dir(cache.join("spindle")).ok()?;
    dir.filter_map(Result::ok)
        .map(|e| e.path().join("bin/openapi-spec-validator"))
        .find(|p| p.is_file())
}

#[test]
fn served_description_passes_openapi_spec_validator() {
    let Some(validator) = validator() else {
        eprintln!(
            "SKIPPED: openapi-spec-validator is not installed and SPINDLE_OPENAPI_VALIDATOR is \
             not set; `bash scripts/openapi-validator.sh` installs it (scripts/test.sh does)"
        );
        return;
    };
    let server = TestServer::start(|_| {});
    let http = server.http(None);
    let (status, body) = server
        .rt
        .block_on(http.request(Method::GET, "/openapi.json", None))
        .unwrap();
    assert_eq!(status, 200);
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1."),
        "{doc}"
    );
    let file = server.dir.path().join("openapi.json");
    std::fs::write(&file, &body).unwrap();
    let out = Command::new(&validator).arg(&file).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{} refused /openapi.json:\n{text}",
        validator.display()
    );
    assert!(text.contains("OK"), "{text}");
}
