//! Declares the `loom` cfg so that `RUSTFLAGS="--cfg loom"` model-checking builds are not
//! flagged as an unexpected cfg.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
}
