//! Placeholder: the chunk crate is being built.
