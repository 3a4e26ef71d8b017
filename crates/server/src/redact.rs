//! What a client is told of a server-side failure: the error's text without the node's
//! directories. An absolute path in a message (`/srv/spindle/log/00000001.seg`, in quotes
//! or not) keeps only its last component (`…/00000001.seg`), so an answer names the file
//! without telling a client where the node keeps its data; the whole message goes to the
//! node's log.

/// `message` with every absolute path shortened to `…/` and its last component.
pub fn paths(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    let mut at_boundary = true;
    while let Some(c) = rest.chars().next() {
        if c == '/' && at_boundary {
            let end = rest
                .find(|ch: char| {
                    ch.is_whitespace() || matches!(ch, '"' | '\'' | ',' | ')' | ']' | '}' | '`')
                })
                .unwrap_or(rest.len());
            let mut path = &rest[..end];
            // A trailing ": " or ':' ends a path in messages like "{path}: {error}".
            let mut tail = "";
            if let Some(stripped) = path.strip_suffix(':') {
                path = stripped;
                tail = ":";
            }
            let name = path.rsplit('/').next().unwrap_or("");
            if path.len() > 1 && path[1..].contains('/') {
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
        at_boundary = c.is_whitespace() || matches!(c, '"' | '\'' | '(' | '[' | '{' | '=' | '`');
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::paths;

    #[test]
    fn absolute_paths_keep_only_their_file_name() {
        assert_eq!(
            paths("writing /srv/data/log/00000001.seg: No space left on device (os error 28)"),
            "writing …/00000001.seg: No space left on device (os error 28)"
        );
        assert_eq!(
            paths(r#"Io { file: "/tmp/x/disk-0/000012.sst", source: "bad" }"#),
            r#"Io { file: "…/000012.sst", source: "bad" }"#
        );
        assert_eq!(paths("at '/a/b/c'"), "at '…/c'");
        assert_eq!(paths("(/var/lib/s/chunks/v1)"), "(…/v1)");
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
}
