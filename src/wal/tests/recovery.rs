//! Recovery tests.
