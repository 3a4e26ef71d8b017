//! `spindle top` without a terminal (output piped, as in a script) refuses at once with a
//! message that points to `spindle status`, instead of drawing escape codes into a pipe.

use std::process::{Command, Stdio};

#[test]
fn top_with_piped_output_points_to_spindle_status() {
    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["top", "--server", "127.0.0.1:9"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("spindle status"), "{stderr}");
    assert!(out.stdout.is_empty(), "{out:?}");
}
