//! Tracing spans over the streams of reads, so that what a read does
//! (fetches, skipped segments, retries it logs) shows under a `read` span
//! as an append's work shows under its `append` span.
//!
//! Cheap by construction: one span per call (none when no subscriber
//! listens at its level), entered on each poll; nothing per entry.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;

/// `inner`, each poll inside `span`.
pub(crate) struct Traced<S> {
    span: tracing::Span,
    inner: Pin<Box<S>>,
}

impl<S> Traced<S> {
    pub(crate) fn new(span: tracing::Span, inner: S) -> Self {
        Traced {
            span,
            inner: Box::pin(inner),
        }
    }
}

impl<S: Stream> Stream for Traced<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let this = &mut *self;
        let _entered = this.span.enter();
        this.inner.as_mut().poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn a_traced_stream_yields_what_it_wraps() {
        let span = tracing::debug_span!("read", region = 1u64);
        let items: Vec<u32> = Traced::new(span, futures::stream::iter([1, 2, 3]))
            .collect()
            .await;
        assert_eq!(items, [1, 2, 3]);
    }
}
