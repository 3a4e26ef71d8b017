//! Placeholder: the ring crate is being built.
