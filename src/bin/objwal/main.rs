//! The `objwal` command line tool.
fn main() {}
