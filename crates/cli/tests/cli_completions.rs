//! `spindle completions bash|zsh|fish` prints a completion script for each shell that names
//! the subcommands, and refuses a shell it does not know.

use std::process::Command;

fn completions(shell: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["completions", shell])
        .output()
        .unwrap()
}

#[test]
fn each_shell_gets_a_script_naming_the_subcommands() {
    for shell in ["bash", "zsh", "fish"] {
        let out = completions(shell);
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.len() > 1000, "{shell}: {script}");
        for sub in ["serve", "status", "top", "load", "inspect", "completions"] {
            assert!(script.contains(sub), "{shell} script does not name {sub}");
        }
    }
    // Each in its own dialect.
    assert!(String::from_utf8(completions("bash").stdout)
        .unwrap()
        .contains("complete -F"));
    assert!(String::from_utf8(completions("zsh").stdout)
        .unwrap()
        .starts_with("#compdef spindle"));
    assert!(String::from_utf8(completions("fish").stdout)
        .unwrap()
        .contains("complete -c spindle"));
}

#[test]
fn an_unknown_shell_is_refused() {
    let out = completions("tcsh");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid value"));
}
