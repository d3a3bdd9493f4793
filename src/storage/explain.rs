//! What a backend's error means, in one line: the cause, then what to do.
//!
//! Responsibility: turn the error chain of an HTTP object store client
//! (object_store's, opendal's) into the message of a [`StorageError`]. Those
//! chains are long and repeat themselves (object_store's top error quotes
//! each error below it, so an `anyhow` report printed one cause six times
//! and the real one, "Connection refused", at level nine), and they carry
//! raw S3 XML and response headers. Four causes a user meets on the first
//! day are recognised and named with their fix:
//!
//! | cause | recognised by | message |
//! | --- | --- | --- |
//! | missing bucket | S3 code `NoSuchBucket` | the bucket, where, "create it or fix the bucket in the storage URL" |
//! | no credentials | a request to the instance metadata service (`/latest/api/token`, `.../security-credentials`), opendal's "failed to load signing credential" | which source gave none, "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY..." |
//! | refused credentials | S3 codes `InvalidAccessKeyId`, `SignatureDoesNotMatch`, `AccessDenied`, a 401 or 403 | "check the keys and the bucket's policy" |
//! | no server | "Connection refused", a failed name lookup, a timeout | the endpoint, "is the store running there, and is the endpoint right?" |
//!
//! Anything else is the chain condensed to one line: each level's own words
//! once (the text it repeats from the level below removed), XML reduced to
//! its `Code: Message`, opendal's response headers left out.
//!
//! Invariants: a message is one line (no newline), never holds an XML
//! document, and names the store's endpoint when the chain does. The kind
//! (transient, permanent) is decided by the adapters, not here: this only
//! words the message. The adapters keep the backend's error reachable
//! ([`StorageError::backend_error`]) but do not report it as the `source`,
//! since the message already says what it says.
//!
//! [`StorageError`]: super::StorageError
//! [`StorageError::backend_error`]: super::StorageError::backend_error

use std::error::Error as StdError;

/// A recognised cause of a failed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cause {
    /// The bucket (or container) does not exist.
    MissingBucket,
    /// No credentials could be found or fetched.
    NoCredentials,
    /// The store refused the credentials, or they lack a permission.
    Refused,
    /// Nothing answered at the endpoint (refused, unknown host, timeout).
    Unreachable,
    /// None of the above.
    Other,
}

/// The one-line message for a backend error: the cause and what to do
/// when the cause is recognised, else the condensed chain.
pub(crate) fn explain(e: &(dyn StdError + 'static)) -> String {
    explain_texts(&chain_texts(e)).1
}

/// The message of a "not found" answer to a create or a list: the bucket
/// (or the root inside it) is missing.
pub(crate) fn missing_bucket(e: &(dyn StdError + 'static)) -> String {
    match explain_texts(&chain_texts(e)) {
        (Cause::MissingBucket, message) => message,
        (_, message) => format!(
            "the bucket (or the root inside it) is missing: create it, or fix the storage URL ({message})"
        ),
    }
}

/// The cause and one-line message of a chain given as its levels' texts
/// (top first).
pub(crate) fn explain_texts(texts: &[String]) -> (Cause, String) {
    let parts = own_parts(texts);
    let all = texts.join("\n");
    let lower = all.to_ascii_lowercase();
    let root = parts.last().cloned().unwrap_or_default();
    let endpoint = endpoint(&all);
    let at = |what: &str| match &endpoint {
        Some(url) => format!("{what} {url}"),
        None => String::new(),
    };
    if lower.contains("nosuchbucket") {
        let bucket = xml_tag(&all, "BucketName")
            .map(|b| format!("the bucket {b:?}"))
            .unwrap_or_else(|| "the bucket".to_owned());
        let message = format!(
            "{bucket} does not exist{}: create it, or fix the bucket name in the storage URL",
            prefixed(" at", endpoint.as_deref())
        );
        return (Cause::MissingBucket, message);
    }
    if let Some(source) = credential_source(&lower, &all) {
        let fix = credential_fix(&lower);
        let message =
            format!("no credentials: none were configured and {source} gave none ({root}); {fix}");
        return (Cause::NoCredentials, message);
    }
    let refused_code = [
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AccessDenied",
    ]
    .into_iter()
    .find(|code| all.contains(code));
    let http_denied = [
        "status code: 401",
        "status code: 403",
        "status: 401",
        "status: 403",
    ]
    .iter()
    .any(|s| lower.contains(s));
    if refused_code.is_some() || http_denied || lower.contains("permissiondenied") {
        let what = match refused_code {
            Some(code) => {
                match xml_tag(&all, "Message").or_else(|| quoted_field(&all, "message")) {
                    Some(text) => format!("{code}: {text}"),
                    None => code.to_owned(),
                }
            }
            None => root.clone(),
        };
        let message = format!(
            "the store refused the request{} ({what}): check the credentials and that they may \
             read, write and list the bucket",
            prefixed(" at", endpoint.as_deref())
        );
        return (Cause::Refused, message);
    }
    let unreachable = if lower.contains("connection refused") {
        Some("connection refused")
    } else if lower.contains("dns error") || lower.contains("failed to lookup address") {
        Some("the host name does not resolve")
    } else if lower.contains("timed out") || lower.contains("timeout") {
        Some("no answer in time")
    } else {
        None
    };
    if let Some(what) = unreachable {
        let there = if endpoint.is_some() { " there" } else { "" };
        let message = format!(
            "{what}{}: is the store running{there}, and is the endpoint in the storage URL right? ({root})",
            at(" by")
        );
        return (Cause::Unreachable, message);
    }
    (Cause::Other, parts.join(": "))
}

/// `" {word} {value}"`, or nothing.
fn prefixed(word: &str, value: Option<&str>) -> String {
    value.map_or_else(String::new, |v| format!("{word} {v}"))
}

/// Where credentials were looked for and not found, when the chain is a
/// failed credential lookup.
fn credential_source(lower: &str, all: &str) -> Option<String> {
    let metadata = [
        "/latest/api/token",
        "/latest/meta-data/iam/security-credentials",
    ];
    if let Some(marker) = metadata.iter().find(|m| lower.contains(*m)) {
        let service = url_before(all, marker).map_or_else(
            || "the instance metadata service".to_owned(),
            |u| format!("the instance metadata service at {u}"),
        );
        return Some(service);
    }
    let loaders = [
        "failed to load signing credential",
        "no valid credential",
        "error getting credentials",
        "credential not found",
    ];
    loaders.iter().any(|m| lower.contains(m)).then(|| {
        "the provider's credential chain (environment, profile files, instance metadata)".to_owned()
    })
}

/// What to do about missing credentials, by service.
fn credential_fix(lower: &str) -> &'static str {
    if lower.contains("service: gcs") {
        "set GOOGLE_APPLICATION_CREDENTIALS or the option google_service_account, or run where \
         the VM's service account is available"
    } else if lower.contains("service: azblob") {
        "give AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN (or the options \
         account_key, sas_token)"
    } else {
        "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or pass aws_access_key_id and \
         aws_secret_access_key as options), or run where an instance role or web identity \
         provides them"
    }
}

/// The texts of an error and its sources, top first.
pub(crate) fn chain_texts(e: &(dyn StdError + 'static)) -> Vec<String> {
    let mut texts = Vec::new();
    let mut current = Some(e);
    while let Some(e) = current {
        texts.push(e.to_string());
        current = e.source();
    }
    texts
}

/// Each level's own words: its text without what it repeats of the level
/// below, with XML and response headers condensed, on one line; empty and
/// repeated parts dropped.
fn own_parts(texts: &[String]) -> Vec<String> {
    let mut parts: Vec<String> = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let mut own = text.clone();
        if let Some(next) = texts.get(i + 1).filter(|n| !n.is_empty()) {
            if let Some(at) = own.rfind(next.as_str()) {
                own.replace_range(at..at + next.len(), "");
            }
        }
        let own = one_line(&condense(&own));
        let own = own
            .trim()
            .trim_end_matches([':', '-', ',', '=', '>', ' '])
            .trim_end_matches(", source")
            .trim_end_matches([':', '-', ',', '=', '>', ' '])
            .trim();
        if own.is_empty() || parts.iter().any(|p| p == own) {
            continue;
        }
        parts.push(own.to_owned());
    }
    parts
}

/// Whitespace runs (newlines included) as single spaces.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `s` with an XML error document reduced to `Code: Message` and opendal's
/// `response: Parts { .. }` left out.
fn condense(s: &str) -> String {
    let mut out = s.to_owned();
    if let Some(start) = out.find("<?xml").or_else(|| out.find("<Error>")) {
        let end = out
            .rfind("</Error>")
            .map_or(out.len(), |e| e + "</Error>".len())
            .max(start);
        let doc = out.get(start..end).unwrap_or_default().to_owned();
        let code = xml_tag(&doc, "Code");
        let message = xml_tag(&doc, "Message");
        let short = match (code, message) {
            (Some(c), Some(m)) => format!("{c}: {m}"),
            (Some(c), None) => c,
            (None, Some(m)) => m,
            (None, None) => "an XML error document".to_owned(),
        };
        out.replace_range(start..end, &short);
    }
    while let Some(start) = out.find("response: Parts {") {
        let Some(len) = braced_len(out.get(start..).unwrap_or_default()) else {
            break;
        };
        let mut end = start + len;
        if out.get(end..end + 2) == Some(", ") {
            end += 2;
        }
        out.replace_range(start..end, "");
    }
    out
}

/// The length of `s` up to and including the brace that closes its first
/// `{`.
fn braced_len(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// The text of the first `<tag>...</tag>`.
fn xml_tag(s: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = s.find(&open)? + open.len();
    let len = s.get(start..)?.find(&format!("</{tag}>"))?;
    let text = s.get(start..start + len)?.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// The value of `field: "value"` (opendal's `S3Error { code: "..", message: ".." }`).
fn quoted_field(s: &str, field: &str) -> Option<String> {
    let key = format!("{field}: \"");
    let start = s.find(&key)? + key.len();
    let len = s.get(start..)?.find('"')?;
    let text = s.get(start..start + len)?;
    (!text.is_empty()).then(|| text.to_owned())
}

/// The scheme and authority of the first `http://` or `https://` URL.
fn endpoint(s: &str) -> Option<String> {
    let start = s.find("http://").or_else(|| s.find("https://"))?;
    let rest = s.get(start..)?;
    let scheme_end = rest.find("://")? + 3;
    let authority = rest.get(scheme_end..)?;
    let len = authority
        .find(['/', '?', ',', ' ', ')', '}'])
        .unwrap_or(authority.len());
    Some(format!(
        "{}{}",
        rest.get(..scheme_end)?,
        authority.get(..len)?
    ))
}

/// The scheme and authority of the URL that ends just before `marker`.
fn url_before(s: &str, marker: &str) -> Option<String> {
    let at = s.find(marker)?;
    let before = s.get(..at)?;
    let start = before
        .rfind("http://")
        .or_else(|| before.rfind("https://"))?;
    endpoint(s.get(start..)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(levels: &[&str]) -> Vec<String> {
        levels.iter().map(|s| (*s).to_owned()).collect()
    }

    /// What object_store's S3 client answers for a PUT into a bucket that
    /// does not exist (moto's body; S3's has the same fields).
    const NO_BUCKET_XML: &str = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<Error><Code>NoSuchBucket</Code>\
        <Message>The specified bucket does not exist</Message><BucketName>no-such-bucket-x</BucketName>\
        <RequestId>uDf5</RequestId></Error>";

    #[test]
    fn a_missing_bucket_is_named_with_its_fix_and_without_xml() {
        let put = format!(
            "Error performing PUT http://127.0.0.1:55937/no-such-bucket-x/p/objects/x in 4.8ms - \
             Server returned non-2xx status code: 404 Not Found: {NO_BUCKET_XML}"
        );
        let status = format!("Server returned non-2xx status code: 404 Not Found: {NO_BUCKET_XML}");
        let chain = texts(&[
            &format!("Object at location p/objects/x not found: {put}"),
            &put,
            &status,
        ]);
        let (cause, message) = explain_texts(&chain);
        assert_eq!(cause, Cause::MissingBucket);
        assert_eq!(
            message,
            "the bucket \"no-such-bucket-x\" does not exist at http://127.0.0.1:55937: create it, \
             or fix the bucket name in the storage URL"
        );
        // opendal's wording of the same answer.
        let opendal = "ConfigInvalid (permanent) at write, context: { service_operation: PutObject, \
            uri: http://127.0.0.1:55937/no-such-bucket-x/p/objects/x, response: Parts { status: 404, \
            headers: {\"server\": \"amazon.com\"} }, service: s3, path: p/objects/x, written: 1 } => \
            S3Error { code: \"NoSuchBucket\", message: \"The specified bucket does not exist\" }";
        let (cause, message) = explain_texts(&texts(&[opendal]));
        assert_eq!(cause, Cause::MissingBucket);
        assert!(
            message.contains("http://127.0.0.1:55937") && !message.contains('<'),
            "{message}"
        );
    }

    #[test]
    fn missing_credentials_name_the_source_that_gave_none_not_the_metadata_request() {
        // object_store without keys asks the instance metadata service.
        for (root, says) in [
            ("Connection refused (os error 111)", "Connection refused"),
            (
                "Server returned non-2xx status code: 403 Forbidden: ",
                "403 Forbidden",
            ),
        ] {
            let put = format!(
                "Error performing PUT http://169.254.169.254/latest/api/token in 1ms - HTTP error: {root}"
            );
            let chain = texts(&[&format!("Generic S3 error: {put}"), &put, root]);
            let (cause, message) = explain_texts(&chain);
            assert_eq!(cause, Cause::NoCredentials, "{message}");
            assert!(
                message.starts_with(
                    "no credentials: none were configured and the instance metadata service at \
                     http://169.254.169.254 gave none"
                ) && message.contains(says)
                    && message.contains("export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
                "{message}"
            );
            assert!(!message.contains("/latest/api/token"), "{message}");
        }
        let opendal = "Unexpected (permanent) at write, context: { called: reqsign::Sign, service: s3, \
            path: p/objects/x, written: 1 } => signing http request, source: failed to load signing credential";
        let (cause, message) =
            explain_texts(&texts(&[opendal, "failed to load signing credential"]));
        assert_eq!(cause, Cause::NoCredentials);
        assert!(message.contains("credential chain"), "{message}");
    }

    #[test]
    fn a_refused_connection_names_the_endpoint_and_what_to_check() {
        let put = "Error performing PUT http://127.0.0.1:1/objwal-test/p/objects/x in 463µs - HTTP error: error sending request";
        let chain = texts(&[
            &format!("Generic S3 error: {put}"),
            put,
            "HTTP error: error sending request",
            "HTTP error: error sending request",
            "error sending request",
            "client error (Connect)",
            "tcp connect error",
            "Connection refused (os error 111)",
        ]);
        let (cause, message) = explain_texts(&chain);
        assert_eq!(cause, Cause::Unreachable);
        assert_eq!(
            message,
            "connection refused by http://127.0.0.1:1: is the store running there, and is the \
             endpoint in the storage URL right? (Connection refused (os error 111))"
        );
    }

    #[test]
    fn refused_credentials_say_what_to_check() {
        let body = "<?xml version=\"1.0\"?><Error><Code>InvalidAccessKeyId</Code><Message>The AWS \
            Access Key Id you provided does not exist in our records.</Message></Error>";
        let chain = texts(&[&format!(
            "Error performing GET http://s3.example.com/b?list-type=2 in 2ms - Server returned \
             non-2xx status code: 403 Forbidden: {body}"
        )]);
        let (cause, message) = explain_texts(&chain);
        assert_eq!(cause, Cause::Refused);
        assert!(
            message.contains("InvalidAccessKeyId: The AWS Access Key Id you provided")
                && message.contains("check the credentials")
                && !message.contains('<'),
            "{message}"
        );
    }

    #[test]
    fn an_unknown_chain_is_condensed_to_each_levels_own_words_once() {
        let chain = texts(&[
            "Generic S3 error: Error performing GET http://h/b/k in 1ms - Server returned non-2xx \
             status code: 416 Range Not Satisfiable: <?xml version=\"1.0\"?>\n<Error><Code>InvalidRange</Code>\
             <Message>The requested range is not satisfiable</Message></Error>",
            "Error performing GET http://h/b/k in 1ms - Server returned non-2xx status code: 416 \
             Range Not Satisfiable: <?xml version=\"1.0\"?>\n<Error><Code>InvalidRange</Code>\
             <Message>The requested range is not satisfiable</Message></Error>",
        ]);
        let (cause, message) = explain_texts(&chain);
        assert_eq!(cause, Cause::Other);
        assert_eq!(
            message,
            "Generic S3 error: Error performing GET http://h/b/k in 1ms - Server returned non-2xx \
             status code: 416 Range Not Satisfiable: InvalidRange: The requested range is not satisfiable"
        );
        assert!(!message.contains('\n'));
    }
}
