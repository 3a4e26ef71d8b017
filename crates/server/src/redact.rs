//! What a client is told of a server-side failure: the error's text without the node's
//! directories. The node's data directory (as configured, and as the file system resolves
//! it) reads `<data>` wherever it appears, and any other absolute path
//! (`/srv/x/00000001.seg`, in quotes or not) keeps only its last component
//! (`…/00000001.seg`), so an answer names the file without telling a client where the node
//! keeps it; the whole message goes to the node's log.

use std::path::Path;
use std::sync::{PoisonError, RwLock};

/// Directories whose names answers leave out, longest first.
static HIDDEN: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Leave `dir` (as given, and resolved) out of every message `paths` makes from now on.
pub fn hide_directory(dir: &Path) {
    let mut forms = vec![dir.display().to_string()];
    if let Ok(resolved) = dir.canonicalize() {
        forms.push(resolved.display().to_string());
    }
    let mut hidden = HIDDEN.write().unwrap_or_else(PoisonError::into_inner);
    for form in forms {
        let form = form.trim_end_matches('/').to_owned();
        if !form.is_empty() && form != "." && !hidden.contains(&form) {
            hidden.push(form);
        }
    }
    hidden.sort_by_key(|f| std::cmp::Reverse(f.len()));
}

/// `message` with the hidden directories as `<data>` and every other absolute path
/// shortened to `…/` and its last component.
pub fn paths(message: &str) -> String {
    let mut text = message.to_owned();
    for dir in HIDDEN.read().unwrap_or_else(PoisonError::into_inner).iter() {
        text = replace_path(&text, dir);
    }
    shorten_absolute(&text)
}

/// Whether `c` may stand before a path in a message.
fn before_path(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '"' | '\'' | '(' | '[' | '{' | '=' | '`' | ':' | ',' | '<'
        )
}

/// `text` with `dir` written `<data>` where it stands as a path or a path's first
/// components (so a data directory named `data` leaves words such as "metadata" alone).
fn replace_path(text: &str, dir: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while let Some(found) = text[at..].find(dir) {
        let start = at + found;
        let end = start + dir.len();
        let starts = text[..start].chars().next_back().is_none_or(before_path);
        let ends = text[end..].chars().next().is_none_or(|c| {
            c == '/' || c == ':' || !(c.is_alphanumeric() || matches!(c, '.' | '-' | '_'))
        });
        out.push_str(&text[at..start]);
        out.push_str(if starts && ends { "<data>" } else { dir });
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

fn shorten_absolute(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    let mut at_boundary = true;
    while let Some(c) = rest.chars().next() {
        // A path starts with one '/', after a space, a quote, a bracket, '=', ':' or ','
        // (not "//", as in a URL).
        if c == '/' && at_boundary && !rest.starts_with("//") {
            let end = rest
                .find(|ch: char| {
                    ch.is_whitespace()
                        || matches!(ch, '"' | '\'' | ',' | ')' | ']' | '}' | '`' | '>')
                })
                .unwrap_or(rest.len());
            let mut path = &rest[..end];
            // A trailing ':' ends a path in messages like "{path}: {error}".
            let mut tail = "";
            if let Some(stripped) = path.strip_suffix(':') {
                path = stripped;
                tail = ":";
            }
            let trimmed = path.trim_end_matches('/');
            if trimmed.len() > 1 && trimmed[1..].contains('/') {
                let name = trimmed.rsplit('/').next().unwrap_or("");
                out.push_str("…/");
                out.push_str(name);
            } else {
                out.push_str(path);
            }
            out.push_str(tail);
            rest = &rest[end..];
            at_boundary = false;
            continue;
        }
        at_boundary = before_path(c);
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{hide_directory, paths, replace_path, shorten_absolute};

    #[test]
    fn absolute_paths_keep_only_their_file_name() {
        assert_eq!(
            shorten_absolute(
                "writing /srv/data/log/00000001.seg: No space left on device (os error 28)"
            ),
            "writing …/00000001.seg: No space left on device (os error 28)"
        );
        assert_eq!(
            shorten_absolute(r#"Io { file: "/tmp/x/disk-0/000012.sst", source: "bad" }"#),
            r#"Io { file: "…/000012.sst", source: "bad" }"#
        );
        assert_eq!(shorten_absolute("at '/a/b/c'"), "at '…/c'");
        assert_eq!(shorten_absolute("(/var/lib/s/chunks/v1)"), "(…/v1)");
        assert_eq!(shorten_absolute("dir:/a/b/c,/d/e/f"), "dir:…/c,…/f");
        assert_eq!(shorten_absolute("in /a/b/views/"), "in …/views");
    }

    #[test]
    fn other_text_is_left_alone() {
        for text in [
            "",
            "a stored value is not JSON: expected value at line 1",
            "ratio 3/4 and a/b/c relative",
            "see http://example.com/a/b",
            "root /",
            "one level /etc",
            "ünïcode — text / here",
        ] {
            assert_eq!(paths(text), text);
        }
    }

    #[test]
    fn the_data_directory_is_left_out_even_relative() {
        hide_directory(std::path::Path::new("spindle-test-data-dir"));
        assert_eq!(
            paths("corrupt disk view spindle-test-data-dir/views/disk-0-of-4: bad key"),
            "corrupt disk view <data>/views/disk-0-of-4: bad key"
        );
        // Only as a path: the same letters inside other words stay.
        assert_eq!(
            replace_path("data, my-data and data/x (data)", "data"),
            "<data>, my-data and <data>/x (<data>)"
        );
        assert_eq!(
            replace_path("metadata datafile", "data"),
            "metadata datafile"
        );
    }
}
