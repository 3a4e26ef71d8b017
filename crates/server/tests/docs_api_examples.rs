//! Every curl example in docs/api.md runs, in document order, against a node started as the
//! document says (`--index by_name=/name`, empty data directory), and answers what the
//! document shows under it: the status (`# 409 …`; 2xx when none is shown) and the shape of
//! the body — the same keys with values of the same JSON types, the same error code, or the
//! shown lines of a text answer. Each request and JSON answer is also checked against the
//! schemas of the node's `/openapi.json` (no undocumented key, every required key present).

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::TestServer;
use hyper::Method;
use serde_json::Value;
use spindle_server::config::IndexConfig;

/// One curl command of the document and the answer shown under it.
#[derive(Debug)]
struct Example {
    /// 1-based line of docs/api.md where the command starts.
    line: usize,
    args: Vec<String>,
    /// The `#` lines under the command, without the `# ` prefix.
    answer: Vec<String>,
}

/// Split shell words: whitespace separates, `'…'` is literal (and may span lines), `"…"`
/// takes `\"` and `\\`, a backslash-newline continues the line, `#` outside quotes at the
/// start of a word ends the command. Returns the words and the bytes consumed.
fn shell_words(text: &str) -> (Vec<String>, usize) {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\n' => {
                if let Some(w) = word.take() {
                    words.push(w);
                }
                return (words, i + 1);
            }
            ' ' | '\t' => {
                if let Some(w) = word.take() {
                    words.push(w);
                }
            }
            '#' if word.is_none() => {
                let end = text[i..].find('\n').map_or(text.len(), |n| i + n + 1);
                return (words, end);
            }
            '\\' if chars.peek().map(|&(_, n)| n) == Some('\n') => {
                chars.next();
            }
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                for (_, q) in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    w.push(q);
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                while let Some((_, q)) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => w.push(chars.next().map(|(_, e)| e).unwrap()),
                        _ => w.push(q),
                    }
                }
            }
            _ => word.get_or_insert_with(String::new).push(c),
        }
    }
    if let Some(w) = word.take() {
        words.push(w);
    }
    (words, text.len())
}

/// The curl examples of the `sh` code blocks of `md`, in order.
fn examples(md: &str) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    let mut in_sh = false;
    let mut offset = 0;
    // Whether `#` lines belong to the last example (no other command came between).
    let mut open = false;
    while offset < md.len() {
        let rest = &md[offset..];
        let line_end = rest.find('\n').map_or(rest.len(), |n| n + 1);
        let line = rest[..line_end].trim_end();
        let line_no = md[..offset].matches('\n').count() + 1;
        if line.starts_with("```") {
            in_sh = line == "```sh";
            open = false;
            offset += line_end;
            continue;
        }
        if !in_sh || line.trim().is_empty() {
            offset += line_end;
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            if open {
                let text = comment.strip_prefix(' ').unwrap_or(comment);
                out.last_mut().unwrap().answer.push(text.to_owned());
            }
            offset += line_end;
            continue;
        }
        let (args, used) = shell_words(rest);
        open = args.first().is_some_and(|a| a == "curl");
        if open {
            out.push(Example {
                line: line_no,
                args,
                answer: Vec::new(),
            });
        }
        offset += used;
    }
    out
}

/// What a curl command asks: method, path and query, body.
fn request_of(e: &Example) -> (Method, String, Option<Vec<u8>>) {
    let mut method = None;
    let mut body = None;
    let mut url = None;
    let mut args = e.args[1..].iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "-s" => {}
            "-I" => method = Some(Method::HEAD),
            "-X" => method = Some(Method::from_bytes(args.next().unwrap().as_bytes()).unwrap()),
            "-d" | "--data-binary" => body = Some(args.next().unwrap().as_bytes().to_vec()),
            flag if flag.starts_with('-') => panic!(
                "docs/api.md:{}: curl flag {flag} is not understood by this test; teach it",
                e.line
            ),
            u => url = Some(u.to_owned()),
        }
    }
    let url = url.unwrap_or_else(|| panic!("docs/api.md:{}: no URL", e.line));
    let path = url
        .trim_start_matches("http://")
        .strip_prefix("localhost:7070")
        .unwrap_or_else(|| panic!("docs/api.md:{}: URL {url} is not localhost:7070", e.line))
        .to_owned();
    let method = method.unwrap_or(if body.is_some() {
        Method::POST
    } else {
        Method::GET
    });
    (method, path, body)
}

/// The status and body shown under an example: a leading three-digit status, if any.
fn shown(e: &Example) -> Option<(Option<u16>, String)> {
    let first = e.answer.first()?;
    let status = first
        .get(..3)
        .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        .filter(|_| first.len() == 3 || first.as_bytes()[3] == b' ')
        .map(|s| s.parse().unwrap());
    let mut lines = e.answer.clone();
    if status.is_some() {
        lines[0] = first.get(4..).unwrap_or("").to_owned();
    }
    let body = lines
        .into_iter()
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    Some((status, body))
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether `actual` has the shape of `shown`: the same keys, values of the same JSON types,
/// the same `error` code; every element of an array has the shape of a shown element and
/// every shown element the shape of an answered one.
fn same_shape(shown: &Value, actual: &Value, at: &str) -> Result<(), String> {
    if kind(shown) != kind(actual) {
        return Err(format!(
            "{at}: shown {} ({shown}), answered {} ({actual})",
            kind(shown),
            kind(actual)
        ));
    }
    match (shown, actual) {
        (Value::Object(s), Value::Object(a)) => {
            let sk: BTreeSet<_> = s.keys().collect();
            let ak: BTreeSet<_> = a.keys().collect();
            if sk != ak {
                return Err(format!(
                    "{at}: keys shown {sk:?}, answered {ak:?} (answer: {actual})"
                ));
            }
            if let (Some(se), Some(ae)) = (s.get("error"), a.get("error")) {
                if se != ae {
                    return Err(format!("{at}.error: shown {se}, answered {ae}"));
                }
            }
            for (k, sv) in s {
                same_shape(sv, &a[k], &format!("{at}.{k}"))?;
            }
            Ok(())
        }
        (Value::Array(s), Value::Array(a)) => {
            if s.is_empty() != a.is_empty() {
                return Err(format!("{at}: shown {shown}, answered {actual}"));
            }
            for (i, av) in a.iter().enumerate() {
                if !s.iter().any(|sv| same_shape(sv, av, "").is_ok()) {
                    // Explain against the element shown at the same place (or the last).
                    let why = same_shape(&s[i.min(s.len() - 1)], av, &format!("{at}[{i}]"));
                    return Err(format!(
                        "{at}[{i}] has the shape of no shown element: {}",
                        why.unwrap_err()
                    ));
                }
            }
            match s
                .iter()
                .position(|sv| !a.iter().any(|av| same_shape(sv, av, "").is_ok()))
            {
                Some(i) => Err(format!(
                    "{at}: shown element {i} ({}) is in no answer",
                    s[i]
                )),
                None => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// Resolve a local `$ref`.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r.strip_prefix("#/components/schemas/").unwrap();
            let target = &doc["components"]["schemas"][name];
            assert!(!target.is_null(), "{r} does not resolve");
            resolve(doc, target)
        }
        None => schema,
    }
}

/// The property names an object schema allows (through `allOf`), or None for any.
fn allowed_keys(doc: &Value, schema: &Value) -> Option<BTreeSet<String>> {
    let schema = resolve(doc, schema);
    if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
        let mut keys = BTreeSet::new();
        for p in parts {
            keys.extend(allowed_keys(doc, p)?);
        }
        return Some(keys);
    }
    if schema
        .get("additionalProperties")
        .is_some_and(|a| a != false)
    {
        return None;
    }
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
}

/// Check `v` against a JSON Schema of the description, strictly: an object may hold only
/// the properties its schema names (the description must list every key answered).
fn conforms(doc: &Value, schema: &Value, v: &Value, at: &str, strict: bool) -> Result<(), String> {
    let schema = resolve(doc, schema);
    if let Some(choices) = schema.get("oneOf").and_then(Value::as_array) {
        let fits = choices
            .iter()
            .filter(|c| conforms(doc, c, v, at, true).is_ok())
            .count();
        if fits != 1 {
            return Err(format!(
                "{at}: {v} fits {fits} of the oneOf choices {schema}"
            ));
        }
    }
    if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
        for p in parts {
            conforms(doc, p, v, at, false)?;
        }
    }
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            t => vec![t.as_str().unwrap()],
        };
        let k = kind(v);
        let ok = types
            .iter()
            .any(|t| *t == k || (*t == "integer" && (v.is_u64() || v.is_i64())));
        if !ok {
            return Err(format!("{at}: {v} is not {types:?}"));
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        if !options.contains(v) {
            return Err(format!("{at}: {v} is not one of {options:?}"));
        }
    }
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        if v.as_f64().is_some_and(|n| n < min) {
            return Err(format!("{at}: {v} is below {min}"));
        }
    }
    if let Value::Object(map) = v {
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            for r in required.iter().filter_map(Value::as_str) {
                if !map.contains_key(r) {
                    return Err(format!("{at}: required key {r:?} is missing from {v}"));
                }
            }
        }
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (k, sub) in props {
                if let Some(x) = map.get(k) {
                    conforms(doc, sub, x, &format!("{at}.{k}"), true)?;
                }
            }
        }
        if strict {
            if let Some(allowed) = allowed_keys(doc, schema) {
                if let Some(extra) = map.keys().find(|k| !allowed.contains(*k)) {
                    return Err(format!("{at}: key {extra:?} is not in the description"));
                }
            }
        }
    }
    if let (Value::Array(items), Some(item)) = (v, schema.get("items")) {
        for (i, x) in items.iter().enumerate() {
            conforms(doc, item, x, &format!("{at}[{i}]"), true)?;
        }
    }
    Ok(())
}

/// The description's operation for a request path (templates like `{id}` match a segment).
fn operation<'a>(doc: &'a Value, method: &Method, path: &str) -> &'a Value {
    let path = path.split('?').next().unwrap();
    let (template, item) = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(t, _)| {
            let (ts, ps): (Vec<_>, Vec<_>) = (t.split('/').collect(), path.split('/').collect());
            ts.len() == ps.len()
                && ts
                    .iter()
                    .zip(&ps)
                    .all(|(t, p)| t == p || (t.starts_with('{') && t.ends_with('}')))
        })
        .unwrap_or_else(|| panic!("{path} is not in /openapi.json"));
    let op = &item[method.as_str().to_lowercase()];
    assert!(!op.is_null(), "{method} {template} is not in /openapi.json");
    op
}

/// Wait until every view has applied what the log holds and every booted view is up, so
/// that reads answer deterministically (the document's examples follow one another).
fn settle(server: &TestServer) {
    let node = &server.node;
    let durable = node.log.durable_index();
    let limit = Duration::from_secs(30);
    server.rt.block_on(async {
        for d in &node.disks {
            d.wait_applied(durable, limit).await.unwrap();
        }
        node.memory.wait_applied(durable, limit).await.unwrap();
        for (_, slot) in &node.indexes {
            slot.wait_applied(durable, limit).await.unwrap();
        }
    });
    // A booted view publishes its applied index just before it installs itself.
    let deadline = Instant::now() + limit;
    while node.memory.get().is_none() || node.indexes.iter().any(|(_, s)| s.get().is_none()) {
        assert!(Instant::now() < deadline, "the views did not boot");
        std::thread::yield_now();
    }
}

#[test]
fn every_curl_example_answers_as_shown() {
    let md =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/api.md")).unwrap();
    let examples = examples(&md);
    assert!(
        examples.len() >= 15,
        "found only {} curl examples",
        examples.len()
    );
    let server = TestServer::start(|c| {
        c.index_views = vec![IndexConfig {
            name: "by_name".into(),
            pointer: "/name".into(),
        }]
    });
    let http = server.http(None);
    let (_, doc) = server
        .rt
        .block_on(http.json(Method::GET, "/openapi.json", None))
        .unwrap();
    let mut failures = Vec::new();
    for e in &examples {
        settle(&server);
        let (method, path, body) = request_of(e);
        let shown = shown(e);
        let op = operation(&doc, &method, &path);
        if let Some(b) = &body {
            let schema = &op["requestBody"]["content"]["application/json"]["schema"];
            if !schema.is_null() {
                let v: Value = serde_json::from_slice(b).unwrap();
                if let Err(why) = conforms(&doc, schema, &v, "request", true) {
                    failures.push(format!("docs/api.md:{}: request: {why}", e.line));
                }
            }
        }
        let (status, answer) = server
            .rt
            .block_on(http.request(method.clone(), &path, body))
            .unwrap();
        let text = String::from_utf8_lossy(&answer).into_owned();
        let what = format!("docs/api.md:{}: {method} {path}", e.line);
        let Some((want_status, want_body)) = shown else {
            failures.push(format!(
                "{what}: the example shows no answer (`# …` lines under it); it answered \
                 {status} {text}"
            ));
            continue;
        };
        let status_ok = match want_status {
            Some(s) => status.as_u16() == s,
            None => status.is_success(),
        };
        if !status_ok {
            failures.push(format!(
                "{what}: answered {status}, shown {want_status:?}: {text}"
            ));
            continue;
        }
        let json: Option<Value> = serde_json::from_slice(&answer).ok();
        match (serde_json::from_str::<Value>(&want_body), &json) {
            (Ok(shown), Some(actual)) => {
                if let Err(why) = same_shape(&shown, actual, "answer") {
                    failures.push(format!("{what}: {why}"));
                }
            }
            (Ok(_), None) => failures.push(format!("{what}: shown JSON, answered {text:?}")),
            (Err(_), _) => {
                // A text answer (or the head of a long one): each shown line, in order.
                let mut lines = text.lines();
                for want in want_body.lines().filter(|l| *l != "…") {
                    if !lines.any(|l| l == want) {
                        failures.push(format!("{what}: line {want:?} is not in {text:?}"));
                        break;
                    }
                }
            }
        }
        let responses = &op["responses"];
        let response = match &responses[status.as_str()] {
            Value::Null => &responses["default"],
            r => r,
        };
        let schema = &response["content"]["application/json"]["schema"];
        if let (false, Some(actual)) = (schema.is_null(), &json) {
            if let Err(why) = conforms(&doc, schema, actual, "answer", true) {
                failures.push(format!("{what}: /openapi.json: {why}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
