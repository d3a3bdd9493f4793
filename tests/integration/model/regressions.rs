//! Minimal cases the model test found, kept as regression tests.
