//! Counting storage wrapper (being written).
