//! `spindle gen --out FILE` writes the whole graph or nothing: the file appears complete
//! (every line a JSON write), and when the disk fills midway (a small tmpfs, as root) the
//! command fails saying so, FILE keeps what it held before and no temporary file is left.

#[path = "../../chunk/tests/common/tmpfs.rs"]
mod tmpfs;

use std::path::Path;
use std::process::Command;

fn gen(out: &Path, nodes: u64) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["gen", "--nodes", &nodes.to_string(), "--edges"])
        .arg((nodes * 4).to_string())
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "lost+found")
        .collect();
    v.sort();
    v
}

#[test]
fn gen_writes_the_whole_graph_or_leaves_the_file_alone() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("g.jsonl");
    std::fs::write(&out, "old\n").unwrap();
    let done = gen(&out, 100);
    assert!(done.status.success(), "{done:?}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.lines().count() > 400, "{} lines", text.lines().count());
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(v["item"].is_object(), "{line}");
    }
    assert_eq!(names(dir.path()), ["g.jsonl"]);
    // An ordinary file: readable by others under the usual umask, not a private temporary.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    let umask = {
        let out = Command::new("sh").args(["-c", "umask"]).output().unwrap();
        u32::from_str_radix(String::from_utf8_lossy(&out.stdout).trim(), 8).unwrap()
    };
    assert_eq!(mode, 0o666 & !umask, "mode {mode:o}");

    let Some(fs) = tmpfs::Tmpfs::mount_or_skip(1 << 20) else {
        return;
    };
    let out = fs.path().join("g.jsonl");
    std::fs::write(&out, "old\n").unwrap();
    let failed = gen(&out, 100_000);
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        !failed.status.success(),
        "a graph larger than the disk was written"
    );
    assert!(stderr.contains("No space left"), "{stderr}");
    assert!(stderr.contains("left as it was"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "old\n");
    assert_eq!(names(fs.path()), ["g.jsonl"], "a temporary file was left");
}
