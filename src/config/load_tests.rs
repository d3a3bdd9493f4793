//! Unit tests of loading a config from TOML and environment variables.

use std::path::PathBuf;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::config::{AckMode, CorruptionPolicy};

/// The parts of an `Error::Config`, or a panic naming what came instead.
fn config_error(result: Result<Config, Error>) -> (Option<PathBuf>, Option<usize>, String, String) {
    match result {
        Err(e @ Error::Config { .. }) => {
            let text = e.to_string();
            let Error::Config {
                file, line, field, ..
            } = e
            else {
                unreachable!()
            };
            (file, line, field.unwrap_or_default(), text)
        }
        other => panic!("expected Error::Config, got {other:?}"),
    }
}

#[test]
fn a_typo_in_a_file_names_the_file_the_line_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wal.toml");
    std::fs::write(
        &path,
        "# tuned for S3\nmax_batch_bytes = \"4MiB\"\nflush_intervall = \"20ms\"\n",
    )
    .unwrap();
    let (file, line, field, text) = config_error(Config::from_file(&path));
    assert_eq!(file.as_deref(), Some(path.as_path()));
    assert_eq!(line, Some(3));
    assert_eq!(field, "flush_intervall");
    for part in [
        &path.display().to_string(),
        "line 3",
        "flush_intervall",
        "flush_interval",
    ] {
        assert!(text.contains(part), "{text:?} does not say {part:?}");
    }
}

#[test]
fn a_bad_value_names_its_line_and_field() {
    let text = "ack_mode = \"durable\"\n\n  max_inflight_creates = \"four\"\n";
    let (file, line, field, message) = config_error(Config::from_toml_str(text));
    assert_eq!(
        (file, line, field.as_str()),
        (None, Some(3), "max_inflight_creates")
    );
    assert!(message.contains("\"four\""), "{message}");
    let (_, line, field, message) = config_error(Config::from_toml_str("ack_mode = \"fast\""));
    assert_eq!((line, field.as_str()), (Some(1), "ack_mode"));
    assert!(message.contains("durable"), "{message}");
    let (_, line, _, _) = config_error(Config::from_toml_str("a = = 1"));
    assert_eq!(line, Some(1));
}

#[test]
fn a_value_validate_refuses_names_the_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wal.toml");
    std::fs::write(&path, "ack_mode = \"enqueued\"\nmax_batch_bytes = 10\n").unwrap();
    let (file, line, field, text) = config_error(Config::from_file(&path));
    assert_eq!(file.as_deref(), Some(path.as_path()));
    assert_eq!((line, field.as_str()), (Some(2), "max_batch_bytes"));
    assert!(text.contains("outside 1 KiB"), "{text}");
}

#[test]
fn a_missing_file_is_named() {
    let path = PathBuf::from("/nonexistent/objwal.toml");
    let (file, line, _, text) = config_error(Config::from_file(&path));
    assert_eq!((file, line), (Some(path), None));
    assert!(text.contains("/nonexistent/objwal.toml") && text.contains("cannot read"));
}

#[test]
fn an_empty_text_is_the_default() {
    assert_eq!(Config::from_toml_str("").unwrap(), Config::default());
}

#[test]
fn the_example_file_is_the_default_and_names_every_field() {
    let text = include_str!("../../objwal.toml");
    assert_eq!(Config::from_toml_str(text).unwrap(), Config::default());
    let table: toml::Table = toml::from_str(text).unwrap();
    let mut keys: Vec<_> = table.keys().map(String::as_str).collect();
    let mut fields = field_names().to_vec();
    keys.sort_unstable();
    fields.sort_unstable();
    assert_eq!(keys, fields, "objwal.toml must list every Config field");
}

#[test]
fn field_names_are_those_of_the_serialized_config() {
    let table = toml::Table::try_from(Config::default()).unwrap();
    let mut keys: Vec<_> = table.keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut fields = field_names().to_vec();
    fields.sort_unstable();
    assert!(!fields.is_empty());
    assert_eq!(keys, fields);
}

#[test]
fn environment_variables_override_fields_of_a_base() {
    let base =
        Config::from_toml_str("max_batch_bytes = \"2MiB\"\nmax_inflight_creates = 2").unwrap();
    let config = base
        .clone()
        .with_vars(
            "OBJWAL_",
            [
                ("OBJWAL_FLUSH_INTERVAL", "20ms"),
                ("OBJWAL_ACK_MODE", "enqueued"),
                ("OBJWAL_MAX_INFLIGHT_CREATES", "16"),
                ("OBJWAL_ON_CORRUPTED_SEGMENT", "\"fail\""),
                ("OTHER_MAX_BATCH_BYTES", "1"),
                ("PATH", "/bin"),
            ],
        )
        .unwrap();
    let expected = Config {
        flush_interval: Duration::from_millis(20),
        ack_mode: AckMode::Enqueued,
        max_inflight_creates: 16,
        on_corrupted_segment: CorruptionPolicy::Fail,
        ..base.clone()
    };
    assert_eq!(config, expected);
    assert_eq!(config.max_batch_bytes, 2 << 20, "the base is kept");
    let none: [(&str, &str); 0] = [];
    assert_eq!(base.clone().with_vars("OBJWAL_", none).unwrap(), base);
}

#[test]
fn bad_environment_variables_are_named() {
    // (variables, the field named, what the message says)
    for (vars, field, says) in [
        (
            &[("OBJWAL_FLUSH_INTERVALL", "1s")][..],
            "",
            "environment variable OBJWAL_FLUSH_INTERVALL: names no config field (known: OBJWAL_CREATE_IF_MISSING, OBJWAL_FLUSH_INTERVAL,",
        ),
        (
            &[("OBJWAL_flush_interval", "1s")],
            "flush_interval",
            "environment variable OBJWAL_flush_interval: write it OBJWAL_FLUSH_INTERVAL",
        ),
        (
            &[("OBJWAL_ACK_MODE", "enqueued"), ("OBJWAL_MAX_BATCH_BYTES", "big")],
            "max_batch_bytes",
            "environment variable OBJWAL_MAX_BATCH_BYTES: \"big\": invalid size",
        ),
        (
            &[("OBJWAL_MAX_INFLIGHT_CREATES", "0")],
            "max_inflight_creates",
            "environment variable OBJWAL_MAX_INFLIGHT_CREATES: 0 is outside 1 ..= 64",
        ),
        (&[("OBJWAL_", "x")], "", "environment variable OBJWAL_: names no"),
    ] {
        let (file, line, named, text) =
            config_error(Config::default().with_vars("OBJWAL_", vars.iter().copied()));
        assert_eq!((file, line, named.as_str()), (None, None, field), "{vars:?}");
        assert!(text.contains(says), "{vars:?}: {text:?} does not say {says:?}");
    }
    let (_, _, _, text) = config_error(Config::default().with_vars("", [("A", "b")]));
    assert!(text.contains("prefix is empty"), "{text}");
    // A base that validate refuses is named by its field, not a variable.
    let base = Config {
        recovery_concurrency: 0,
        ..Config::default()
    };
    let none: [(&str, &str); 0] = [];
    let (_, _, named, text) = config_error(base.with_vars("OBJWAL_", none));
    assert_eq!(named, "recovery_concurrency");
    assert!(!text.contains("environment variable"), "{text}");
}

/// Issue 21, item 7: `Config::from_env("OBJWAL_")` failed in a shell where
/// README's `eval "$(scripts/s3-test-server)"` exported
/// `OBJWAL_S3_ENDPOINT`. The tooling's variables are passed over; a typo
/// of a field is still refused.
#[test]
fn the_tooling_variables_are_passed_over_and_typos_still_refused() {
    let vars = [
        ("OBJWAL_S3_ENDPOINT", "http://127.0.0.1:9000"),
        ("OBJWAL_S3_PID", "4242"),
        ("OBJWAL_FENCE_SEED", "7"),
        ("OBJWAL_CRASH_DIR", "/tmp/x"),
        ("OBJWAL_FLUSH_INTERVAL", "20ms"),
        ("OBJWAL_CREATE_IF_MISSING", "false"),
    ];
    let config = Config::default().with_vars("OBJWAL_", vars).unwrap();
    assert_eq!(config.flush_interval, Duration::from_millis(20));
    assert!(!config.create_if_missing);
    assert_eq!(
        Config {
            flush_interval: Duration::from_millis(100),
            create_if_missing: true,
            ..config
        },
        Config::default()
    );
    let (_, _, _, text) =
        config_error(Config::default().with_vars("OBJWAL_", [("OBJWAL_S3_ENDPOINTS", "x")]));
    assert!(
        text.contains("OBJWAL_S3_ENDPOINTS: names no config field"),
        "{text}"
    );
    // Through the process environment, under a prefix of this test's own.
    std::env::set_var("OBJWAL_ENVTEST_S3_ENDPOINT", "http://127.0.0.1:9000");
    std::env::set_var("OBJWAL_ENVTEST_MAX_INFLIGHT_CREATES", "2");
    let config = Config::from_env("OBJWAL_ENVTEST_");
    std::env::remove_var("OBJWAL_ENVTEST_S3_ENDPOINT");
    std::env::remove_var("OBJWAL_ENVTEST_MAX_INFLIGHT_CREATES");
    assert_eq!(config.unwrap().max_inflight_creates, 2);
}

#[test]
fn from_env_reads_the_process_environment() {
    // Nothing carries this prefix: the default, unchanged.
    assert_eq!(
        Config::from_env("OBJWAL_TEST_UNUSED_PREFIX_").unwrap(),
        Config::default()
    );
    // `cargo test` sets CARGO_PKG_NAME and its siblings, none a config field:
    // refused by name, which shows the environment was read.
    let (_, _, _, text) = config_error(Config::from_env("CARGO_PKG_"));
    assert!(text.contains("environment variable CARGO_PKG_"), "{text}");
}

#[allow(
    clippy::needless_update,
    reason = "fields added later keep their defaults"
)]
fn any_config() -> impl Strategy<Value = Config> {
    let duration = (0u64..100_000, 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n));
    let size = prop_oneof![any::<u64>(), (0u64..1 << 20).prop_map(|n| n << 20)];
    (
        (duration.clone(), size.clone(), any::<bool>(), size),
        (duration, any::<bool>(), any::<usize>(), any::<usize>()),
    )
        .prop_map(|((fi, mb, enq, mu), (ma, fail, ic, rc))| Config {
            flush_interval: fi,
            max_batch_bytes: mb,
            ack_mode: if enq {
                AckMode::Enqueued
            } else {
                AckMode::Durable
            },
            max_unpersisted_bytes: mu,
            max_unpersisted_age: ma,
            on_corrupted_segment: if fail {
                CorruptionPolicy::Fail
            } else {
                CorruptionPolicy::Skip
            },
            max_inflight_creates: ic % (1 << 40),
            recovery_concurrency: rc % (1 << 40),
            ..Config::default()
        })
}

proptest! {
    #[test]
    fn the_effective_config_prints_and_parses_back_equal(config in any_config()) {
        let text = toml::to_string(&config).unwrap();
        prop_assert_eq!(toml::from_str::<Config>(&text).unwrap(), config.clone(), "{}", text);
        let json = serde_json::to_string(&config).unwrap();
        prop_assert_eq!(serde_json::from_str::<Config>(&json).unwrap(), config, "{}", json);
    }
}

#[test]
fn a_printed_config_reads_like_the_example_file() {
    let text = toml::to_string(&Config::default()).unwrap();
    for line in [
        "flush_interval = \"100ms\"",
        "max_batch_bytes = \"8MiB\"",
        "ack_mode = \"durable\"",
    ] {
        assert!(text.contains(line), "{text}");
    }
    assert_eq!(Config::from_toml_str(&text).unwrap(), Config::default());
}
